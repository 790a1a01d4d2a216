"""`/api/v1/me`, `/me/tokens`, `/projects`, `/sections` and their members (SPEC §3).

Each view reads like a recipe: fetch through `accounts.selectors` (unseen = missing), validate with a
serializer from `accounts.api.serializers`, call one `accounts.services` write, render with `envelope`.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.views import APIView

from accounts import selectors, services
from accounts.api import serializers as s
from accounts.errors import StaffRequired
from accounts.idempotency import replayable
from accounts.permissions import READ_SCOPES, WRITE_SCOPES
from config.api import caller_key, envelope, reject_body, reject_query
from config.fields import canonical_uuid
from stores import selectors as store_selectors
from stores.api.pagination import decode_cursor, take_page

MeSerializer = inline_serializer(
    name="MeEnvelope",
    fields={
        "data": inline_serializer(
            name="Me",
            fields={
                "id": serializers.UUIDField(),
                "handle": serializers.CharField(),
                "token": inline_serializer(
                    name="MeToken",
                    fields={
                        "id": serializers.UUIDField(),
                        "prefix": serializers.CharField(),
                        "scopes": serializers.ListField(child=serializers.CharField()),
                        "expires_at": serializers.DateTimeField(allow_null=True),
                    },
                ),
            },
        ),
        "meta": serializers.DictField(),
    },
)


_DATETIME = serializers.DateTimeField()


class MeView(APIView):
    """The caller's identity and token (never the secret)."""

    @extend_schema(operation_id="get_me", responses={200: MeSerializer}, tags=["accounts"])
    def get(self, request):
        reject_query(request)
        token = request.auth
        return envelope(
            {
                "id": str(request.user.id),
                "handle": request.user.handle,
                "token": {
                    "id": str(token.id),
                    "prefix": token.prefix,
                    "scopes": list(token.scopes),
                    # DRF's rendering, as /me/tokens renders it (`…Z`; isoformat() said `+00:00`)
                    "expires_at": _DATETIME.to_representation(token.expires_at) if token.expires_at else None,
                },
            }
        )


# --- projects, sections, members, tokens (SPEC §3) ----------------------------------------------

PARENT_REF = OpenApiParameter("ref", str, OpenApiParameter.PATH, description="The UUID or the slug (any case).")
TOKEN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Token UUID.")


def _newest_first(rows, keys):
    return store_selectors.after_newest_first(rows, store_selectors.parse_newest_first_keys(keys) if keys else None)


def _page(request, rows_for, *, query_class=s.ListQuerySerializer, kind: str, binding=None, keys_of, after):
    """Validate the list query, take one keyset page of ``rows_for(query)`` and return it (SPEC §4 lists).

    The cursor is bound to `binding` (the parent, the user) and, for parent lists, to the `member` filter.
    """
    query = query_class(data=request.query_params)
    query.is_valid(raise_exception=True)
    data = query.validated_data
    binding = [binding, data.get("member")]
    cursor = data.get("cursor")
    keys = decode_cursor(cursor, kind=kind, binding=binding, arity=2) if cursor else None
    return take_page(after(rows_for(data), keys), limit=data["limit"], kind=kind, keys_of=keys_of, binding=binding)


def _parent_list(request, visible, serializer, kind: str):
    page = _page(
        request,
        lambda query: visible(request.user, member_only=query["member"]),
        query_class=s.ParentListQuerySerializer,
        kind=kind,
        binding=caller_key(request),
        keys_of=store_selectors.newest_first_keys,
        after=_newest_first,
    )
    return envelope(serializer(page.rows, many=True).data, {"next_cursor": page.next_cursor})


def _validated(serializer_class, request) -> dict:
    incoming = serializer_class(data=request.data)
    incoming.is_valid(raise_exception=True)
    return incoming.validated_data


class ProjectCollectionView(APIView):
    """GET: projects the caller can see. POST: create a project (the caller becomes its owner)."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="list_projects",
        tags=["projects"],
        parameters=[s.ParentListQuerySerializer],
        responses={200: s.ProjectListEnvelopeSerializer},
        description="Public projects and those you are an active member of, newest first, with your `role`. "
        "`member=true` keeps yours. Anonymous callers see public projects.",
    )
    def get(self, request):
        return _parent_list(request, selectors.visible_projects, s.ProjectSerializer, "projects")

    @extend_schema(
        operation_id="create_project",
        tags=["projects"],
        request=s.ProjectCreateSerializer,
        responses={201: s.ProjectEnvelopeSerializer},
        description="Any user may create a project and becomes its owner. Private unless `visibility` is "
        "`public`. A taken slug (any case) is 409 `slug_taken`.",
    )
    @replayable
    def post(self, request):
        reject_query(request)
        data = _validated(s.ProjectCreateSerializer, request)
        project = services.create_project(creator=request.user, **data)
        return envelope(s.ProjectSerializer(selectors.get_project_for(request.user, str(project.pk))).data, status=201)


class ProjectDetailView(APIView):
    """GET and PATCH one project."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="get_project",
        tags=["projects"],
        parameters=[PARENT_REF],
        responses={200: s.ProjectEnvelopeSerializer},
        description="404 when absent or not visible to you (private and you are not an active member).",
    )
    def get(self, request, ref):
        reject_query(request)
        return envelope(s.ProjectSerializer(selectors.get_project_for(request.user, ref)).data)

    @extend_schema(
        operation_id="update_project",
        tags=["projects"],
        parameters=[PARENT_REF],
        request=s.ProjectUpdateSerializer,
        responses={200: s.ProjectEnvelopeSerializer},
        description="Owners only: `slug`, `name`, `visibility`. The project's store follows its visibility. The slug "
        "a rename leaves keeps naming the project and nobody else may take it; a project holding 10 such slugs "
        "cannot be renamed to a new one (409 `rename_limit`; it may take an old one back).",
    )
    def patch(self, request, ref):
        project = selectors.get_project_for(request.user, ref, need="owner")
        reject_query(request)
        project = services.update_project(
            project=project, actor=request.user, **_validated(s.ProjectUpdateSerializer, request)
        )
        return envelope(s.ProjectSerializer(selectors.get_project_for(request.user, str(project.pk))).data)


