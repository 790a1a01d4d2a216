"""The fourteen Memory Stores operations under /api/v1/memory_stores (SPEC §5), as thin recipes:
fetch the store through `stores.selectors` (reads: read; memory/version writes: write; store update,
archive, delete: owner), validate, call one service or selector, render with `responses`.

Updates are POST (what anthropic 2.10.0 sends); PATCH is accepted as an alias.

A session's per-work credential reaches the endpoints of one store (not the store list or create): only
the session's attached stores, with the attachment's access intersected with the owner's current access
(`sessions.selectors.store_for_request`), and every write passes its lease fence (SPEC §5).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from accounts.idempotency import replayable
from config.api import caller_key, reject_body, reject_query, validate
from config.fastlane import UUID_GROUP, Lane
from sessions.selectors import store_for_request
from sessions.services.work import fence_for_request
from stores import services as store_services
from versions import selectors, services
from versions.actors import actor_for_request
from versions.api import responses
from versions.api.pagination import (
    decode_page,
    encode_page,
    parse_path_position,
    parse_time_position,
    time_position,
)
from versions.api.serializers import (
    MemoryCreateRequestSerializer,
    MemoryDeletedSerializer,
    MemoryDeleteQuerySerializer,
    MemoryListQuerySerializer,
    MemoryPageSerializer,
    MemorySerializer,
    MemoryStoreCreateRequestSerializer,
    MemoryStoreDeletedSerializer,
    MemoryStoreListQuerySerializer,
    MemoryStorePageSerializer,
    MemoryStoreSerializer,
    MemoryStoreUpdateRequestSerializer,
    MemoryUpdateRequestSerializer,
    MemoryVersionListQuerySerializer,
    MemoryVersionPageSerializer,
    MemoryVersionSerializer,
    ViewQuerySerializer,
)

TAG = ["memory_stores"]
# The per-store endpoints also take a session's per-work credential (SPEC §5).
STORE_CREDENTIALS = ("api_token", "work_credential")
STORE_ID = OpenApiParameter("store_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Memory store id.")
MEMORY_ID = OpenApiParameter("memory_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Memory id.")
VERSION_ID = OpenApiParameter("version_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Version id.")


def _view(request, default: str) -> str:
    if not request.query_params:  # nothing to validate (and nothing unknown to reject): the default
        return default
    return validate(ViewQuerySerializer, request.query_params).get("view", default)


class MemoryStoreCollectionView(APIView):
    """GET (list) and POST (create) /memory_stores."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="memory_stores_list",
        tags=TAG,
        parameters=[MemoryStoreListQuerySerializer],
        responses={200: MemoryStorePageSerializer},
        description="Stores the caller can read, newest first; archived ones only with include_archived=true.",
    )
    def get(self, request):
        query = validate(MemoryStoreListQuerySerializer, request.query_params)
        fingerprint = {
            "include_archived": query["include_archived"],
            "gte": query.get("created_gte"),
            "lte": query.get("created_lte"),
        }
        position = decode_page(query.get("page"), kind="stores", query=fingerprint, caller=caller_key(request))
        stores = selectors.memory_stores(
            request.user,
            include_archived=query["include_archived"],
            created_gte=query.get("created_gte"),
            created_lte=query.get("created_lte"),
            after=None if position is None else parse_time_position(position),
            limit=query["limit"],
        )
        page, more = stores[: query["limit"]], len(stores) > query["limit"]
        next_page = (
            encode_page(kind="stores", query=fingerprint, caller=caller_key(request), position=time_position(page[-1]))
            if more
            else None
        )
        return responses.page_body(responses.store_items(page), next_page)

    @extend_schema(
        operation_id="memory_stores_create",
        tags=TAG,
        request=MemoryStoreCreateRequestSerializer,
        responses={200: MemoryStoreSerializer},
        description="Create a private user store owned by the caller.",
    )
    @replayable
    def post(self, request):
        reject_query(request)
        incoming = validate(MemoryStoreCreateRequestSerializer, request.data)
        store = store_services.create_store(owner=request.user, **incoming)
        return responses.store_body(store)


