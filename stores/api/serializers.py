"""Store-level Memories serializers (SPEC §3, §4, §8): validate requests, render stores. They never save."""

from __future__ import annotations

import re

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.models import HANDLE_RE, HANDLE_RULE, Visibility
from accounts.permissions import token_scopes
from config.api import StrictBooleanField, StrictIntegerField, StrictQuerySerializer, StrictSerializer, Utf8TextField
from config.fields import NAME_PATTERN, UUID_PATTERN, SignedTokenField, StrictRegexField, canonical_uuid
from stores import validation
from stores.api.pagination import DEFAULT_LIMIT, MAX_LIMIT
from stores.models import DESCRIPTION_MAX_CHARS, NAME_MAX_CHARS, Scope, Store
from stores.selectors import permissions_of

SUBJECT_MAX_CHARS = 64  # handles and slugs are ≤64 ASCII characters, UUIDs 36
CURSOR_MAX_CHARS = 1024
SEARCH_TEXT_MAX_CHARS = 256
# `q` must hold a character that is not white space — white space as JSON Schema patterns (ECMA-262 `\s`)
# define it, spelled out so the server's check and the OpenAPI `pattern` are the same set. Python's own
# `str.isspace` also counts U+001C–U+001F and U+0085, which a schema-valid request may send (schemathesis).
_NOT_BLANK = r"[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
BIGINT_MAX = 2**63 - 1


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": NAME_MAX_CHARS, "pattern": NAME_PATTERN})
class NameField(serializers.CharField):
    """A display name (stores, projects, sections): `stores.validation.clean_name` — 1–255 characters, no
    control characters, line separators or invisible formatting characters, a visible character; its 400 names
    the field."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(min_length=1, max_length=NAME_MAX_CHARS, **kwargs)

    def to_internal_value(self, data):
        return validation.clean_name(data, field=self.field_name)


def handle_field(**kwargs) -> StrictRegexField:
    """A user's handle in a request (share, members): a string matching HANDLE_RE, one message when it does not."""
    return StrictRegexField(
        HANDLE_RE,
        max_length=64,
        error_messages={"invalid": f"Must be a handle: {HANDLE_RULE}."},
        help_text="A user's handle (case-insensitive).",
        **kwargs,
    )


class CursorField(SignedTokenField):
    """An opaque cursor exactly as `meta.next_cursor` returned it (checked by `stores.api.pagination`)."""

    def __init__(self, **kwargs):
        super().__init__(max_length=CURSOR_MAX_CHARS, **kwargs)


# --- rendering --------------------------------------------------------------------------------------


class StoreSubjectSerializer(serializers.Serializer):
    """The subject of a store: `{id, handle}` for a user, `{id, slug, name}` for a project or section."""

    id = serializers.UUIDField()
    handle = serializers.CharField(required=False, help_text="User stores only.")
    slug = serializers.CharField(required=False, help_text="Project and board stores only.")
    name = serializers.CharField(required=False, help_text="Project and board stores only.")

    def to_representation(self, store: Store) -> dict:
        if store.scope == Scope.USER:
            return {"id": str(store.owner_id), "handle": store.owner.handle}
        parent = store.project if store.scope == Scope.PROJECT else store.section
        return {"id": str(parent.pk), "slug": parent.slug, "name": parent.name}


class StorePermissionsSerializer(serializers.Serializer):
    """The caller's rights on the store (SPEC §3), evaluated on this request."""

    read = serializers.BooleanField()
    write = serializers.BooleanField(
        help_text="This request's credential may write here: the write right and a token with memories:write."
    )
    owner = serializers.BooleanField(
        help_text="The caller owns the store; owner-only changes also need a token with memories:write."
    )


