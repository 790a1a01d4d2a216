"""Memories log endpoints (SPEC §4): note, wake, nap, compact, zoom, recall, forget.

Each view: fetch the store through `stores.selectors.get_store_for` (404 for missing *and* unreadable),
validate with a strict serializer, call one service or selector, render with `envelope`.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from accounts.permissions import token_scopes
from config.api import envelope
from memories import nap, selectors, services
from memories.api import serializers as s
from stores.selectors import get_store_for

STORE_ID = OpenApiParameter("pk", str, OpenApiParameter.PATH, description="Store UUID.")
TAGS = ["memories log"]


def caller_of(request) -> str:
    """The identity a recall cursor is bound to: the user's id, or "anonymous"."""
    user = request.user
    return str(user.pk) if getattr(user, "is_authenticated", False) else "anonymous"


class NoteView(APIView):
    """Append an entry."""

    @extend_schema(
        operation_id="note_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.NoteRequestSerializer,
        responses={201: s.NoteEnvelopeSerializer, 200: s.NoteEnvelopeSerializer},
        description="Append one entry (1..1,024 UTF-8 bytes, stored exactly). A client_nonce replay with the "
        "same body returns the original entry with 200 and meta.replayed; another body is 409 nonce_conflict.",
    )
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="write")
        incoming = s.NoteRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        result = services.append_entry(store=store, author=request.user, **incoming.validated_data)
        return envelope(
            s.EntrySerializer(result.entry).data,
            {"replayed": not result.created},
            status=201 if result.created else 200,
        )


class WakeView(APIView):
    """The cover of the log in at most `budget` lines."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="wake_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.WakeQuerySerializer],
        responses={200: s.WakeEnvelopeSerializer},
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        query = s.WakeQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return envelope(s.WakeDataSerializer(selectors.wake(store=store, **query.validated_data)).data)


class NapView(APIView):
    """The next compaction jobs, claimed for a caller with write access."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="nap_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.NapQuerySerializer],
        responses={200: s.NapEnvelopeSerializer},
        description="Up to `limit` ready compaction jobs, lowest level first, then oldest start. With write "
        "access (store right and memories:write) each job is claimed for you for NAP_CLAIM_SECONDS; other "
        "callers skip it, and your repeated nap returns it again. When every ready job is claimed by someone "
        "else, job is null, complete false and meta.retry_after says when the earliest claim lapses.",
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        query = s.NapQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        claimant = nap.claimant_for(request.user, token_scopes(request.auth), store)
        result = nap.nap(store=store, claimant=claimant, **query.validated_data)
        return envelope(s.NapDataSerializer(result.data).data, result.meta)


class CompactView(APIView):
    """Submit the summary of one range."""

    @extend_schema(
        operation_id="compact_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.CompactRequestSerializer,
        responses={201: s.CompactEnvelopeSerializer, 200: s.CompactEnvelopeSerializer},
    )
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="write")
        incoming = s.CompactRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        fields = dict(incoming.validated_data)
        block = fields.pop("range")
        result = services.compact_range(store=store, author=request.user, block=block, **fields)
        meta = {"snapshot": result.snapshot, "complete": result.complete, "pending": result.pending}
        meta["created"] = result.created
        return envelope(s.SummarySerializer(result.summary).data, meta, status=201 if result.created else 200)


class ZoomView(APIView):
    """One entry, or a range's summary and its two halves."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="zoom_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.ZoomQuerySerializer],
        responses={200: s.ZoomEnvelopeSerializer},
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        query = s.ZoomQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = dict(query.validated_data)
        return envelope(s.ZoomDataSerializer(selectors.zoom(store=store, block=params.pop("range"), **params)).data)


class RecallView(APIView):
    """Search original entries with RE2, newest first, one bounded page at a time."""

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="recall_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.RecallQuerySerializer],
        responses={200: s.RecallEnvelopeSerializer},
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        query = s.RecallQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = selectors.recall(store=store, caller=caller_of(request), **query.validated_data)
        meta = {"next_cursor": page.next_cursor, "snapshot": page.snapshot, "examined": page.examined}
        return envelope(s.RecallMatchSerializer(page.matches, many=True).data, meta)


class ForgetView(APIView):
    """Invalidate a range's summary and its ancestors (owner)."""

    @extend_schema(
        operation_id="forget_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.ForgetRequestSerializer,
        responses={200: s.ForgetEnvelopeSerializer},
    )
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="owner")
        incoming = s.ForgetRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        result = services.forget_range(
            store=store,
            actor=request.user,
            block=incoming.validated_data["range"],
            generation=incoming.validated_data["generation"],
        )
        data = {"invalidated": [block.label for block in result.invalidated], "generation": result.generation}
        return envelope(s.ForgetDataSerializer(data).data)
