"""The resumable import over HTTP (SPEC §8b; docs/export-import.md), what `rog memories import` drives.

POST /memories/imports (first chunk, header first) → an import; POST /memories/imports/{id}/lines
?from_line=N (the next chunks); GET /memories/imports/{id} (where to resume); DELETE (abandon); GET
/memories/imports (the caller's own imports, to find a lost id again). Chunks are
whole lines of the export (`application/jsonl` or `application/x-ndjson`), each at most MAX_REQUEST_BYTES.
Views are thin: parse, check access, call one `memories.exchange.services` service, render.
"""

from __future__ import annotations

import contextlib

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiRequest, extend_schema
from rest_framework import serializers
from rest_framework.parsers import BaseParser
from rest_framework.views import APIView

from accounts.idempotency import replayable
from config.api import StrictIntegerField, StrictQuerySerializer, caller_key, envelope, reject_body, reject_query
from memories.exchange import services as imports
from memories.exchange.format import ACCEPTED_MEDIA_TYPES
from memories.models import ImportStatus
from stores.api.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, take_page
from stores.api.serializers import CursorField, StoreSerializer, SubjectField
from stores.errors import StoreNotFound
from stores.models import Scope
from stores.selectors import (
    after_newest_first,
    get_store_for,
    newest_first_keys,
    parse_newest_first_keys,
    readable_stores,
    subject_for_import,
)

TAGS = ["memories export and import"]
IMPORT_ID = OpenApiParameter("import_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Import UUID.")
# Whole lines of an export file (each ending with a newline), at most MAX_REQUEST_BYTES.
CHUNK = OpenApiRequest(OpenApiTypes.BINARY)


class JsonLinesParser(BaseParser):
    """Hands the raw body over: the importer checks each line itself (UTF-8, JSON, NUL, sizes)."""

    media_type = ACCEPTED_MEDIA_TYPES[0]

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        return stream.read() if stream is not None else b""


class NdjsonParser(JsonLinesParser):
    media_type = ACCEPTED_MEDIA_TYPES[1]


def _body(request) -> bytes:
    data = request.data
    return data if isinstance(data, bytes) else b""


class ImportStartQuerySerializer(StrictQuerySerializer):
    scope = serializers.ChoiceField(choices=Scope.values, required=False, help_text="Default: the file's.")
    subject = SubjectField(required=False, help_text="Handle ('me'), project or section UUID/slug; default: file's.")


class ImportListQuerySerializer(StrictQuerySerializer):
    status = serializers.ChoiceField(choices=ImportStatus.values, required=False, help_text="Only imports in it.")
    cursor = CursorField()
    limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


class ImportLinesQuerySerializer(StrictQuerySerializer):
    from_line = serializers.IntegerField(min_value=2, max_value=2**62, help_text="The line this chunk starts with.")


class ImportSectionCountsSerializer(serializers.Serializer):
    entries = serializers.IntegerField()
    summaries = serializers.IntegerField()
    versions = serializers.IntegerField()
    memories = serializers.IntegerField()
    readers = serializers.IntegerField()


class ImportSerializer(serializers.Serializer):
    """An import: `status` open until the end line lands, then committed (`store` set)."""

    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=["open", "committed"])
    store_id = serializers.UUIDField(help_text="The store being filled (hidden from everyone until committed).")
    next_line = serializers.IntegerField(help_text="The next line to send, as from_line.")
    lines_received = serializers.IntegerField()
    chain = serializers.CharField(
        allow_null=True,
        help_text="The export format's SHA-256 chain over the lines received (64 hex digits; docs/export-import.md): "
        "a client resuming computes it over its file's first `lines_received` lines, to check it is the same file.",
    )
    counts = ImportSectionCountsSerializer(help_text="What the header announces.")
    received = ImportSectionCountsSerializer(help_text="What has been verified and written so far.")
    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the import could not keep as it was: a store id taken here (new ids were given), a "
        "subject that already has a canonical store (the import is an ordinary store).",
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    store = StoreSerializer(
        allow_null=True,
        help_text="The imported store once committed, as you may read it now (null while open, and once you no "
        "longer may read it).",
    )


class ImportEnvelopeSerializer(serializers.Serializer):
    data = ImportSerializer()
    meta = serializers.DictField()


class ImportListMetaSerializer(serializers.Serializer):
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as `cursor` for the next page; null at the end."
    )


class ImportListEnvelopeSerializer(serializers.Serializer):
    data = ImportSerializer(many=True)
    meta = ImportListMetaSerializer()


class ImportAbortDataSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    deleted = serializers.BooleanField()


class ImportAbortEnvelopeSerializer(serializers.Serializer):
    data = ImportAbortDataSerializer()
    meta = serializers.DictField()


def _render(request, upload, *, status: int = 200):
    data = imports.upload_progress(upload)
    data["store"] = None
    if upload.status == ImportStatus.COMMITTED:
        # The chunk that committed was judged under the caller's rights of that moment; a right lost since
        # (a parallel removal) must not turn the committed import's answer into a 404 claiming nothing
        # happened: the import is reported committed, its store null.
        with contextlib.suppress(StoreNotFound):
            data["store"] = get_store_for(request.user, upload.store_id)
    return envelope(ImportSerializer(data, context={"request": request}).data, status=status)