class ProjectMembersView(APIView):
    """GET: the project's memberships (active members). POST: add, change or remove one (owners)."""

    @extend_schema(
        operation_id="list_project_members",
        tags=["projects"],
        parameters=[PARENT_REF, s.ListQuerySerializer],
        responses={200: s.ProjectMemberListEnvelopeSerializer},
        description="Active members and owners only: every membership, active and inactive, oldest first.",
    )
    def get(self, request, ref):
        project = selectors.get_project_for(request.user, ref, need="member")
        page = _page(
            request,
            lambda query: selectors.project_members(project),
            kind="project-members",
            binding=[str(project.pk), caller_key(request)],  # the list and its caller (docs/decisions.md)
            keys_of=selectors.membership_keys,
            after=selectors.after_membership,
        )
        return envelope(s.ProjectMemberSerializer(page.rows, many=True).data, {"next_cursor": page.next_cursor})

    @extend_schema(
        operation_id="set_project_member",
        tags=["projects"],
        parameters=[PARENT_REF],
        request=s.ProjectMemberRequestSerializer,
        responses={201: s.ProjectMemberEnvelopeSerializer, 200: s.ProjectMemberEnvelopeSerializer},
        description="Owners only. `{handle, role?, active?}`: adds (201), changes the role or re-activates "
        "(200); `active: false` removes. The last active owner cannot leave or be demoted: 409 `last_owner`.",
    )
    def post(self, request, ref):
        project = selectors.get_project_for(request.user, ref, need="owner")
        reject_query(request)
        data = _validated(s.ProjectMemberRequestSerializer, request)
        membership, created = services.set_project_member(
            project=project,
            actor=request.user,
            handle=data["handle"],
            role=data.get("role", services.UNSET),
            active=data["active"],
        )
        body = s.ProjectMemberSerializer(membership).data
        return envelope(body, {"created": created}, status=201 if created else 200)


class SectionCollectionView(APIView):
    """GET: sections (boards) the caller can see. POST: create one (staff only)."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="list_sections",
        tags=["sections"],
        parameters=[s.ParentListQuerySerializer],
        responses={200: s.SectionListEnvelopeSerializer},
        description="Public sections and those you are an active member of, newest first, with your `role`.",
    )
    def get(self, request):
        return _parent_list(request, selectors.visible_sections, s.SectionSerializer, "sections")

    @extend_schema(
        operation_id="create_section",
        tags=["sections"],
        request=s.SectionCreateSerializer,
        responses={201: s.SectionEnvelopeSerializer},
        description="Staff only (403 otherwise); the creator becomes its owner. Private unless `visibility` is "
        "`public`; `open_to_all_posters` lets every active reader post (a public global board).",
    )
    @replayable
    def post(self, request):
        reject_query(request)
        if not request.user.is_staff:
            raise StaffRequired()
        data = _validated(s.SectionCreateSerializer, request)
        section = services.create_section(creator=request.user, **data)
        return envelope(s.SectionSerializer(selectors.get_section_for(request.user, str(section.pk))).data, status=201)


class SectionDetailView(APIView):
    """GET and PATCH one section."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="get_section",
        tags=["sections"],
        parameters=[PARENT_REF],
        responses={200: s.SectionEnvelopeSerializer},
        description="404 when absent or not visible to you.",
    )
    def get(self, request, ref):
        reject_query(request)
        return envelope(s.SectionSerializer(selectors.get_section_for(request.user, ref)).data)

    @extend_schema(
        operation_id="update_section",
        tags=["sections"],
        parameters=[PARENT_REF],
        request=s.SectionUpdateSerializer,
        responses={200: s.SectionEnvelopeSerializer},
        description="Owners only: `slug`, `name`, `visibility`, `open_to_all_posters`. The slug a rename leaves keeps "
        "naming the section and nobody else may take it; a section holding 10 such slugs cannot be renamed to a "
        "new one (409 `rename_limit`; it may take an old one back).",
    )
    def patch(self, request, ref):
        section = selectors.get_section_for(request.user, ref, need="owner")
        reject_query(request)
        section = services.update_section(
            section=section, actor=request.user, **_validated(s.SectionUpdateSerializer, request)
        )
        return envelope(s.SectionSerializer(selectors.get_section_for(request.user, str(section.pk))).data)


