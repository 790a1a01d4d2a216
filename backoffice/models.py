"""AuditEvent: the immutable record of what staff did in the back office (SPEC §6)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

REASON_MAX_CHARS = 1000


class AuditAction(models.TextChoices):
    ARCHIVE_STORE = "archive_store", "archive store"
    REDACT_ENTRY = "redact_entry", "redact entry"


class AuditEvent(models.Model):
    """One audited action: staff archiving a store, an owner redacting an entry. Never changed or deleted
    (the admin forbids both, for superusers too).

    `store_id` and `store_name` are copies taken at the time (no foreign key), so the event outlives the
    store; `actor_handle` likewise outlives the user. `seq` names the redacted entry; `details` holds
    metadata only (never entry or summary text): for a redaction ``{author, created_at, size_bytes,
    invalidated, summaries_redacted, generation}``.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    actor_handle = models.CharField(max_length=64)
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    store_id = models.UUIDField()
    store_name = models.CharField(max_length=255)
    reason = models.TextField()
    seq = models.BigIntegerField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["store_id", "-created_at"], name="audit_by_store")]
        constraints = [
            models.CheckConstraint(name="audit_reason_not_empty", condition=~models.Q(reason="")),
        ]

    def __str__(self) -> str:
        return f"{self.actor_handle} {self.action} {self.store_name} at {self.created_at:%Y-%m-%d %H:%M}"


class RedactionEventManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(action=AuditAction.REDACT_ENTRY)


class RedactionEvent(AuditEvent):
    """The `redact_entry` audit events, as their own back-office page (metadata only; SPEC §4, §6)."""

    objects = RedactionEventManager()

    class Meta:
        proxy = True
        ordering = ["-created_at"]
        verbose_name = "entry redaction"
        verbose_name_plural = "entry redactions"