class MemoryStoreDetailView(APIView):
    """GET (retrieve), POST/PATCH (update) and DELETE /memory_stores/{store_id}."""

    takes_metadata = True  # a bad character in `metadata` is refused as invalid_metadata (config.parsers)

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="memory_stores_retrieve", tags=TAG, parameters=[STORE_ID], responses={200: MemoryStoreSerializer}
    )
    def get(self, request, store_id):
        reject_query(request)
        return responses.store_body(store_for_request(request, store_id, need="read"))

    @extend_schema(
        operation_id="memory_stores_update",
        tags=TAG,
        parameters=[STORE_ID],
        request=MemoryStoreUpdateRequestSerializer,
        responses={200: MemoryStoreSerializer},
        description="Owner only. Null fields are unchanged; metadata is a patch (null deletes a key).",
    )
    def post(self, request, store_id):
        store = store_for_request(request, store_id, need="owner")
        reject_query(request)
        incoming = validate(MemoryStoreUpdateRequestSerializer, request.data)
        store = store_services.update_store(
            store=store,
            actor=request.user,
            name=incoming.get("name"),
            description=incoming.get("description"),
            metadata_patch=incoming.get("metadata"),
        )
        return responses.store_body(store)

    @extend_schema(
        operation_id="memory_stores_update_patch",
        tags=TAG,
        parameters=[STORE_ID],
        request=MemoryStoreUpdateRequestSerializer,
        responses={200: MemoryStoreSerializer},
        description="Alias of POST /memory_stores/{store_id}.",
    )
    def patch(self, request, store_id):
        return self.post(request, store_id)

    @extend_schema(
        operation_id="memory_stores_delete",
        tags=TAG,
        parameters=[STORE_ID],
        responses={200: MemoryStoreDeletedSerializer},
        description="Owner only. Deletes the store with its memories, versions and log; allowed when archived.",
    )
    def delete(self, request, store_id):
        store = store_for_request(request, store_id, need="owner")
        reject_query(request)
        reject_body(request)
        store_services.delete_store(store=store, actor=request.user)
        return responses.store_deleted_body(store.pk)


class MemoryStoreArchiveView(APIView):
    """POST /memory_stores/{store_id}/archive."""

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    @extend_schema(
        operation_id="memory_stores_archive",
        tags=TAG,
        parameters=[STORE_ID],
        request=None,
        responses={200: MemoryStoreSerializer},
        description="Owner only. One-way; archiving an archived store returns it unchanged.",
    )
    def post(self, request, store_id):
        store = store_for_request(request, store_id, need="owner")
        reject_query(request)
        reject_body(request)
        store, _changed = store_services.archive_store(store=store, actor=request.user)
        return responses.store_body(store)


class MemoryCollectionView(APIView):
    """GET (list) and POST (create) /memory_stores/{store_id}/memories."""

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="memory_stores_memories_list",
        tags=TAG,
        parameters=[STORE_ID, MemoryListQuerySerializer],
        responses={200: MemoryPageSerializer},
        description="Memories in bytewise path order; depth=1 rolls deeper subtrees into memory_prefix items.",
    )
    def get(self, request, store_id):
        store = store_for_request(request, store_id, need="read")
        query = validate(MemoryListQuerySerializer, request.query_params)
        prefix, depth, limit, view = query.get("path_prefix", "/"), query["depth"], query["limit"], query["view"]
        fingerprint = {"store": str(store.pk), "prefix": prefix, "depth": depth}
        position = decode_page(query.get("page"), kind="memories", query=fingerprint, caller=caller_key(request))
        items = selectors.memories(
            store,
            path_prefix=prefix,
            depth=depth,
            after=None if position is None else parse_path_position(position),
            limit=limit,
            with_content=view == "full",
        )
        page, more = items[:limit], len(items) > limit
        next_page = (
            encode_page(kind="memories", query=fingerprint, caller=caller_key(request), position=page[-1].path)
            if more
            else None
        )
        return responses.page_body(responses.memory_items(page, view=view), next_page)

    @extend_schema(
        operation_id="memory_stores_memories_create",
        tags=TAG,
        parameters=[STORE_ID, ViewQuerySerializer],
        request=MemoryCreateRequestSerializer,
        responses={200: MemorySerializer},
        description="Never overwrites: an occupied path with other content is 409 memory_path_conflict_error; "
        "the same content returns the existing memory.",
    )
    def post(self, request, store_id):
        store = store_for_request(request, store_id, need="write")
        view = _view(request, "basic")
        incoming = validate(MemoryCreateRequestSerializer, request.data)
        result = services.create_memory(
            store=store, actor=actor_for_request(request), fence=fence_for_request(request), **incoming
        )
        return responses.memory_body(result.memory, view=view)


