"""Memories log endpoints (SPEC §4): note, wake, nap, compact, zoom, recall, forget, redact.

Each view: fetch the store through `stores.selectors.get_store_for` (404 for missing *and* unreadable),
validate with a strict serializer, call one service or selector, render with `envelope`.
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.views import APIView

from accounts.permissions import token_scopes
from config.api import STORE_ID, envelope, idempotency_key_header, reject_query, validate
from config.errors import InvalidRequest, request_id_of
from config.fastlane import UUID_GROUP, Lane
from config.threads import STREAM_KEY
from memories import nap, selectors, services, tree
from memories.api import serializers as s
from memories.exchange import format as export_format
from memories.exchange.export import export_chunks
from memories.models import NONCE_MAX_CHARS
from stores.selectors import get_store_for

# Named `id` like the path parameter drf-spectacular documents (it renames the URL's `pk` to `id`).
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": NONCE_MAX_CHARS},  # validated as the body's client_nonce
    OpenApiParameter.HEADER,
    required=False,
    description="Accepted as the note's client_nonce (≤128 characters); equal to client_nonce if both are sent.",
)
SEQ = OpenApiParameter(
    "seq",
    {"type": "integer", "minimum": 0, "maximum": tree.MAX_SEQ},
    OpenApiParameter.PATH,
    description="The entry's seq (0-based, canonical decimal).",
)
TAGS = ["memories log"]


def caller_of(request) -> str:
    """The identity a recall cursor is bound to: the user's id, or "anonymous"."""
    user = request.user
    return str(user.pk) if getattr(user, "is_authenticated", False) else "anonymous"


def with_idempotency_key(request) -> Any:
    """The note's request data with the `Idempotency-Key` header as its `client_nonce` (SPEC §2).

    The header and a body `client_nonce` may both be sent only with the same value (400 otherwise); the
    key is read and validated exactly like a body nonce (`config.api.idempotency_key_header`: UTF-8,
    ≤128 characters, no NUL or lone surrogates; 400 naming the header otherwise).
    """
    data = request.data
    if "HTTP_IDEMPOTENCY_KEY" not in request.META or not isinstance(data, dict):
        return data
    key = idempotency_key_header(request, s.NoteRequestSerializer().fields["client_nonce"])
    body_nonce = data.get("client_nonce")
    if body_nonce is not None and body_nonce != key:
        raise InvalidRequest(
            "The Idempotency-Key header and client_nonce differ; send one of them, or both with the same value.",
            details={"fields": {"client_nonce": "differs from the Idempotency-Key header"}},
        )
    return {**data, "client_nonce": key}


class NoteView(APIView):
    """Append an entry."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    @extend_schema(
        operation_id="note_memories",
        tags=TAGS,
        parameters=[STORE_ID, IDEMPOTENCY_KEY],
        request=s.NoteRequestSerializer,
        responses={201: s.NoteEnvelopeSerializer, 200: s.NoteEnvelopeSerializer},
        description="Append one entry (1..1,024 UTF-8 bytes, stored exactly). A client_nonce replay with the "
        "same body returns the original entry with 200 and meta.replayed; another body is 409 nonce_conflict. "
        "An Idempotency-Key header is accepted as the client_nonce.",
    )
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="write")
        reject_query(request)
        incoming = validate(s.NoteRequestSerializer, with_idempotency_key(request))
        result = services.append_entry(store=store, author=request.user, **incoming)
        return envelope(
            s.render_entry(result.entry),
            {"replayed": not result.created},
            status=201 if result.created else 200,
        )


# POST /api/v1/memories/{id}/note in its plain case without Django's resolver and DRF's dispatch
# (settings.API_FAST_LANES, config/fastlane.py). NoteView.post qualifies: its one write is the append, one
# statement in autocommit; every refusal (403/404 access, 400 body, 409 archived/nonce/redacted) is raised
# before it or decided by it without inserting.
NOTE_LANE = Lane(
    method="POST",
    pattern=rf"/api/v1/memories/(?P<pk>{UUID_GROUP})/note",
    view=NoteView,
    example={"pk": "00000000-0000-4000-8000-000000000000"},
)


class WakeView(APIView):
    """The cover of the log in at most `budget` lines."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="wake_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.WakeQuerySerializer],
        responses={200: s.WakeEnvelopeSerializer},
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        query = validate(s.WakeQuerySerializer, request.query_params)
        return envelope(s.render_wake(selectors.wake(store=store, **query)))


class NapView(APIView):
    """The next compaction jobs, claimed for a caller with write access."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    allow_anonymous_reads = True
    # No HEAD: Django answers HEAD with `get`, and a writer's nap claims jobs — a link checker or a proxy's
    # probe with a writer's token held them for NAP_CLAIM_SECONDS and showed nobody (found by a breaker).
    http_method_names = ["get", "options"]

    @extend_schema(
        operation_id="nap_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.NapQuerySerializer],
        responses={
            200: s.NapEnvelopeSerializer,
            409: OpenApiResponse(description="The store is archived (conflict_error, reason store_archived)."),
        },
        description="Up to `limit` ready compaction jobs, lowest level first, then oldest start. With write "
        "access (store right and memories:write) each job is claimed for you for NAP_CLAIM_SECONDS; other "
        "callers skip it, and your repeated nap returns it again and renews the claim, for at most "
        "NAP_CLAIM_MAX_SECONDS from your first claim of it (then other callers get it, and you not for one "
        "NAP_CLAIM_SECONDS). When every ready job is claimed by someone "
        "else, job is null, complete false and meta.retry_after says when the earliest claim lapses. An "
        "archived store can hold no new summary: 409 store_archived.",
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

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    @extend_schema(
        operation_id="compact_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.CompactRequestSerializer,
        responses={201: s.CompactEnvelopeSerializer, 200: s.CompactEnvelopeSerializer},
    )
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="write")
        reject_query(request)
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

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="zoom_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.ZoomQuerySerializer],
        responses={200: s.ZoomEnvelopeSerializer},
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        params = dict(validate(s.ZoomQuerySerializer, request.query_params))
        return envelope(s.render_zoom(selectors.zoom(store=store, block=params.pop("range"), **params)))


class RecallView(APIView):
    """Search original entries with RE2, newest first, one bounded page at a time."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    allow_anonymous_reads = True

    @extend_schema(
        operation_id="recall_memories",
        tags=TAGS,
        parameters=[STORE_ID, s.RecallQuerySerializer],
        responses={200: s.RecallEnvelopeSerializer},
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk)
        query = validate(s.RecallQuerySerializer, request.query_params)
        page = selectors.recall(store=store, caller=caller_of(request), **query)
        meta = {"next_cursor": page.next_cursor, "snapshot": page.snapshot, "examined": page.examined}
        return envelope(s.render_recall_matches(page.matches), meta)


