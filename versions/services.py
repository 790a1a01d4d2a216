"""Write use-cases for file memories and versions (SPEC §5). Store-level writes live in `stores.services`.

Every service locks the store row first (`select_for_update(of=("self",))`), so within one store all
file writes are serialised: the memory cap (`Store.memory_count`, exact), path uniqueness including
ancestor/descendant conflicts, and preconditions are checked against committed state. The unique
constraint on (store, path) backs the exact-path rule. Access (read/write) has been checked by the
caller through `stores.selectors.get_store_for`; archived state is checked here, under the lock.

Writes made with a per-work credential pass a `fence` (`sessions.services.work.lease_fence`): called right
after the store lock, it locks the work row, checks the lease by database time (raising 409 lease_expired,
nothing written) and returns that time, which the write stamps on its version and memory.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from stores.errors import StoreArchived
from stores.models import Store
from stores.services import lock_store
from versions.actors import Actor
from versions.errors import (
    MemoryLimitReached,
    MemoryNotFound,
    MemoryPathConflict,
    MemoryPreconditionFailed,
    VersionIsCurrent,
    VersionNotFound,
)
from versions.models import Memory, Operation, Version
from versions.selectors import parse_id

Fence = Callable[[], datetime]


def _lock_and_fence(store: Store, fence: Fence | None) -> tuple[Store, datetime]:
    """Lock the store row, then pass the fence (if any); return the store and the write's timestamp."""
    locked = lock_store(store)
    return locked, (fence() if fence is not None else timezone.now())