class PublicStoreSerializer(serializers.Serializer):
    """A store's metadata as the public directory shows it (SPEC §3 fields; never entries or files).

    `description_md` is the store's `description`; `visibility` is effective (a project or board store
    shows its parent's).
    """

    # Rendering needs `owner`, `project` and `section` loaded (the selectors select_related them).
    id = serializers.UUIDField()
    scope = serializers.ChoiceField(choices=Scope.choices)
    subject = StoreSubjectSerializer(source="*")
    canonical = serializers.BooleanField()
    name = serializers.CharField()
    description_md = serializers.CharField(source="description")
    visibility = serializers.ChoiceField(choices=Visibility.choices, source="effective_visibility")
    entry_count = serializers.IntegerField()
    generation = serializers.IntegerField()
    memory_count = serializers.IntegerField()
    archived_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class StoreSerializer(PublicStoreSerializer):
    """A store on the Memories surface with the caller's `permissions` (read through `with_permissions`)."""

    permissions = serializers.SerializerMethodField()

    @extend_schema_field(StorePermissionsSerializer)
    def get_permissions(self, store: Store) -> dict[str, bool]:
        request = self.context.get("request")
        return permissions_of(store, None if request is None else token_scopes(request.auth))


class ReaderGrantSerializer(serializers.Serializer):
    """One explicit reader grant of a user store (SPEC §4 readers)."""

    handle = serializers.CharField(source="user.handle")
    active = serializers.BooleanField()
    granted_by = serializers.CharField(source="granted_by.handle", allow_null=True, default=None)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ListMetaSerializer(serializers.Serializer):
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as `cursor` for the next page; null at the end."
    )


class EnsureMetaSerializer(serializers.Serializer):
    created = serializers.BooleanField(help_text="true when this request created the store (201).")


class StoreEnvelopeSerializer(serializers.Serializer):
    data = StoreSerializer()
    meta = serializers.DictField()


class StoreEnsureEnvelopeSerializer(serializers.Serializer):
    data = StoreSerializer()
    meta = EnsureMetaSerializer()


class StoreListEnvelopeSerializer(serializers.Serializer):
    data = StoreSerializer(many=True)
    meta = ListMetaSerializer()


class StoreDeletedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    deleted = serializers.BooleanField()


class StoreDeletedEnvelopeSerializer(serializers.Serializer):
    data = StoreDeletedSerializer()
    meta = serializers.DictField()


class ReaderGrantEnvelopeSerializer(serializers.Serializer):
    data = ReaderGrantSerializer()
    meta = serializers.DictField()


class ReaderGrantListEnvelopeSerializer(serializers.Serializer):
    data = ReaderGrantSerializer(many=True)
    meta = ListMetaSerializer()


class SearchHitSerializer(serializers.Serializer):
    """One search result: the kind of thing found, its rank and the thing (store metadata, never entries)."""

    kind = serializers.CharField()
    rank = serializers.FloatField()
    store = StoreSerializer()


class SearchEnvelopeSerializer(serializers.Serializer):
    data = SearchHitSerializer(many=True)
    meta = ListMetaSerializer()


class PublicDirectoryMetaSerializer(serializers.Serializer):
    next_cursor = serializers.CharField(allow_null=True)
    next_url = serializers.CharField(allow_null=True, help_text="The next page in the same format; null at the end.")


class PublicDirectorySerializer(serializers.Serializer):
    data = PublicStoreSerializer(many=True)
    meta = PublicDirectoryMetaSerializer()


# --- requests ---------------------------------------------------------------------------------------


class StoreListQuerySerializer(StrictQuerySerializer):
    """GET /api/v1/memories and GET /memories: `scope`, `cursor`, `limit` (1–100, default 20)."""

    scope = serializers.ChoiceField(choices=Scope.choices, required=False)
    cursor = CursorField()
    limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


class DirectoryQuerySerializer(StoreListQuerySerializer):
    """GET /memories (the public directory): the list parameters and `format`, which the view's content
    negotiation reads (`md`, `json`, `yaml`; it overrides `Accept`; `stores.api.directory.SuffixFirstNegotiation`)."""

    format = serializers.ChoiceField(choices=["md", "json", "yaml"], required=False)


class ReaderListQuerySerializer(StrictQuerySerializer):
    """GET /api/v1/memories/{id}/readers: `cursor`, `limit` (1–100, default 20)."""

    cursor = CursorField()
    limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


class SubjectField(Utf8TextField):
    """`me`, a user handle, or a project/section UUID or slug (≤64 characters, matched case-insensitively)."""

    def __init__(self, **kwargs):
        super().__init__(min_bytes=1, max_length=SUBJECT_MAX_CHARS, **kwargs)


