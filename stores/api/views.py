"""Store-level Memories endpoints (SPEC §4) and universal search (SPEC §8) under /api/v1.

Each view reads like a recipe: fetch through `stores.selectors` (unreadable = missing), validate with a
serializer, call one `stores.services` write, render with `config.api.envelope`.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.views import APIView

from config.api import STORE_ID, caller_key, envelope, reject_body, reject_query
from stores import selectors, services
from stores.api import serializers as s
from stores.api.pagination import decode_cursor, take_page
from stores.errors import MembershipGoverned, StoreNotFound
from stores.models import Scope

TAGS = ["memories"]


def _cursor_keys(query: dict, *, kind: str, binding, arity: int) -> list | None:
    cursor = query.get("cursor")
    return decode_cursor(cursor, kind=kind, binding=binding, arity=arity) if cursor else None


class StoreCollectionView(APIView):
    """GET: stores the caller can read. POST: ensure a subject's canonical store."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="list_memories",
        tags=TAGS,
        parameters=[s.StoreListQuerySerializer],
        responses={200: s.StoreListEnvelopeSerializer},
        description="Stores the caller can read (anonymous callers: public stores), newest first, "
        "with the caller's permissions. Keyset-paginated: pass `meta.next_cursor` as `cursor`.",
    )
    def get(self, request):
        query = s.StoreListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        scope = query.validated_data.get("scope")
        binding = [caller_key(request), scope]
        keys = _cursor_keys(query.validated_data, kind="memories", binding=binding, arity=2)
        stores = selectors.readable_stores(request.user, scope=scope)
        stores = selectors.after_newest_first(stores, selectors.parse_newest_first_keys(keys) if keys else None)
        page = take_page(
            stores,
            limit=query.validated_data["limit"],
            kind="memories",
            keys_of=selectors.newest_first_keys,
            binding=binding,
        )
        return envelope(
            s.StoreSerializer(page.rows, many=True, context={"request": request}).data,
            {"next_cursor": page.next_cursor},
        )

    @extend_schema(
        operation_id="ensure_memories",
        tags=TAGS,
        request=s.StoreEnsureSerializer,
        responses={201: s.StoreEnsureEnvelopeSerializer, 200: s.StoreEnsureEnvelopeSerializer},
        description="Create the subject's canonical store if absent (201), else return it unchanged (200). "
        "Needs the write right on the subject; someone else's user store is always 403.",
    )
    def post(self, request):
        reject_query(request)
        incoming = s.StoreEnsureSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        subject = selectors.subject_for_ensure(request.user, scope=data["scope"], subject=data["subject"])
        for attempt in range(2):
            store, created = services.ensure_canonical_store(
                scope=subject.scope,
                user=subject.user,
                project=subject.project,
                section=subject.section,
                name=data.get("name"),
                description=data.get("description_md"),
                created_by=request.user,
                recheck=lambda: selectors.subject_for_ensure(
                    request.user, scope=data["scope"], subject=data["subject"]
                ),
            )
            try:
                store = selectors.get_store_for(request.user, store.pk)
                break
            except StoreNotFound:
                # Deleted between the ensure and this read (an owner's DELETE racing it): an ensure never
                # answers that its own store is missing — it ensures again (a breaker saw 404s); a right lost
                # meanwhile is the recheck's 404/403 on that second round.
                if attempt:
                    raise
        return envelope(
            s.StoreSerializer(store, context={"request": request}).data,
            {"created": created},
            status=201 if created else 200,
        )