class SectionMembersView(APIView):
    """GET: the section's memberships (active members). POST: add, change or remove one (owners)."""

    @extend_schema(
        operation_id="list_section_members",
        tags=["sections"],
        parameters=[PARENT_REF, s.ListQuerySerializer],
        responses={200: s.SectionMemberListEnvelopeSerializer},
        description="Active members and owners only: every membership, active and inactive, oldest first.",
    )
    def get(self, request, ref):
        section = selectors.get_section_for(request.user, ref, need="member")
        page = _page(
            request,
            lambda query: selectors.section_members(section),
            kind="section-members",
            binding=[str(section.pk), caller_key(request)],  # the list and its caller (docs/decisions.md)
            keys_of=selectors.membership_keys,
            after=selectors.after_membership,
        )
        return envelope(s.SectionMemberSerializer(page.rows, many=True).data, {"next_cursor": page.next_cursor})

    @extend_schema(
        operation_id="set_section_member",
        tags=["sections"],
        parameters=[PARENT_REF],
        request=s.SectionMemberRequestSerializer,
        responses={201: s.SectionMemberEnvelopeSerializer, 200: s.SectionMemberEnvelopeSerializer},
        description="Owners only. `{handle, role?: owner|poster|reader, active?}`; `active: false` removes. "
        "The last active owner cannot leave or be demoted: 409 `last_owner`.",
    )
    def post(self, request, ref):
        section = selectors.get_section_for(request.user, ref, need="owner")
        reject_query(request)
        data = _validated(s.SectionMemberRequestSerializer, request)
        membership, created = services.set_section_member(
            section=section,
            actor=request.user,
            handle=data["handle"],
            role=data.get("role", services.UNSET),
            active=data["active"],
        )
        body = s.SectionMemberSerializer(membership).data
        return envelope(body, {"created": created}, status=201 if created else 200)


class TokenCollectionView(APIView):
    """GET: the caller's own tokens. POST: mint one (the secret is in the answer, once)."""

    @extend_schema(
        operation_id="list_tokens",
        tags=["accounts"],
        parameters=[s.ListQuerySerializer],
        responses={200: s.TokenListEnvelopeSerializer},
        description="Your tokens (live, expired and revoked), newest first; `current` marks this request's.",
    )
    def get(self, request):
        page = _page(
            request,
            lambda query: selectors.user_tokens(request.user),
            kind="tokens",
            binding=caller_key(request),
            keys_of=store_selectors.newest_first_keys,
            after=_newest_first,
        )
        body = s.TokenSerializer(page.rows, many=True, context={"caller": request.auth}).data
        return envelope(body, {"next_cursor": page.next_cursor})

    @extend_schema(
        operation_id="create_token",
        tags=["accounts"],
        request=s.TokenCreateSerializer,
        responses={201: s.NewTokenEnvelopeSerializer},
        description="A write (needs both scopes). The new token's scopes are at most the calling token's, and "
        "it expires no later than the calling token (403 otherwise). `token` holds the secret, shown once.",
    )
    @replayable
    def post(self, request):
        reject_query(request)
        data = _validated(s.TokenCreateSerializer, request)
        issued = services.mint_token(user=request.user, caller=request.auth, **data)
        body = {**s.TokenSerializer(issued.token, context={"caller": request.auth}).data, "token": issued.secret}
        return envelope(body, status=201)


class TokenDetailView(APIView):
    """DELETE /me/tokens/{id}: revoke one of your tokens."""

    def scopes_needed(self, request) -> frozenset[str]:
        """The scopes `accounts.permissions.ScopedAccess` asks of the calling token: `agent:read` alone to
        revoke that very token — whoever holds a token may end it (a leaked read-only token could not be
        revoked with itself, a breaker) — and both scopes, as for every write, to revoke any other."""
        if canonical_uuid(self.kwargs.get("pk")) == getattr(request.auth, "pk", None):
            return READ_SCOPES
        return WRITE_SCOPES

    @extend_schema(
        operation_id="revoke_token",
        tags=["accounts"],
        parameters=[TOKEN_ID],
        responses={200: s.TokenEnvelopeSerializer},
        description="Revokes one of your tokens (200 with `revoked_at`; revoking again changes nothing). "
        "Someone else's token is a 404, like an unknown id. Revoking the token you call with is allowed, and "
        "needs only `agent:read` (any token can end itself); revoking another token needs `memories:write` too.",
    )
    def delete(self, request, pk):
        token = selectors.get_token_for(request.user, pk)
        reject_query(request)
        reject_body(request)
        token = services.revoke_token(token=token)
        return envelope(s.TokenSerializer(token, context={"caller": request.auth}).data)