class MemoryDetailView(APIView):
    """GET (retrieve), POST/PATCH (update) and DELETE /memory_stores/{store_id}/memories/{memory_id}."""

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="memory_stores_memories_retrieve",
        tags=TAG,
        parameters=[STORE_ID, MEMORY_ID, ViewQuerySerializer],
        responses={200: MemorySerializer},
        description="view defaults to full.",
    )
    def get(self, request, store_id, memory_id):
        store = store_for_request(request, store_id, need="read")
        view = _view(request, "full")
        return responses.memory_body(selectors.memory(store, memory_id, with_content=view == "full"), view=view)

    @extend_schema(
        operation_id="memory_stores_memories_update",
        tags=TAG,
        parameters=[STORE_ID, MEMORY_ID, ViewQuerySerializer],
        request=MemoryUpdateRequestSerializer,
        responses={200: MemorySerializer},
        description="Change content and/or path (rename keeps the id). A request describing the stored state "
        "is a no-op, even with a stale precondition.",
    )
    def post(self, request, store_id, memory_id):
        store = store_for_request(request, store_id, need="write")
        view = _view(request, "basic")
        incoming = validate(MemoryUpdateRequestSerializer, request.data)
        precondition = incoming.get("precondition") or {}
        memory = services.update_memory(
            store=store,
            memory_id=memory_id,
            actor=actor_for_request(request),
            content=incoming.get("content"),
            path=incoming.get("path"),
            expected_sha256=precondition.get("content_sha256"),
            fence=fence_for_request(request),
        )
        return responses.memory_body(memory, view=view)

    @extend_schema(
        operation_id="memory_stores_memories_update_patch",
        tags=TAG,
        parameters=[STORE_ID, MEMORY_ID, ViewQuerySerializer],
        request=MemoryUpdateRequestSerializer,
        responses={200: MemorySerializer},
        description="Alias of POST /memory_stores/{store_id}/memories/{memory_id}.",
    )
    def patch(self, request, store_id, memory_id):
        return self.post(request, store_id, memory_id)

    @extend_schema(
        operation_id="memory_stores_memories_delete",
        tags=TAG,
        parameters=[STORE_ID, MEMORY_ID, MemoryDeleteQuerySerializer],
        responses={200: MemoryDeletedSerializer},
        description="Appends a `deleted` version; allowed on archived stores.",
    )
    def delete(self, request, store_id, memory_id):
        store = store_for_request(request, store_id, need="write")
        reject_body(request)
        query = validate(MemoryDeleteQuerySerializer, request.query_params)
        version = services.delete_memory(
            store=store,
            memory_id=memory_id,
            actor=actor_for_request(request),
            expected_sha256=query.get("expected_content_sha256"),
            fence=fence_for_request(request),
        )
        return responses.memory_deleted_body(version.memory_id)