# wake, zoom and recall in their plain case (a bearer credential, no body) without Django's resolver and
# DRF's dispatch (config/fastlane.py). They write nothing; the query goes through the hostile-input
# screening and the views' own validation, and every refusal is the view's.
_STORE_EXAMPLE = {"pk": "00000000-0000-4000-8000-000000000000"}
_LOG = rf"/api/v1/memories/(?P<pk>{UUID_GROUP})"
WAKE_LANE = Lane(method="GET", pattern=f"{_LOG}/wake", view=WakeView, example=_STORE_EXAMPLE)
ZOOM_LANE = Lane(method="GET", pattern=f"{_LOG}/zoom", view=ZoomView, example=_STORE_EXAMPLE)
RECALL_LANE = Lane(method="GET", pattern=f"{_LOG}/recall", view=RecallView, example=_STORE_EXAMPLE)


class ForgetView(APIView):
    """Invalidate a range's summary and its ancestors (owner)."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    @extend_schema(
        operation_id="forget_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        request=s.ForgetRequestSerializer,
        responses={200: s.ForgetEnvelopeSerializer},
    )
    def post(self, request, pk):
        store = get_store_for(request.user, pk, need="owner")
        reject_query(request)
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


class RedactView(APIView):
    """Redact one entry for good (owner; project and board owners too)."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    @extend_schema(
        operation_id="redact_memories_entry",
        tags=TAGS,
        parameters=[STORE_ID, SEQ],
        request=s.RedactRequestSerializer,
        responses={200: s.RedactEnvelopeSerializer},
        description="Null the entry's text for good (seq, author, created_at and size_bytes stay); null the "
        "text of every summary whose range contains it, invalidate the live ones and bump generation. The "
        "reason goes to the audit log only. Redacting again returns the entry unchanged (meta.changed false).",
    )
    def post(self, request, pk, seq):
        store = get_store_for(request.user, pk, need="owner")
        reject_query(request)
        seq = s.parse_seq(seq)
        incoming = s.RedactRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        result = services.redact_entry(
            store=store,
            actor=request.user,
            seq=seq,
            reason=incoming.validated_data["reason"],
            request_id=request_id_of(request),
        )
        return envelope(s.render_entry(result.entry), s.RedactMetaSerializer(result).data)


class AnyAccept(BaseContentNegotiation):
    """The export answers JSON Lines (or a JSON error) whatever `Accept` says: no 406 for `application/jsonl`."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ExportView(APIView):
    """The whole store as JSON Lines (owner)."""

    store_kwarg = "pk"  # the store is fetched with the token (accounts.authentication)

    content_negotiation_class = AnyAccept

    @extend_schema(
        operation_id="export_memories",
        tags=TAGS,
        parameters=[STORE_ID],
        responses={
            (200, export_format.MEDIA_TYPE): OpenApiResponse(
                OpenApiTypes.STR,
                description="JSON Lines (one JSON object per line, format `memories-export` version 1, see "
                "docs/export-import.md): a header, every entry, summary, file version, file memory and reader, "
                "then an end line with the line count and a SHA-256 chain. Streamed from one snapshot.",
            ),
            429: OpenApiResponse(
                description="The caller already has STREAM_THREADS_PER_USER exports (default 1) in progress on "
                "this server process (rate_limit_error); retry after `Retry-After` seconds. A 503 says every "
                "process-wide export slot is busy."
            ),
        },
        description="Owner only. Stream the store as JSON Lines (SPEC §8b); import it elsewhere with "
        "`manage.py import_store` or `rog memories import`. Redaction reasons are never exported.",
    )
    def get(self, request, pk):
        store = get_store_for(request.user, pk, need="owner")
        s.ExportQuerySerializer(data=request.query_params).is_valid(raise_exception=True)
        chunks = export_chunks(store)
        # the first chunk is read here, inside the view: a store deleted since the access check is its 404
        # (raised by the snapshot read), not a failure in the middle of a streamed 200
        first = next(chunks)

        def body():
            # a generator, so StreamingHttpResponse.close() closes it (itertools.chain has no close()):
            # a stream ended early (cut, client gone, refused) ends the export's transaction on its thread
            try:
                yield first
                yield from chunks
            finally:
                chunks.close()

        response = StreamingHttpResponse(body(), content_type=export_format.MEDIA_TYPE)
        response["Content-Disposition"] = f'attachment; filename="memories-{store.pk}.jsonl"'
        response["Cache-Control"] = "no-store"
        setattr(response, STREAM_KEY, f"user:{request.user.pk}")  # at most STREAM_THREADS_PER_USER at once
        return response
