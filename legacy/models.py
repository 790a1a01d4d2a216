"""Pre-2.0 "flat records" and the internal archive the 0041 migration copies them into (SPEC §7).

The live legacy tables (`Record`, `Assessment`, `Revision`) are what the retired `/api/v1/records…`
API wrote. They are no longer written by the product; the 0041 import reads them. The archive tables
(`ArchivedRecord`, `ArchivedAssessment`, `ArchivedRevision`) hold a lossless JSON copy of every column
of every legacy row (PostgreSQL `to_jsonb(row)`), keyed by the source row's id, for retention and
migration audits. They have no foreign keys, so they outlive users, projects and the legacy rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class RecordStatus(models.TextChoices):
    DRAFT = "draft", "draft"
    PUBLISHED = "published", "published"
    ARCHIVED = "archived", "archived"


class Record(models.Model):
    """One legacy flat record. `price` is in minor units (cents); null means free.

    `key` is globally unique: it is what the retired key shortcuts (`/api/v1/r/<key>`) addressed.
    A record's current text is `label` + `description`; its history is in `revisions`.
    """

    id = models.BigAutoField(primary_key=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="legacy_records")
    project = models.ForeignKey(
        "accounts.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="legacy_records"
    )
    key = models.CharField(max_length=64, unique=True)
    label = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, choices=RecordStatus.choices, default=RecordStatus.DRAFT)
    price = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.CheckConstraint(name="legacy_record_price_nonnegative", condition=Q(price__gte=0))]
        # The import walks records in (created_at, id) order with keyset pagination.
        indexes = [models.Index(fields=["created_at", "id"], name="legacy_record_chronological")]

    def __str__(self) -> str:
        return f"record {self.key}"


class Verdict(models.TextChoices):
    APPROVE = "approve", "approve"
    REJECT = "reject", "reject"
    COMMENT = "comment", "comment"


class Assessment(models.Model):
    """A legacy review of a record: a verdict, an optional 1–5 score and free text."""

    id = models.BigAutoField(primary_key=True)
    record = models.ForeignKey(Record, on_delete=models.CASCADE, related_name="assessments")
    assessor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    score = models.SmallIntegerField(null=True, blank=True)
    text = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="legacy_assessment_score_range", condition=Q(score__isnull=True) | Q(score__gte=1, score__lte=5)
            )
        ]

    def __str__(self) -> str:
        return f"assessment {self.pk} of record {self.record_id}"


class Revision(models.Model):
    """A legacy edit of a record: the label and description as they were after that edit."""

    id = models.BigAutoField(primary_key=True)
    record = models.ForeignKey(Record, on_delete=models.CASCADE, related_name="revisions")
    editor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    label = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"revision {self.pk} of record {self.record_id}"


class ArchivedRow(models.Model):
    """A lossless copy of one legacy row: `data` is PostgreSQL's `to_jsonb(row)` (every column, by name).

    Written once by the 0041 migration (`legacy.services.archive_legacy_rows`); never updated.
    """

    source_id = models.BigIntegerField(unique=True)
    data = models.JSONField()
    archived_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True
        ordering = ["source_id"]

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} {self.source_id}"


class ArchivedRecord(ArchivedRow):
    class Meta(ArchivedRow.Meta):
        verbose_name = "archived record"


class ArchivedAssessment(ArchivedRow):
    class Meta(ArchivedRow.Meta):
        verbose_name = "archived assessment"


class ArchivedRevision(ArchivedRow):
    class Meta(ArchivedRow.Meta):
        verbose_name = "archived revision"