# File memory create and update in their plain case without Django's resolver and DRF's dispatch
# (settings.API_FAST_LANES, config/fastlane.py). Both methods qualify: their one write is one statement
# (`versions.services`, "one-statement writes") that writes only when every check it makes passes; each
# refusal (409 archived/conflict/limit/precondition, 404, the lease fence) is raised before it or decided by
# it without writing.
MEMORY_CREATE_LANE = Lane(
    method="POST",
    pattern=rf"/api/v1/memory_stores/(?P<store_id>{UUID_GROUP})/memories",
    view=MemoryCollectionView,
    example={"store_id": "00000000-0000-4000-8000-000000000000"},
)
MEMORY_UPDATE_LANE = Lane(
    method="POST",
    pattern=rf"/api/v1/memory_stores/(?P<store_id>{UUID_GROUP})/memories/(?P<memory_id>{UUID_GROUP})",
    view=MemoryDetailView,
    example={"store_id": "00000000-0000-4000-8000-000000000000", "memory_id": "00000000-0000-4000-8000-000000000001"},
)


class MemoryVersionCollectionView(APIView):
    """GET /memory_stores/{store_id}/memory_versions."""

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="memory_stores_memory_versions_list",
        tags=TAG,
        parameters=[STORE_ID, MemoryVersionListQuerySerializer],
        responses={200: MemoryVersionPageSerializer},
        description="Versions newest first, also those of deleted memories.",
    )
    def get(self, request, store_id):
        store = store_for_request(request, store_id, need="read")
        query = validate(MemoryVersionListQuerySerializer, request.query_params)
        limit, view = query["limit"], query["view"]
        filters = {
            key: query.get(key)
            for key in (
                "memory_id",
                "operation",
                "created_gte",
                "created_lte",
                "api_key_id",
                "session_id",
                "service_account_id",
            )
        }
        fingerprint = {"store": str(store.pk), **filters}
        position = decode_page(query.get("page"), kind="versions", query=fingerprint, caller=caller_key(request))
        rows = selectors.versions(
            store,
            **filters,
            after=None if position is None else parse_time_position(position),
            limit=limit,
            with_content=view == "full",
        )
        page, more = rows[:limit], len(rows) > limit
        next_page = (
            encode_page(
                kind="versions", query=fingerprint, caller=caller_key(request), position=time_position(page[-1])
            )
            if more
            else None
        )
        return responses.page_body(responses.version_items(page, view=view), next_page)


class MemoryVersionDetailView(APIView):
    """GET /memory_stores/{store_id}/memory_versions/{version_id}."""

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="memory_stores_memory_versions_retrieve",
        tags=TAG,
        parameters=[STORE_ID, VERSION_ID, ViewQuerySerializer],
        responses={200: MemoryVersionSerializer},
        description="view defaults to full.",
    )
    def get(self, request, store_id, version_id):
        store = store_for_request(request, store_id, need="read")
        view = _view(request, "full")
        return responses.version_body(selectors.version(store, version_id), view=view)


class MemoryVersionRedactView(APIView):
    """POST /memory_stores/{store_id}/memory_versions/{version_id}/redact."""

    store_kwarg = "store_id"  # the store is fetched with the token (accounts.authentication)

    accepted_credentials = STORE_CREDENTIALS

    @extend_schema(
        operation_id="memory_stores_memory_versions_redact",
        tags=TAG,
        parameters=[STORE_ID, VERSION_ID],
        request=None,
        responses={200: MemoryVersionSerializer},
        description="Irreversible; redacting again returns the version unchanged. The head of a live memory "
        "cannot be redacted (409 version_is_current). Allowed on archived stores. Needs a person's API token "
        "with write access: a session's work credential gets 403 permission_error (agents never erase history).",
    )
    def post(self, request, store_id, version_id):
        store = store_for_request(request, store_id, need="write")
        reject_query(request)
        reject_body(request)
        version = services.redact_version(
            store=store,
            version_id=version_id,
            actor=actor_for_request(request),
            fence=fence_for_request(request),
            recheck=lambda: store_for_request(request, store_id, need="write"),
        )
        return responses.version_body(version, view="basic")
