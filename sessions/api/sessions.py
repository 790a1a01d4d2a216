"""Sessions under /api/v1/sessions (SPEC §5): `client.beta.sessions.create/retrieve/update/list/delete/
archive` and `sessions.resources.list` (anthropic 2.10.0), for the owner's API token — and `GET
/sessions/{id}` also for the session's own per-work credential (what the SDK's worker fetches)."""

from __future__ import annotations

from django.core import signing
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.idempotency import replayable
from config.api import caller_key, reject_body, reject_query
from sessions import selectors, validation
from sessions.api import inputs, objects
from sessions.api.common import SESSION_ID, keyset_page, validated
from sessions.services import sessions as services
from sessions.services.common import UNSET
from stores import validation as store_validation
from versions.errors import InvalidPage

TAG = ["sessions"]


class SessionCollectionView(APIView):
    """GET (list) and POST (create) /sessions."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    @extend_schema(
        operation_id="sessions_list",
        tags=TAG,
        parameters=[inputs.SessionListQuerySerializer],
        responses={200: objects.SessionPageSerializer},
        description="The caller's sessions, newest first (`order=asc`: oldest first); archived ones only with "
        "include_archived=true or `statuses[]=terminated`. Ids that cannot match give an empty list.",
    )
    def get(self, request):
        query = validated(inputs.SessionListQuerySerializer, request.query_params)
        filters = selectors.SessionFilters(
            include_archived=query["include_archived"],
            statuses=tuple(query.get("statuses", ())),
            agent_id=query.get("agent_id"),
            agent_version=query.get("agent_version"),
            memory_store_id=query.get("memory_store_id"),
            deployment_id=query.get("deployment_id"),
            created_gt=query.get("created_gt"),
            created_gte=query.get("created_gte"),
            created_lt=query.get("created_lt"),
            created_lte=query.get("created_lte"),
        )
        ascending = query["order"] == "asc"
        rows, next_page = keyset_page(
            query,
            kind="sessions",
            fingerprint={"filters": repr(filters), "ascending": ascending},
            caller=caller_key(request),
            fetch=lambda **page: selectors.sessions_for(request.user, filters, ascending=ascending, **page),
        )
        return objects.page(objects.SessionSerializer, rows, next_page, prev_page=None)

    @extend_schema(
        operation_id="sessions_create",
        tags=TAG,
        request=inputs.SessionCreateRequestSerializer,
        responses={200: objects.SessionSerializer},
        description="Create a session on one of the caller's environments and queue its work item. "
        "`resources`: up to 8 `memory_store` attachments (read access; write access for `read_write`, the "
        "default; archived stores 409 `store_archived`); `instructions` ≤4,096 characters. `agent` is kept "
        "as an opaque snapshot.",
    )
    @replayable
    def post(self, request):
        reject_query(request)
        incoming = validated(inputs.SessionCreateRequestSerializer, request.data)
        for field in ("budget", "initial_events", "vault_ids"):
            validation.reject_unsupported(incoming.get(field), field=field)
        agent = validation.clean_agent(incoming["agent"])
        resources = validation.clean_resources(incoming.get("resources"))
        metadata = store_validation.clean_metadata(incoming.get("metadata", {}))
        title = validation.clean_title(incoming.get("title"))
        attach = selectors.stores_to_attach(request.user, resources)
        session = services.create_session(
            owner=request.user,
            environment_id=incoming["environment_id"],
            agent=agent,
            attach=attach,
            metadata=metadata,
            title=title,
        )
        return objects.body(objects.SessionSerializer, selectors.get_session_for(request.user, session.pk))


class SessionDetailView(APIView):
    """GET (retrieve), POST (update) and DELETE /sessions/{session_id}."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    accepted_credentials = {"GET": ("api_token", "work_credential")}

    @extend_schema(
        operation_id="sessions_retrieve",
        tags=TAG,
        parameters=[SESSION_ID],
        responses={200: objects.SessionSerializer},
        description="The owner's API token, or the session's own per-work credential (another session: 404; "
        "a credential whose claim has ended: 409 `lease_expired`).",
    )
    def get(self, request, session_id):
        session = selectors.session_for_request(request, session_id)
        reject_query(request)
        return objects.body(objects.SessionSerializer, session)

    @extend_schema(
        operation_id="sessions_update",
        tags=TAG,
        parameters=[SESSION_ID],
        request=inputs.SessionUpdateRequestSerializer,
        responses={200: objects.SessionSerializer},
        description="`title` and a `metadata` patch (null deletes a key). Archived sessions: 409 `session_archived`.",
    )
    def post(self, request, session_id):
        session = selectors.get_session_for(request.user, session_id)
        reject_query(request)
        incoming = validated(inputs.SessionUpdateRequestSerializer, request.data)
        for field in ("agent", "budget", "vault_ids"):
            validation.reject_unsupported(incoming.get(field), field=field)
        services.update_session(
            session=session, title=incoming.get("title", UNSET), metadata_patch=incoming.get("metadata", UNSET)
        )
        return objects.body(objects.SessionSerializer, selectors.get_session_for(request.user, session.pk))

    @extend_schema(
        operation_id="sessions_delete",
        tags=TAG,
        parameters=[SESSION_ID],
        responses={200: objects.SessionDeletedSerializer},
        description="Deletes the session with its attachments and work items (their credentials stop "
        "working). Versions it wrote keep their session_actor.",
    )
    def delete(self, request, session_id):
        session = selectors.get_session_for(request.user, session_id)
        reject_query(request)
        reject_body(request)
        services.delete_session(session=session)
        return Response({"id": str(session.pk), "type": "session_deleted"})


class SessionArchiveView(APIView):
    """POST /sessions/{session_id}/archive."""

    @extend_schema(
        operation_id="sessions_archive",
        tags=TAG,
        parameters=[SESSION_ID],
        request=None,
        responses={200: objects.SessionSerializer},
        description="Terminate the session for good: its work item stops and its credential dies; its "
        "stores can be deleted again. Archiving again returns it unchanged.",
    )
    def post(self, request, session_id):
        session = selectors.get_session_for(request.user, session_id)
        reject_query(request)
        reject_body(request)
        services.archive_session(session=session)
        return objects.body(objects.SessionSerializer, selectors.get_session_for(request.user, session.pk))


_RESOURCES_SALT = "sessions.api.resources"


class SessionResourcesView(APIView):
    """GET /sessions/{session_id}/resources."""

    @extend_schema(
        operation_id="sessions_resources_list",
        tags=TAG,
        parameters=[SESSION_ID, inputs.SessionResourceListQuerySerializer],
        responses={200: objects.SessionResourcePageSerializer},
        description="The session's memory-store attachments in attach order (all of them unless `limit`). "
        "A memory-store resource has no id of its own, so there is no per-resource GET.",
    )
    def get(self, request, session_id):
        session = selectors.get_session_for(request.user, session_id)
        query = validated(inputs.SessionResourceListQuerySerializer, request.query_params)
        start = 0
        if query.get("page") is not None:
            try:
                start = signing.loads(query["page"], salt=f"{_RESOURCES_SALT}:{session.pk}")
            except (signing.BadSignature, ValueError, UnicodeError):
                raise InvalidPage() from None
            if not isinstance(start, int) or isinstance(start, bool) or start < 0:
                raise InvalidPage()
        attachments = selectors.attachments_of(session)
        end = len(attachments) if query.get("limit") is None else start + query["limit"]
        next_page = signing.dumps(end, salt=f"{_RESOURCES_SALT}:{session.pk}") if end < len(attachments) else None
        return objects.page(objects.MemoryStoreResourceSerializer, attachments[start:end], next_page)
