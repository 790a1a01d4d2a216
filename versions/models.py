"""File memories (the current head of each path) and their immutable versions (SPEC §5).

A `Memory` row is the *current* state of one path in a store; every non-no-op create, update and
delete appends one `Version`. Versions outlive their memory: `Version.memory_id` is a plain UUID
column (no foreign key), so deleting a memory leaves its lineage listable; deleting the store
removes both (CASCADE on `store`).
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

CONTENT_MAX_BYTES = 102_400
PATH_MAX_BYTES = 1024
PATH_MAX_SEGMENTS = 20
VIEW_FULL_MAX_ITEMS = 20


class Operation(models.TextChoices):
    CREATED = "created", "created"
    MODIFIED = "modified", "modified"
    DELETED = "deleted", "deleted"


class Version(models.Model):
    """One immutable write to a memory: `created`, `modified` (content and/or path) or `deleted`.

    `path`, `content`, `content_sha256` (lowercase hex SHA-256 of the UTF-8 bytes) and
    `content_size_bytes` record the state written; a `deleted` version keeps `path` and nulls the
    rest. Redaction nulls all four and sets `redacted_at`/`redacted_by` — the only change a version
    ever sees. `created_by`/`redacted_by` are actor objects (`versions.actors.Actor.as_json()`);
    `api_key_id`/`session_id`/`user_id` copy the author's id for the list filters.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: the primary key (store_id, id) leads with it (issue 17: one index fewer per write).
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="memory_versions", db_index=False)
    memory_id = models.UUIDField()
    operation = models.CharField(max_length=8, choices=Operation.choices)
    path = models.TextField(null=True, blank=True, db_collation="C")
    content = models.TextField(null=True, blank=True)
    content_sha256 = models.CharField(max_length=64, null=True, blank=True)
    content_size_bytes = models.IntegerField(null=True, blank=True)
    created_by = models.JSONField(null=True, blank=True)
    api_key_id = models.UUIDField(null=True, blank=True)
    session_id = models.UUIDField(null=True, blank=True)
    user_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    redacted_at = models.DateTimeField(null=True, blank=True)
    redacted_by = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            # A redacted version keeps no path or content; a live one always has a path.
            models.CheckConstraint(
                name="version_redaction_shape",
                condition=(
                    Q(
                        redacted_at__isnull=True,
                        path__isnull=False,
                    )
                    | Q(
                        redacted_at__isnull=False,
                        path__isnull=True,
                        content__isnull=True,
                        content_sha256__isnull=True,
                        content_size_bytes__isnull=True,
                    )
                ),
            ),
            # A `deleted` version records no content; created/modified ones do unless redacted.
            models.CheckConstraint(
                name="version_content_by_operation",
                condition=(
                    Q(operation=Operation.DELETED, content__isnull=True, content_sha256__isnull=True)
                    | (~Q(operation=Operation.DELETED) & (Q(redacted_at__isnull=False) | Q(content__isnull=False)))
                ),
            ),
            models.CheckConstraint(
                name="version_content_size_range",
                condition=Q(content_size_bytes__isnull=True)
                | Q(content_size_bytes__gte=0, content_size_bytes__lte=CONTENT_MAX_BYTES),
            ),
        ]
        indexes = [
            models.Index(fields=["store", "-created_at", "-id"], name="version_store_newest"),
            models.Index(fields=["memory_id", "-created_at"], name="version_memory_newest"),
            models.Index(fields=["api_key_id"], name="version_api_key", condition=Q(api_key_id__isnull=False)),
            models.Index(fields=["session_id"], name="version_session", condition=Q(session_id__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.operation} version {self.pk} of memory {self.memory_id}"


class Memory(models.Model):
    """The current head of one path in a store (SPEC §5).

    `path` uses the "C" collation so ordering and range comparisons are bytewise (UTF-8 byte order
    equals code-point order). `current_version` is the head version (its `content_sha256` and size
    equal these). Paths are unique per store (constraint); ancestor/descendant conflicts and the
    per-store cap are enforced by the services under the store row lock.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: the primary key (store_id, id) leads with it (issue 17: one index fewer per write).
    store = models.ForeignKey("stores.Store", on_delete=models.CASCADE, related_name="file_memories", db_index=False)
    path = models.TextField(db_collation="C")
    content = models.TextField(blank=True)
    content_sha256 = models.CharField(max_length=64)
    content_size_bytes = models.IntegerField()
    # The database's foreign key is (store_id, current_version_id) → versions_version (store_id, id),
    # deferred (migration versions/0002): both tables are keyed by store first, so they can be distributed
    # by store (issue 21); Django sees a plain reference without a constraint of its own. DO_NOTHING:
    # versions are only ever removed together with their store, which removes this row in the same
    # transaction (PostgreSQL checks the deferred foreign key at commit).
    current_version = models.ForeignKey(
        Version, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "memories"
        constraints = [
            models.UniqueConstraint("store", "path", name="memory_store_path_unique"),
            models.UniqueConstraint("store", "current_version", name="memory_store_current_version_unique"),
            models.CheckConstraint(
                name="memory_content_size_range",
                condition=Q(content_size_bytes__gte=0, content_size_bytes__lte=CONTENT_MAX_BYTES),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.path} in {self.store_id}"
