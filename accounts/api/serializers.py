"""Request validation and response shapes for projects, sections, members and tokens (SPEC §3).

Requests are strict: unknown fields are 400, JSON types are never coerced (`"5"`, `5.0`, `"yes"` are 400).
Serializers validate and render; they never save.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from accounts import services
from accounts.models import SLUG_RE, ApiToken, Posting, Visibility
from config.api import (
    JsonIntegerField,
    QueryBooleanField,
    StrictBooleanField,
    StrictIntegerField,
    StrictQuerySerializer,
    StrictSerializer,
)
from config.errors import InvalidRequest
from config.fields import NAME_PATTERN, StrictRegexField, TextChoiceField
from stores.api.pagination import DEFAULT_LIMIT, MAX_LIMIT
from stores.api.serializers import CursorField, ListMetaSerializer, NameField, handle_field

TOKEN_NAME_MAX_CHARS = services.TOKEN_NAME_MAX_CHARS
TOKEN_MAX_DAYS = 3650


SLUG_RULE = "1–64 ASCII letters, digits, '_' or '-', starting and ending with a letter or digit"


def slug_field(**kwargs) -> StrictRegexField:
    return StrictRegexField(
        SLUG_RE,
        max_length=64,
        error_messages={"invalid": f"Must be {SLUG_RULE}."},  # DRF's says only that "the pattern" failed
        help_text=f"{SLUG_RULE}; unique regardless of case; not UUID-shaped, not `me`.",
        **kwargs,
    )


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": TOKEN_NAME_MAX_CHARS, "pattern": NAME_PATTERN})
class TokenNameField(serializers.CharField):
    """A token's label: 1–100 characters, the display-name rule (`stores.validation.name_problem`)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(min_length=1, max_length=TOKEN_NAME_MAX_CHARS, **kwargs)

    def to_internal_value(self, data):
        try:
            return services.clean_token_name(data)
        except InvalidRequest as exc:
            raise serializers.ValidationError(exc.message) from None


class ListQuerySerializer(StrictQuerySerializer):
    """`cursor`, `limit` (1–100, default 20)."""

    cursor = CursorField()
    limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


class ParentListQuerySerializer(ListQuerySerializer):
    """GET /projects and /sections: `member=true` keeps those you are an active member of."""

    member = QueryBooleanField(required=False, default=False, help_text="`true`: only yours.")


# --- projects ------------------------------------------------------------------------------------


class ProjectSerializer(serializers.Serializer):
    """A project (SPEC §3) with the caller's active `role` in it (null when not a member)."""

    id = serializers.UUIDField()
    slug = serializers.CharField()
    name = serializers.CharField()
    visibility = serializers.ChoiceField(choices=Visibility.choices)
    created_at = serializers.DateTimeField()
    role = serializers.ChoiceField(
        choices=["owner", "member"], source="caller_role", allow_null=True, help_text="Your role; null if none."
    )


class ProjectCreateSerializer(StrictSerializer):
    """POST /projects: `{slug, name?, visibility?}`; private unless `visibility` is "public"."""

    slug = slug_field()
    name = NameField(required=False, help_text="Default: the slug.")
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False, default=Visibility.PRIVATE)


class ProjectUpdateSerializer(StrictSerializer):
    """PATCH /projects/{id|slug}: any of `slug`, `name`, `visibility`."""

    slug = slug_field(required=False)
    name = NameField(required=False)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)


class ProjectMemberSerializer(serializers.Serializer):
    """One membership of a project: `{handle, role, active, created_at}`."""

    handle = serializers.CharField(source="user.handle")
    role = serializers.ChoiceField(choices=["owner", "member"])
    active = serializers.BooleanField()
    created_at = serializers.DateTimeField()


@extend_schema_serializer(component_name="ProjectMembership")
class ProjectMemberRequestSerializer(StrictSerializer):
    """POST /projects/{id|slug}/members: `{handle, role?, active?}`; `active: false` removes."""

    handle = handle_field()
    role = serializers.ChoiceField(choices=["owner", "member"], required=False, help_text="New members: member.")
    active = StrictBooleanField(required=False, default=True)


# --- sections ------------------------------------------------------------------------------------

SECTION_ROLE_CHOICES = list(services.SECTION_ROLES)


class SectionSerializer(serializers.Serializer):
    """A forum section (board) with the caller's active `role` in it (null when not a member)."""

    id = serializers.UUIDField()
    slug = serializers.CharField()
    name = serializers.CharField()
    visibility = serializers.ChoiceField(choices=Visibility.choices)
    open_to_all_posters = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    role = serializers.SerializerMethodField()

    @extend_schema_field(serializers.BooleanField(help_text="Every active user who can read it may post."))
    def get_open_to_all_posters(self, section) -> bool:
        return section.posting == Posting.OPEN

    @extend_schema_field(serializers.ChoiceField(choices=SECTION_ROLE_CHOICES, allow_null=True))
    def get_role(self, section) -> str | None:
        if section.caller_role is None:
            return None
        if section.caller_role == "owner":
            return "owner"
        return "poster" if section.caller_can_post else "reader"


class SectionCreateSerializer(StrictSerializer):
    """POST /sections (staff): `{slug, name?, visibility?, open_to_all_posters?}`; private by default."""

    slug = slug_field()
    name = NameField(required=False, help_text="Default: the slug.")
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False, default=Visibility.PRIVATE)
    open_to_all_posters = StrictBooleanField(required=False, default=False)


