"""The Memories log: append-only entries and the aligned binary tree of summaries (SPEC §4)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

BODY_MAX_BYTES = 1024
SUMMARY_MAX_BYTES = 1024
NONCE_MAX_CHARS = 128
MODEL_MAX_CHARS = 200


class Entry(models.Model):
    """One log entry. `seq` is 0-based and contiguous per store (assigned under the store lock).

    `body_md` is stored exactly as sent (1..1,024 UTF-8 bytes; `size_bytes` is its byte length).
    `client_nonce` makes appends idempotent per (store, author). `provenance` is set by imports only.
    Redaction (SPEC §4 "redact an entry") is the only change an entry ever sees: `body_md` becomes null
    and `redacted_at`/`redacted_by` are set; seq, author, created_at and size_bytes stay.
    """

    id = models.BigAutoField(primary_key=True)
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="entries", db_index=False)
    seq = models.BigIntegerField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    body_md = models.TextField(null=True, blank=True)  # null once redacted
    size_bytes = models.IntegerField()
    client_nonce = models.CharField(max_length=NONCE_MAX_CHARS, null=True, blank=True)
    session_id = models.UUIDField(null=True, blank=True)
    provenance = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    redacted_at = models.DateTimeField(null=True, blank=True)
    redacted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    class Meta:
        indexes = [
            # Almost every entry has no redactor: a partial index serves the user-delete lookup
            # (``redacted_by_id = X``) without an index insertion on every append (issue 17).
            models.Index(fields=["redacted_by"], condition=Q(redacted_by__isnull=False), name="entry_redacted_by"),
        ]
        constraints = [
            models.UniqueConstraint("store", "seq", name="entry_store_seq_unique"),
            models.UniqueConstraint("store", "author", "client_nonce", name="entry_store_author_nonce_unique"),
            models.CheckConstraint(name="entry_seq_nonnegative", condition=Q(seq__gte=0)),
            models.CheckConstraint(
                name="entry_size_bytes_range", condition=Q(size_bytes__gte=1, size_bytes__lte=BODY_MAX_BYTES)
            ),
            # A live entry has its text; a redacted one has none.
            models.CheckConstraint(
                name="entry_redaction_shape",
                condition=Q(redacted_at__isnull=True, body_md__isnull=False)
                | Q(redacted_at__isnull=False, body_md__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"entry {self.seq} of {self.store_id}"


class Summary(models.Model):
    """A summary of the aligned range ``[start, end]`` (inclusive; size ``2**level``, level ≥ 1).

    Never edited: `forget` sets `invalidated_at` (kept for audit). At most one live summary per range
    (partial unique constraint). `source_digest` identifies the two children it was built from.
    Redacting an entry inside the range nulls `summary_md` (it may quote the entry) and `source_digest` (a
    hash over the redacted text: with a sibling's text beside it in an export, it told whether a guess of
    the redacted text was right) and sets `redacted_at`; a redacted summary is always invalidated.
    """

    id = models.BigAutoField(primary_key=True)
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="summaries", db_index=False)
    start = models.BigIntegerField()
    end = models.BigIntegerField()
    level = models.SmallIntegerField()
    summary_md = models.TextField(null=True, blank=True)  # null once redacted
    size_bytes = models.IntegerField()
    model = models.CharField(max_length=MODEL_MAX_CHARS)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    source_digest = models.CharField(max_length=64, null=True, blank=True)  # null once redacted
    generation = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    invalidated_at = models.DateTimeField(null=True, blank=True)
    invalidated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    redacted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "summaries"
        constraints = [
            models.UniqueConstraint(
                "store", "start", "end", condition=Q(invalidated_at__isnull=True), name="summary_one_live_per_range"
            ),
            models.CheckConstraint(
                name="summary_range_shape", condition=Q(level__gte=1, start__gte=0, end__gt=F("start"))
            ),
            models.CheckConstraint(
                name="summary_size_bytes_range",
                condition=Q(size_bytes__gte=1, size_bytes__lte=SUMMARY_MAX_BYTES),
            ),
            models.CheckConstraint(
                name="summary_redaction_shape",
                condition=Q(redacted_at__isnull=True, summary_md__isnull=False, source_digest__isnull=False)
                | Q(
                    redacted_at__isnull=False,
                    summary_md__isnull=True,
                    source_digest__isnull=True,
                    invalidated_at__isnull=False,
                ),
            ),
        ]
        indexes = [
            models.Index(
                fields=["store", "level", "start"],
                condition=Q(invalidated_at__isnull=True),
                name="summary_live_by_level",
            ),
            # `pending` at a snapshot below entry_count counts the live summaries ending at or after it.
            models.Index(fields=["store", "end"], condition=Q(invalidated_at__isnull=True), name="summary_live_by_end"),
            # Every summary, live or invalidated, by range: redaction reaches all rows of the ~log2(N)
            # ranges containing a seq, and the export streams them in (level, start) order.
            models.Index(fields=["store", "level", "start"], name="summary_by_level"),
        ]

    def __str__(self) -> str:
        return f"summary {self.start}-{self.end} of {self.store_id}"


# How many runs of missing ranges below its `start` a watermark lists per level (`Watermark.hole_starts`).
WATERMARK_HOLES = 16


class Watermark(models.Model):
    """What nap's scan of one level of a store's tree already knows (SPEC §4 nap; docs/memories-log.md
    "Watermarks").

    Every aligned level-`level` range starting before `start` had a live summary while the store's
    generation was `generation` — except inside the listed *holes*: ``[hole_starts[i], hole_ends[i])``,
    sorted, disjoint, aligned to the level, at most `WATERMARK_HOLES`, each ending at or before `start`.
    Within one generation summaries are only added (only `forget` and `redact` invalidate them, and both
    move the generation on), so a range known to be live stays live and a hole can only fill: the row stays
    true, and nap only has to look inside the holes and after `start`. A row of an older generation is
    simply ignored and overwritten. Only nap writes it (nap.py's scan statement), derived data: losing every
    row costs one scan of the store's summaries, never a wrong answer. One row per level (`store` leads the
    key).
    """

    id = models.BigAutoField(primary_key=True)
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="+", db_index=False)
    level = models.SmallIntegerField()
    start = models.BigIntegerField()
    hole_starts = ArrayField(models.BigIntegerField(), default=list)
    hole_ends = ArrayField(models.BigIntegerField(), default=list)
    generation = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint("store", "level", name="watermark_one_per_level"),
            models.CheckConstraint(name="watermark_shape", condition=Q(level__gte=1, start__gte=0)),
            models.CheckConstraint(
                name="watermark_holes",
                condition=Q(hole_starts__len=F("hole_ends__len"), hole_starts__len__lte=WATERMARK_HOLES),
            ),
        ]

    def __str__(self) -> str:
        return f"level-{self.level} watermark {self.start} of {self.store_id}"


class ImportStatus(models.TextChoices):
    OPEN = "open", "open"
    COMMITTED = "committed", "committed"


class StoreImport(models.Model):
    """A resumable import of an export file over HTTP (SPEC §8b; docs/export-import.md).

    The import writes into `store`, created hidden (`Store.importing`) when the import starts: no read,
    list, search or write path sees it until the end line commits it. `next_line` is the 1-based number
    of the next file line expected; `state` is the verifier's state between requests (JSON). An open
    import idle longer than `IMPORT_IDLE_SECONDS` is abandoned: the next import start deletes its store.
    Deleting the store deletes the import (CASCADE).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=ImportStatus.choices, default=ImportStatus.OPEN)
    next_line = models.BigIntegerField(default=1)
    state = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["status", "updated_at"], name="store_import_idle")]

    def __str__(self) -> str:
        return f"import {self.pk} into {self.store_id} ({self.status})"