def _render_page(request, uploads) -> list:
    """The imports of one list page as `_render` shows each: a committed one's store as the caller may read
    it now (null once unreadable), fetched for the whole page in one query."""
    committed = [upload.store_id for upload in uploads if upload.status == ImportStatus.COMMITTED]
    stores = {store.pk: store for store in readable_stores(request.user).filter(pk__in=committed)} if committed else {}
    rows = []
    for upload in uploads:
        row = imports.upload_progress(upload)
        row["store"] = stores.get(upload.store_id)
        rows.append(row)
    return ImportSerializer(rows, many=True, context={"request": request}).data


class ImportCollectionView(APIView):
    """List your imports, or start one with the first chunk of the file."""

    parser_classes = [JsonLinesParser, NdjsonParser]

    @extend_schema(
        operation_id="list_memories_imports",
        tags=TAGS,
        parameters=[ImportListQuerySerializer],
        responses={200: ImportListEnvelopeSerializer},
        description="Your own imports, newest first (`status=open` for those you can still resume): how an "
        "import id that was lost is found again. Nobody sees another user's imports. An import is kept until "
        "IMPORT_IDLE_SECONDS (default a day) after its last chunk; then it is deleted (an open one with its "
        "hidden store). Keyset-paginated: pass `meta.next_cursor` as `cursor`.",
    )
    def get(self, request):
        query = ImportListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        status, cursor = query.validated_data.get("status"), query.validated_data.get("cursor")
        binding = [caller_key(request), status]
        keys = decode_cursor(cursor, kind="imports", binding=binding, arity=2) if cursor else None
        uploads = imports.list_uploads(actor=request.user, status=status)
        uploads = after_newest_first(uploads, parse_newest_first_keys(keys) if keys else None)
        page = take_page(
            uploads, limit=query.validated_data["limit"], kind="imports", keys_of=newest_first_keys, binding=binding
        )
        return envelope(_render_page(request, page.rows), {"next_cursor": page.next_cursor})

    @extend_schema(
        operation_id="import_memories",
        tags=TAGS,
        parameters=[ImportStartQuerySerializer],
        request={media: CHUNK for media in ACCEPTED_MEDIA_TYPES},
        responses={201: ImportEnvelopeSerializer},
        description="Start importing an export: the body is the file's first lines (header first). The new "
        "store goes to the file's subject, or to `scope`/`subject`; the caller must own that subject. Every "
        "handle the header lists must exist here (else 400 with details.unknown_handles). An author whose right "
        "to write there is taken away while the chunk is imported makes it 409 import_writers_changed (nothing "
        "written; send it again). Send the rest with POST …/imports/{id}/lines; the chunk holding the end line "
        "commits the store.",
    )
    @replayable(before=lambda view, request: imports.expire_idle_imports())
    def post(self, request):
        query = ImportStartQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        body = _body(request)
        scope, subject = query.validated_data.get("scope"), query.validated_data.get("subject")
        if scope is None or subject is None:
            header_scope, header_subject = imports.header_subject(body)
            scope = scope or header_scope
            subject = subject or (header_subject if scope == header_scope else "me")
        target = subject_for_import(request.user, scope=scope, subject=subject)
        upload = imports.start_upload(actor=request.user, body=body, subject=target, expire_idle=False)
        return _render(request, upload, status=201)


class ImportDetailView(APIView):
    """Where an import stands (to resume it), or abandon it."""

    @extend_schema(
        operation_id="get_memories_import", tags=TAGS, parameters=[IMPORT_ID], responses=ImportEnvelopeSerializer
    )
    def get(self, request, import_id):
        reject_query(request)
        return _render(request, imports.get_upload(actor=request.user, import_id=import_id))

    @extend_schema(
        operation_id="abort_memories_import",
        tags=TAGS,
        parameters=[IMPORT_ID],
        responses={200: ImportAbortEnvelopeSerializer},  # not DELETE's default 204: the answer has a body
        description="Abandon an open import: its hidden store and everything sent so far are deleted.",
    )
    def delete(self, request, import_id):
        reject_query(request)
        reject_body(request)
        pk = imports.abort_upload(actor=request.user, import_id=import_id)
        return envelope({"id": str(pk), "deleted": True})


class ImportLinesView(APIView):
    """Send the next chunk of lines."""

    parser_classes = [JsonLinesParser, NdjsonParser]

    @extend_schema(
        operation_id="append_memories_import",
        tags=TAGS,
        parameters=[IMPORT_ID, ImportLinesQuerySerializer],
        request={media: CHUNK for media in ACCEPTED_MEDIA_TYPES},
        responses=ImportEnvelopeSerializer,
        description="Verify and write the next whole lines, starting at `from_line` (= the import's next_line; "
        "otherwise 409 import_offset_mismatch with details.next_line). Rights are judged on every chunk: the caller "
        "must still own the subject the import fills (else 403) and every author it names must hold the write "
        "right there now (else 400; lost while the chunk worked: 409 import_writers_changed, send it again). "
        "A refused chunk changes nothing.",
    )
    def post(self, request, import_id):
        query = ImportLinesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        upload = imports.append_chunk(
            actor=request.user, import_id=import_id, from_line=query.validated_data["from_line"], body=_body(request)
        )
        return _render(request, upload)


urlpatterns = [
    path("memories/imports", ImportCollectionView.as_view(), name="memories-imports"),
    path("memories/imports/<str:import_id>", ImportDetailView.as_view(), name="memories-import"),
    path("memories/imports/<str:import_id>/lines", ImportLinesView.as_view(), name="memories-import-lines"),
]