class StoreResolveQuerySerializer(StrictQuerySerializer):
    """GET /api/v1/memories/resolve: `scope` + `subject`, or `ref=^<store-uuid>` alone."""

    scope = serializers.ChoiceField(choices=Scope.choices, required=False)
    subject = SubjectField(required=False)
    ref = serializers.RegexField(
        "^\\^" + UUID_PATTERN[1:], required=False, trim_whitespace=False, help_text="`^` followed by a store UUID."
    )

    def validate(self, attrs):
        if "ref" in attrs:
            if "scope" in attrs or "subject" in attrs:
                raise serializers.ValidationError({"ref": "Use either ref or scope/subject, not both."})
            raw = attrs["ref"]
            if not raw.startswith("^"):
                raise serializers.ValidationError({"ref": "Must be '^' followed by a store UUID."})
            attrs["ref"] = canonical_uuid(raw[1:])
            if attrs["ref"] is None:
                raise serializers.ValidationError({"ref": "Must be '^' followed by a store UUID."})
            return attrs
        attrs.setdefault("scope", Scope.USER)
        attrs.setdefault("subject", "me")
        return attrs


class StoreEnsureSerializer(StrictSerializer):
    """POST /api/v1/memories: `{scope, subject, name?, description_md?}` (scope defaults to user, subject to me)."""

    scope = serializers.ChoiceField(choices=Scope.choices, required=False, default=Scope.USER)
    subject = SubjectField(required=False, default="me")
    name = NameField(required=False)
    description_md = Utf8TextField(required=False, max_length=DESCRIPTION_MAX_CHARS)

    def validate_description_md(self, value: str) -> str:
        return validation.clean_description(value, field="description_md")


class StoreUpdateSerializer(StrictSerializer):
    """PATCH /api/v1/memories/{id}: `name`, `description_md`, and `visibility` (user stores only)."""

    name = NameField(required=False)
    description_md = Utf8TextField(required=False, max_length=DESCRIPTION_MAX_CHARS)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)

    def validate_description_md(self, value: str) -> str:
        return validation.clean_description(value, field="description_md")


class StoreDeleteQuerySerializer(StrictQuerySerializer):
    """DELETE /api/v1/memories/{id}: both confirmations are required."""

    expected_entry_count = StrictIntegerField(min_value=0, max_value=BIGINT_MAX)
    generation = StrictIntegerField(min_value=1, max_value=BIGINT_MAX)


class ShareSerializer(StrictSerializer):
    """POST /api/v1/memories/{id}/share: `{handle, active}` (active defaults to true; false revokes)."""

    handle = handle_field()
    active = StrictBooleanField(required=False, default=True)


KINDS_PATTERN = r"^memories(,memories)*$"


@extend_schema_field({"type": "string", "pattern": KINDS_PATTERN, "maxLength": 200, "default": "memories"})
class KindsField(serializers.CharField):
    """`kinds`: comma-separated kinds to search (only `memories` exists)."""


class SearchQuerySerializer(StrictQuerySerializer):
    """GET /api/v1/search: `q` (1–256 characters), `kinds` (comma-separated; only `memories`), `cursor`, `limit`."""

    q = Utf8TextField(
        min_bytes=1,
        max_length=SEARCH_TEXT_MAX_CHARS,
        validators=[RegexValidator(_NOT_BLANK, message="Must contain something to search for.")],
    )
    kinds = KindsField(required=False, default="memories", max_length=200, trim_whitespace=False)
    cursor = CursorField()
    limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)

    KNOWN_KINDS = ("memories",)

    def validate_kinds(self, value: str) -> list[str]:
        kinds = [kind.strip() for kind in value.split(",") if kind.strip()]
        unknown = [kind for kind in kinds if kind not in self.KNOWN_KINDS]
        if unknown:
            raise serializers.ValidationError(
                f"Unknown kind(s): {', '.join(unknown)}. Known: {', '.join(self.KNOWN_KINDS)}."
            )
        if not kinds:
            raise serializers.ValidationError(f"Name at least one kind: {', '.join(self.KNOWN_KINDS)}.")
        if not re.fullmatch(KINDS_PATTERN, value):
            raise serializers.ValidationError("Kinds are separated by single commas, without spaces.")
        return sorted(set(kinds))