class Claim(models.Model):
    """An advisory claim on one compaction job: range ``[start, end]`` of `store`, held by `claimant`
    until `expires_at` (SPEC §4 nap / compact, Claims).

    `claimant` is a key string, ``"user:<uuid>"`` today; a per-work credential will claim as
    ``"session:<uuid>"`` without a schema change. A claim counts only while ``expires_at`` is after the
    database's ``statement_timestamp()`` and `generation` is the store's: a lapsed or stale claim is simply
    overwritten by the next nap that hands its range out, the claim of a range is deleted when the range's
    summary is stored (`compact`) and every claim of the store on `forget` — no background job. One claim
    per range (`store` leads the key, as in every index of store content).
    """

    id = models.BigAutoField(primary_key=True)
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="claims", db_index=False)
    start = models.BigIntegerField()
    end = models.BigIntegerField()
    level = models.SmallIntegerField()
    claimant = models.CharField(max_length=80)
    generation = models.BigIntegerField()
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint("store", "start", "end", name="claim_one_per_range"),
            models.CheckConstraint(
                name="claim_range_shape", condition=Q(level__gte=1, start__gte=0, end__gt=F("start"))
            ),
            models.CheckConstraint(name="claim_expires_after_claimed", condition=Q(expires_at__gt=F("claimed_at"))),
        ]

    def __str__(self) -> str:
        return f"claim {self.start}-{self.end} of {self.store_id} by {self.claimant}"