class StoreResolveView(APIView):
    """GET /memories/resolve: find a canonical store by subject, or a store by `ref=^<uuid>`."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="resolve_memories",
        tags=TAGS,
        parameters=[s.StoreResolveQuerySerializer],
        responses={200: s.StoreEnvelopeSerializer},
        description="`scope` (default user) + `subject` (default me; handle, project/section UUID or slug, "
        "case-insensitive), or `ref=^<store-uuid>`. Never creates; 404 when absent or unreadable.",
    )
    def get(self, request):
        query = s.StoreResolveQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        if "ref" in data:
            store = selectors.get_store_for(request.user, data["ref"])
        else:
            store = selectors.resolve_store(request.user, scope=data["scope"], subject=data["subject"])
        return envelope(s.StoreSerializer(store, context={"request": request}).data)


class StoreDetailView(APIView):
    """GET, PATCH and DELETE one store."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="get_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        responses={200: s.StoreEnvelopeSerializer},
        description="Store metadata, counters and the caller's `permissions`. 404 when absent or unreadable.",
    )
    def get(self, request, pk):
        store = selectors.get_store_for(request.user, pk)
        reject_query(request)
        return envelope(s.StoreSerializer(store, context={"request": request}).data)

    @extend_schema(
        operation_id="update_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.StoreUpdateSerializer,
        responses={200: s.StoreEnvelopeSerializer},
        description="Owner only: `name`, `description_md`; `visibility` on user stores. Archived: 409, except "
        "making a user store private (alone in the request).",
    )
    def patch(self, request, pk):
        store = selectors.get_store_for(request.user, pk, need="owner")
        reject_query(request)
        incoming = s.StoreUpdateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        services.update_store(
            store=store,
            actor=request.user,
            name=data.get("name", services.UNSET),
            description=data.get("description_md", services.UNSET),
            visibility=data.get("visibility", services.UNSET),
            description_field="description_md",
        )
        return envelope(s.StoreSerializer(selectors.get_store_for(request.user, pk), context={"request": request}).data)

    @extend_schema(
        operation_id="delete_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.StoreDeleteQuerySerializer],
        responses={200: s.StoreDeletedEnvelopeSerializer},
        description="Owner only. Both `expected_entry_count` and `generation` must match the store "
        "(else 409 `stale_confirmation`, nothing deleted). Deletes entries, summaries, files and versions.",
    )
    def delete(self, request, pk):
        store = selectors.get_store_for(request.user, pk, need="owner")
        reject_body(request)
        query = s.StoreDeleteQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        services.delete_store(
            store=store,
            actor=request.user,
            expected_entry_count=query.validated_data["expected_entry_count"],
            generation=query.validated_data["generation"],
        )
        return envelope({"id": str(store.pk), "deleted": True})


class StoreReadersView(APIView):
    """GET /memories/{id}/readers: the owner's view of explicit grants (user stores only)."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    @extend_schema(
        operation_id="list_memories_readers",
        tags=TAGS,
        parameters=[STORE_ID, s.ReaderListQuerySerializer],
        responses={
            200: s.ReaderGrantListEnvelopeSerializer,
            409: OpenApiResponse(description="A project or board store (conflict_error `membership_governed`)."),
        },
        description="Owner only. Explicit grants, active and revoked, newest first. Project and board "
        "stores: 409 `membership_governed`.",
    )
    def get(self, request, pk):
        store = selectors.get_store_for(request.user, pk, need="owner")
        if store.scope != Scope.USER:
            raise MembershipGoverned()
        query = s.ReaderListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        binding = [caller_key(request), str(store.pk)]
        keys = _cursor_keys(query.validated_data, kind="readers", binding=binding, arity=2)
        page = take_page(
            selectors.after_grant(selectors.reader_grants(store), keys),
            limit=query.validated_data["limit"],
            kind="readers",
            keys_of=selectors.grant_keys,
            binding=binding,
        )
        return envelope(s.ReaderGrantSerializer(page.rows, many=True).data, {"next_cursor": page.next_cursor})


class StoreShareView(APIView):
    """POST /memories/{id}/share: grant (`active: true`) or revoke (`active: false`) a reader."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    @extend_schema(
        operation_id="share_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.ShareSerializer,
        responses={200: s.ReaderGrantEnvelopeSerializer},
        description="Owner only; user stores only (409 `membership_governed`). Unknown handle: 404 naming it. "
        "Revoking a reader does not hide a store that is still public.",
    )
    def post(self, request, pk):
        store = selectors.get_store_for(request.user, pk, need="owner")
        reject_query(request)
        incoming = s.ShareSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        grant = services.set_reader(
            store=store,
            handle=incoming.validated_data["handle"],
            active=incoming.validated_data["active"],
            granted_by=request.user,
        )
        return envelope(s.ReaderGrantSerializer(grant).data)


class SearchView(APIView):
    """GET /api/v1/search: full-text search over what the caller can read (SPEC §8)."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="search",
        tags=["search"],
        parameters=[s.SearchQuerySerializer],
        responses={200: s.SearchEnvelopeSerializer},
        description="Store names and descriptions (PostgreSQL full-text, web-search syntax), readable "
        "stores only, best match first. Entry text is never searched. `kinds`: `memories`.",
    )
    def get(self, request):
        query = s.SearchQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        binding = [caller_key(request), data["q"], data["kinds"]]
        keys = _cursor_keys(data, kind="search", binding=binding, arity=3)
        hits = selectors.after_search_hit(selectors.search_stores(request.user, text=data["q"]), keys)
        page = take_page(hits, limit=data["limit"], kind="search", keys_of=selectors.search_keys, binding=binding)
        results = [
            {
                "kind": "memories",
                "rank": store.rank,
                "store": s.StoreSerializer(store, context={"request": request}).data,
            }
            for store in page.rows
        ]
        return envelope(results, {"next_cursor": page.next_cursor})