class SectionUpdateSerializer(StrictSerializer):
    """PATCH /sections/{id|slug}: any of `slug`, `name`, `visibility`, `open_to_all_posters`."""

    slug = slug_field(required=False)
    name = NameField(required=False)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)
    open_to_all_posters = StrictBooleanField(required=False)


class SectionMemberSerializer(serializers.Serializer):
    """One membership of a section: role `owner` | `poster` | `reader` (reads, may not post)."""

    handle = serializers.CharField(source="user.handle")
    role = serializers.SerializerMethodField()
    active = serializers.BooleanField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(serializers.ChoiceField(choices=SECTION_ROLE_CHOICES))
    def get_role(self, membership) -> str:
        return services.section_role(membership)


@extend_schema_serializer(component_name="SectionMembership")
class SectionMemberRequestSerializer(StrictSerializer):
    """POST /sections/{id|slug}/members: `{handle, role?, active?}`; `active: false` removes."""

    handle = handle_field()
    role = serializers.ChoiceField(choices=SECTION_ROLE_CHOICES, required=False, help_text="New members: poster.")
    active = StrictBooleanField(required=False, default=True)


# --- tokens --------------------------------------------------------------------------------------


class TokenSerializer(serializers.Serializer):
    """One of the caller's API tokens: never the secret (only its `prefix`)."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The first 12 characters of the secret, to recognise it.")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=services.ALL_SCOPES))
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    current = serializers.SerializerMethodField()

    @extend_schema_field(serializers.BooleanField(help_text="true for the token that made this request."))
    def get_current(self, token: ApiToken) -> bool:
        caller = self.context.get("caller")
        return isinstance(caller, ApiToken) and caller.pk == token.pk


class NewTokenSerializer(TokenSerializer):
    """A token just created: `token` is its secret, shown this once and never again."""

    token = serializers.CharField(help_text="The secret (`mem_…`). Shown once; only its SHA-256 is stored.")


UNKNOWN_SCOPE = '"{input}" is not a scope; the scopes: ' + ", ".join(services.ALL_SCOPES) + "."


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "enum": list(services.ALL_SCOPES)},
        "minItems": 1,
        "maxItems": len(services.ALL_SCOPES),
        "uniqueItems": True,
        # memories:write needs agent:read (TokenCreateSerializer.validate_scopes): the allowed sets, each order.
        "enum": [["agent:read"], ["agent:read", "memories:write"], ["memories:write", "agent:read"]],
    }
)
class ScopeListField(serializers.ListField):
    """A token's scopes: `agent:read`, optionally with `memories:write` (never that alone)."""


class TokenCreateSerializer(StrictSerializer):
    """POST /me/tokens: `{name, scopes, expires_in_days?}`; scopes at most the calling token's."""

    name = TokenNameField()
    scopes = ScopeListField(
        child=TextChoiceField(
            choices=services.ALL_SCOPES,
            error_messages={"invalid_choice": UNKNOWN_SCOPE},
        ),
        min_length=1,
        max_length=len(services.ALL_SCOPES),
    )
    expires_in_days = JsonIntegerField(
        required=False,
        min_value=1,
        max_value=TOKEN_MAX_DAYS,
        help_text="Whole days until it expires (1–3650). Omitted: never, or the calling token's expiry if it has one.",
    )

    def validate_scopes(self, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise serializers.ValidationError("Each scope at most once.")
        try:
            return services.normalise_scopes(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


# --- envelopes -----------------------------------------------------------------------------------


@extend_schema_field({"type": "object", "properties": {}, "additionalProperties": False})
class EmptyMetaField(serializers.DictField):
    """An empty `meta` object."""


class MemberMetaSerializer(serializers.Serializer):
    created = serializers.BooleanField(help_text="true when this request created the membership (201).")


def _envelope(name: str, data: serializers.Serializer, meta: serializers.Serializer) -> type[serializers.Serializer]:
    return type(name, (serializers.Serializer,), {"data": data, "meta": meta, "__module__": __name__})


ProjectEnvelopeSerializer = _envelope("ProjectEnvelopeSerializer", ProjectSerializer(), EmptyMetaField())
ProjectListEnvelopeSerializer = _envelope(
    "ProjectListEnvelopeSerializer", ProjectSerializer(many=True), ListMetaSerializer()
)
ProjectMemberEnvelopeSerializer = _envelope(
    "ProjectMemberEnvelopeSerializer", ProjectMemberSerializer(), MemberMetaSerializer()
)
ProjectMemberListEnvelopeSerializer = _envelope(
    "ProjectMemberListEnvelopeSerializer", ProjectMemberSerializer(many=True), ListMetaSerializer()
)
SectionEnvelopeSerializer = _envelope("SectionEnvelopeSerializer", SectionSerializer(), EmptyMetaField())
SectionListEnvelopeSerializer = _envelope(
    "SectionListEnvelopeSerializer", SectionSerializer(many=True), ListMetaSerializer()
)
SectionMemberEnvelopeSerializer = _envelope(
    "SectionMemberEnvelopeSerializer", SectionMemberSerializer(), MemberMetaSerializer()
)
SectionMemberListEnvelopeSerializer = _envelope(
    "SectionMemberListEnvelopeSerializer", SectionMemberSerializer(many=True), ListMetaSerializer()
)
TokenEnvelopeSerializer = _envelope("TokenEnvelopeSerializer", TokenSerializer(), EmptyMetaField())
NewTokenEnvelopeSerializer = _envelope("NewTokenEnvelopeSerializer", NewTokenSerializer(), EmptyMetaField())
TokenListEnvelopeSerializer = _envelope("TokenListEnvelopeSerializer", TokenSerializer(many=True), ListMetaSerializer())