def content_digest(content: str) -> str:
    """Lowercase hex SHA-256 of `content`'s UTF-8 bytes (no normalisation of any kind)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def _lock_memory(store: Store, memory_id: object) -> Memory:
    pk = parse_id(memory_id, MemoryNotFound)
    memory = Memory.objects.select_for_update(of=("self",)).filter(store=store, pk=pk).first()
    if memory is None:
        raise MemoryNotFound()
    return memory


def _ancestors(path: str) -> list[str]:
    """``/a/b/c.md`` → ``["/a", "/a/b"]`` (the proper ancestors, shortest first)."""
    segments = path[1:].split("/")
    return ["/" + "/".join(segments[:n]) for n in range(1, len(segments))]


def _check_path_free(store: Store, path: str, *, exclude: uuid.UUID | None = None) -> Memory | None:
    """Return the memory already at exactly `path` (None if free), or raise MemoryPathConflict when an
    ancestor or descendant of `path` is a current memory. One query; call under the store lock."""
    clash = Q(path=path) | Q(path__in=_ancestors(path)) | Q(path__startswith=path + "/")
    blockers = Memory.objects.filter(store=store).filter(clash)
    if exclude is not None:
        blockers = blockers.exclude(pk=exclude)
    found = list(blockers.order_by("path")[:2])
    exact = next((m for m in found if m.path == path), None)
    if exact is not None:
        return exact
    if found:
        raise MemoryPathConflict(memory_id=found[0].pk, path=found[0].path, requested=path)
    return None


def _new_version(
    *, store: Store, memory_id: uuid.UUID, operation: str, path: str, content: str | None, actor: Actor, now
) -> Version:
    return Version.objects.create(
        store=store,
        memory_id=memory_id,
        operation=operation,
        path=path,
        content=content,
        content_sha256=None if content is None else content_digest(content),
        content_size_bytes=None if content is None else len(content.encode("utf-8")),
        created_by=actor.as_json(),
        created_at=now,
        **actor.columns(),
    )


@dataclass(frozen=True)
class CreateResult:
    """`memory` is the new memory, or the existing one when the path already held the same content."""

    memory: Memory
    created: bool


@transaction.atomic
def create_memory(*, store: Store, path: str, content: str, actor: Actor, fence: Fence | None = None) -> CreateResult:
    """Create a memory at `path` and its `created` version (SPEC §5 memory create).

    path: already valid (`versions.validation.clean_path`); content: ≤102,400 UTF-8 bytes, validated.
    Idempotent for retries: if `path` already holds exactly `content`, that memory is returned with
    ``created=False`` and nothing is written. Raises StoreArchived (409), MemoryPathConflict (409: the
    path holds other content, or an ancestor/descendant is a memory), MemoryLimitReached (409 when the
    store already holds `MEMORY_STORE_MAX_MEMORIES` current memories). Locks the store row, then passes
    `fence`.
    """
    locked, now = _lock_and_fence(store, fence)
    if locked.archived_at is not None:
        raise StoreArchived()
    existing = _check_path_free(locked, path)
    if existing is not None:
        if existing.content == content:
            return CreateResult(existing, False)
        raise MemoryPathConflict(memory_id=existing.pk, path=existing.path, requested=path)
    if locked.memory_count >= settings.MEMORY_STORE_MAX_MEMORIES:
        raise MemoryLimitReached(details={"limit": settings.MEMORY_STORE_MAX_MEMORIES})
    memory_id = uuid.uuid4()
    version = _new_version(
        store=locked, memory_id=memory_id, operation=Operation.CREATED, path=path, content=content, actor=actor, now=now
    )
    memory = Memory.objects.create(
        id=memory_id,
        store=locked,
        path=path,
        content=content,
        content_sha256=version.content_sha256,
        content_size_bytes=version.content_size_bytes,
        current_version=version,
        created_at=now,
        updated_at=now,
    )
    # Only the counter moves: memory writes never touch the store's updated_at or log counters.
    locked.memory_count += 1
    locked.save(update_fields=["memory_count"])
    return CreateResult(memory, True)


@transaction.atomic
def update_memory(
    *,
    store: Store,
    memory_id: object,
    actor: Actor,
    content: str | None = None,
    path: str | None = None,
    expected_sha256: str | None = None,
    fence: Fence | None = None,
) -> Memory:
    """Change a memory's content and/or path, appending one `modified` version (SPEC §5 memory update).

    content / path: validated new values, None = unchanged. expected_sha256: the precondition on the
    *current* content hash. A request that describes the stored state (same content and path) is a
    no-op — no version, same `memory_version_id` — even when its precondition is stale (idempotent
    retry). Renames keep the id. Raises MemoryNotFound (404), StoreArchived (409),
    MemoryPreconditionFailed (409), MemoryPathConflict (409). Locks the store row, passes `fence`, then
    locks the memory.
    """
    locked, now = _lock_and_fence(store, fence)
    memory = _lock_memory(locked, memory_id)
    if locked.archived_at is not None:
        raise StoreArchived()
    new_content = memory.content if content is None else content
    new_path = memory.path if path is None else path
    if new_content == memory.content and new_path == memory.path:
        return memory
    if expected_sha256 is not None and expected_sha256 != memory.content_sha256:
        raise MemoryPreconditionFailed(details={"content_sha256": memory.content_sha256})
    if new_path != memory.path:
        occupant = _check_path_free(locked, new_path, exclude=memory.pk)
        if occupant is not None:
            raise MemoryPathConflict(memory_id=occupant.pk, path=occupant.path, requested=new_path)
    version = _new_version(
        store=locked,
        memory_id=memory.pk,
        operation=Operation.MODIFIED,
        path=new_path,
        content=new_content,
        actor=actor,
        now=now,
    )
    memory.path = new_path
    memory.content = new_content
    memory.content_sha256 = version.content_sha256
    memory.content_size_bytes = version.content_size_bytes
    memory.current_version = version
    memory.updated_at = now
    # By (store, id), not by id alone: one shard on Citus (tests/scaling/test_hot_paths.py).
    Memory.objects.filter(store_id=locked.pk, pk=memory.pk).update(
        path=new_path,
        content=new_content,
        content_sha256=version.content_sha256,
        content_size_bytes=version.content_size_bytes,
        current_version=version,
        updated_at=now,
    )
    return memory


@transaction.atomic
def delete_memory(
    *, store: Store, memory_id: object, actor: Actor, expected_sha256: str | None = None, fence: Fence | None = None
) -> Version:
    """Delete a memory, appending its `deleted` version (path kept, content null); returns that version.

    Allowed on archived stores (SPEC §3). The path becomes free; the versions stay listable.
    expected_sha256: must equal the current hash, else MemoryPreconditionFailed (409), nothing deleted.
    Raises MemoryNotFound (404). Locks the store row, passes `fence`, then locks the memory.
    """
    locked, now = _lock_and_fence(store, fence)
    memory = _lock_memory(locked, memory_id)
    if expected_sha256 is not None and expected_sha256 != memory.content_sha256:
        raise MemoryPreconditionFailed(details={"content_sha256": memory.content_sha256})
    version = _new_version(
        store=locked,
        memory_id=memory.pk,
        operation=Operation.DELETED,
        path=memory.path,
        content=None,
        actor=actor,
        now=now,
    )
    Memory.objects.filter(store_id=locked.pk, pk=memory.pk).delete()
    locked.memory_count -= 1
    locked.save(update_fields=["memory_count"])
    return version


@transaction.atomic
def redact_version(*, store: Store, version_id: object, actor: Actor, fence: Fence | None = None) -> Version:
    """Redact a version for good: null its content, digest, size and path; record who and when (SPEC §5).

    Allowed on archived stores. An already-redacted version is returned unchanged (first
    `redacted_at`/`redacted_by` kept). Raises VersionNotFound (404), VersionIsCurrent (409) for the
    head version of a live memory. Locks the store row (so the head cannot move underneath the check), then
    passes `fence`.
    """
    locked, now = _lock_and_fence(store, fence)
    pk = parse_id(version_id, VersionNotFound)
    version = Version.objects.select_for_update(of=("self",)).filter(store=locked, pk=pk).first()
    if version is None:
        raise VersionNotFound()
    if version.redacted_at is not None:
        return version
    if Memory.objects.filter(store_id=locked.pk, current_version=version).exists():
        raise VersionIsCurrent()
    version.path = version.content = version.content_sha256 = version.content_size_bytes = None
    version.redacted_at = now
    version.redacted_by = actor.as_json()
    Version.objects.filter(store_id=locked.pk, pk=version.pk).update(
        path=None,
        content=None,
        content_sha256=None,
        content_size_bytes=None,
        redacted_at=now,
        redacted_by=version.redacted_by,
    )
    return version
