"""Write use-cases for file memories and versions (SPEC §5). Store-level writes live in `stores.services`.

Every service locks the store row first (`FOR NO KEY UPDATE`, `stores.services.lock_store`; create and
update do it inside their one statement, see "one-statement writes" below), so within one store all file
writes are serialised: the memory cap (`Store.memory_count`, exact), path uniqueness including
ancestor/descendant conflicts, and preconditions are checked against committed state. The unique
constraint on (store, path) backs the exact-path rule. Access (read/write) has been checked by the caller
through `stores.selectors.get_store_for`; archived state is checked here, under the lock.

Every file write also updates the store row in its transaction (create and delete move `memory_count`,
update rewrites it unchanged): the one-statement writes rely on it to notice a write committed while they
waited for the lock. Writes made with a per-work credential pass a `fence`
(`sessions.services.work.lease_fence`): called right after the store lock, it locks the work row, checks
the lease by database time (raising 409 lease_expired, nothing written) and returns that time, which the
write stamps on its version and memory.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from config.compiled import prepared_cursor
from config.constraints import violates
from config.fields import canonical_uuid
from stores.errors import StoreArchived
from stores.models import Store
from stores.selectors import PARENT_RIGHTS_CTES, hold_parent_rights, parent_rights
from stores.services import lock_store
from versions.actors import Actor
from versions.errors import (
    MemoryLimitReached,
    MemoryNotFound,
    MemoryPathConflict,
    MemoryPreconditionFailed,
    RedactionNeedsAPerson,
    VersionIsCurrent,
    VersionNotFound,
)
from versions.models import Memory, Operation, Version
from versions.selectors import parse_id

Fence = Callable[[], datetime]

# The unique key of (store, path): the database's backstop of the exact-path rule.
PATH_CONSTRAINT = "memory_store_path_unique"


def _lock_and_fence(store: Store, fence: Fence | None) -> tuple[Store, datetime]:
    """Lock the store row, then pass the fence (if any); return the store and the write's timestamp."""
    locked = lock_store(store)
    return locked, (fence() if fence is not None else timezone.now())


def content_digest(content: str) -> str:
    """Lowercase hex SHA-256 of `content`'s UTF-8 bytes (no normalisation of any kind)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def _ancestors(path: str) -> list[str]:
    """``/a/b/c.md`` → ``["/a", "/a/b"]`` (the proper ancestors, shortest first)."""
    segments = path[1:].split("/")
    return ["/" + "/".join(segments[:n]) for n in range(1, len(segments))]


# --- one-statement writes (issue 17) ------------------------------------------------------------------
#
# create, update and delete run as ONE prepared statement in autocommit mode. Its first step locks the store row
# (`FOR NO KEY UPDATE`), exactly as `lock_store`; but every read of a statement sees the snapshot taken when the
# statement began, which predates a lock wait. So the statement also compares the row version it locked
# with the one its snapshot sees (`ctid`): equal means no file write committed after the snapshot was
# taken — every file write updates the store row in its transaction (create/delete move memory_count,
# update rewrites it unchanged), so a newer committed write would have left a newer row version — and the
# checks below (archived, cap, path clashes, preconditions) are against committed state, under the lock.
# It also compares the rights the caller's access check read — the locked row's `rights_version`, and its
# project's or section's read under FOR KEY SHARE (`stores.selectors.PARENT_RIGHTS_CTES`) — with those of
# now: a narrowing since then (a member removed, `stores.services.rights_changed`) makes it stale too, and
# `lock_store` judges the caller again before the re-run.
# Unequal ("stale") means the statement waited for a writer: it writes nothing, and the service runs the
# same statement again inside a transaction after `lock_store` (and the fence), where its snapshot is taken
# with the lock held, so it cannot be stale. Writes with a fence always take that path. Time stamps:
# the fence's database time, else `clock_timestamp()` read after the lock. Every statement names the store
# (single-shard on Citus: tests/scaling/test_hot_paths.py); the FOR NO KEY UPDATE locks one store row.

_LOCKED_CTES = """
WITH locked AS (
    SELECT s.ctid AS row_version, s.rights_version, s.archived_at, s.memory_count FROM {store} s
    WHERE s.id = %(store)s AND s.deleted_at IS NULL FOR NO KEY UPDATE
), {parent_ctes}, fresh AS (
    SELECT locked.archived_at, locked.memory_count,
           locked.row_version = (SELECT s.ctid FROM {store} s WHERE s.id = %(store)s)
           AND locked.rights_version = %(rights)s::bigint
           AND (SELECT rights FROM parent) IS NOT DISTINCT FROM %(parent_rights)s::bigint AS fresh,
           COALESCE(%(now)s::timestamptz, clock_timestamp()) AS at
    FROM locked
)"""

# The current memory at exactly `path`, else the first (bytewise) at an ancestor or below `path` — at
# most one of these exists while the tree rule holds (the blocker `_check_path_free` reports).
_BLOCKER = """
    SELECT b.id, b.path, b.content = %(content)s::text AS same, b.content_sha256, b.content_size_bytes,
           b.current_version_id, b.created_at, b.updated_at
    FROM {memory} b
    WHERE b.store_id = %(store)s AND b.id IS DISTINCT FROM %(exclude)s::uuid AND (
        b.path = %(path)s::text OR b.path = ANY(%(ancestors)s::text[])
        OR (b.path > %(below)s::text AND b.path < %(beyond)s::text)
    )
    ORDER BY b.path <> %(path)s::text, b.path
    LIMIT 1"""

_VERSION_COLUMNS = (
    "id, store_id, memory_id, operation, path, content, content_sha256, content_size_bytes, created_by, "
    "api_key_id, session_id, user_id, created_at"
)

_CREATE_SQL = """{locked}, blocker AS ({blocker}
), go AS (
    SELECT fresh.at FROM fresh
    WHERE fresh.fresh AND fresh.archived_at IS NULL AND fresh.memory_count < %(limit)s
      AND NOT EXISTS (SELECT 1 FROM blocker)
), version AS (
    INSERT INTO {version} ({version_columns})
    SELECT %(version)s, %(store)s, %(memory)s, 'created', %(path)s::text, %(content)s::text, %(sha)s, %(size)s,
           %(created_by)s::jsonb, %(api_key_id)s::uuid, %(session_id)s::uuid, %(user_id)s::uuid, go.at
    FROM go
    RETURNING created_at
), memory AS (
    INSERT INTO {memory} (id, store_id, path, content, content_sha256, content_size_bytes, current_version_id,
                          created_at, updated_at)
    SELECT %(memory)s, %(store)s, %(path)s::text, %(content)s::text, %(sha)s, %(size)s, %(version)s,
           version.created_at, version.created_at
    FROM version
    RETURNING created_at
), bump AS (
    UPDATE {store} SET memory_count = memory_count + 1 WHERE id = %(store)s AND EXISTS (SELECT 1 FROM memory)
)
SELECT fresh.fresh, fresh.archived_at IS NOT NULL, fresh.memory_count >= %(limit)s,
       (SELECT memory.created_at FROM memory),
       blocker.id, blocker.path, blocker.same, blocker.content_sha256, blocker.content_size_bytes,
       blocker.current_version_id, blocker.created_at, blocker.updated_at
FROM fresh LEFT JOIN blocker ON true
"""

# Update: the head (memory not found = no row from `head`), the no-op test, the precondition, the rename's
# blocker, then the `modified` version, the moved head and the store row rewritten unchanged (see above).
_UPDATE_SQL = """{locked}, head AS (
    SELECT m.id, m.path, m.content, m.content_sha256, m.content_size_bytes, m.current_version_id,
           m.created_at, m.updated_at,
           COALESCE(%(content)s::text, m.content) AS new_content,
           COALESCE(%(path)s::text, m.path) AS new_path,
           COALESCE(%(sha)s::text, m.content_sha256) AS new_sha,
           COALESCE(%(size)s::integer, m.content_size_bytes) AS new_size
    FROM {memory} m WHERE m.store_id = %(store)s AND m.id = %(exclude)s::uuid
), decision AS (
    SELECT head.*, head.new_content = head.content AND head.new_path = head.path AS noop,
           %(expected)s::text IS NOT NULL AND %(expected)s::text <> head.content_sha256 AS stale_precondition,
           blocker.id AS blocker_id, blocker.path AS blocker_path
    FROM head LEFT JOIN LATERAL ({blocker}
    ) blocker ON head.new_path <> head.path
), go AS (
    SELECT decision.*, fresh.at FROM decision, fresh
    WHERE fresh.fresh AND fresh.archived_at IS NULL AND NOT decision.noop AND NOT decision.stale_precondition
      AND decision.blocker_id IS NULL
), version AS (
    INSERT INTO {version} ({version_columns})
    SELECT %(version)s, %(store)s, go.id, 'modified', go.new_path, go.new_content, go.new_sha, go.new_size,
           %(created_by)s::jsonb, %(api_key_id)s::uuid, %(session_id)s::uuid, %(user_id)s::uuid, go.at
    FROM go
    RETURNING created_at
), moved AS (
    UPDATE {memory} m
    SET path = go.new_path, content = go.new_content, content_sha256 = go.new_sha,
        content_size_bytes = go.new_size, current_version_id = %(version)s, updated_at = go.at
    FROM go WHERE m.store_id = %(store)s AND m.id = go.id AND EXISTS (SELECT 1 FROM version)
    RETURNING m.updated_at
), touch AS (
    UPDATE {store} SET memory_count = memory_count WHERE id = %(store)s AND EXISTS (SELECT 1 FROM moved)
)
SELECT fresh.fresh, fresh.archived_at IS NOT NULL, (SELECT moved.updated_at FROM moved),
       decision.id IS NOT NULL, decision.noop, decision.stale_precondition, decision.blocker_id,
       decision.blocker_path, decision.path,
       CASE WHEN decision.noop OR %(content)s::text IS NULL THEN decision.content END,
       decision.content_sha256, decision.content_size_bytes, decision.current_version_id,
       decision.created_at, decision.updated_at
FROM fresh LEFT JOIN decision ON true
"""


# Delete: the head (none = not found), the precondition, then the `deleted` version (path kept, no content),
# the head removed and memory_count moved down; allowed on archived stores.
_DELETE_SQL = """{locked}, head AS (
    SELECT m.id, m.path, m.content_sha256,
           %(expected)s::text IS NOT NULL AND %(expected)s::text <> m.content_sha256 AS stale_precondition
    FROM {memory} m WHERE m.store_id = %(store)s AND m.id = %(exclude)s::uuid
), go AS (
    SELECT head.id, head.path, fresh.at FROM head, fresh WHERE fresh.fresh AND NOT head.stale_precondition
), version AS (
    INSERT INTO {version} ({version_columns})
    SELECT %(version)s, %(store)s, go.id, 'deleted', go.path, NULL::text, NULL::varchar, NULL::integer,
           %(created_by)s::jsonb, %(api_key_id)s::uuid, %(session_id)s::uuid, %(user_id)s::uuid, go.at
    FROM go
    RETURNING created_at
), gone AS (
    DELETE FROM {memory} m USING go WHERE m.store_id = %(store)s AND m.id = go.id AND EXISTS (SELECT 1 FROM version)
    RETURNING m.id
), bump AS (
    UPDATE {store} SET memory_count = memory_count - 1 WHERE id = %(store)s AND EXISTS (SELECT 1 FROM gone)
)
SELECT fresh.fresh, (SELECT version.created_at FROM version), head.id IS NOT NULL, head.stale_precondition,
       head.path, head.content_sha256
FROM fresh LEFT JOIN head ON true
"""


def _statement(sql: str) -> str:
    tables = {"store": Store._meta.db_table, "memory": Memory._meta.db_table}
    return sql.format(
        locked=_LOCKED_CTES.format(parent_ctes=PARENT_RIGHTS_CTES, **tables),
        blocker=_BLOCKER.format(**tables),
        store=Store._meta.db_table,
        memory=Memory._meta.db_table,
        version=Version._meta.db_table,
        version_columns=_VERSION_COLUMNS,
    )


_CREATE = _statement(_CREATE_SQL)
_UPDATE = _statement(_UPDATE_SQL)
_DELETE = _statement(_DELETE_SQL)


def _execute(sql: str, params: dict) -> tuple | None:
    with prepared_cursor() as cursor:  # planned once per connection (config/compiled.py)
        cursor.execute(sql, params)
        return cursor.fetchone()


def _write(store: Store, sql: str, params: dict, fence: Fence | None) -> tuple:
    """Run a one-statement write (`_CREATE` / `_UPDATE`) and return its row (first column: fresh = True).

    Without a fence: once alone, in autocommit (inside a savepoint when the caller holds a transaction).
    When that run waited for another writer (stale: it wrote nothing), found no store, or hit the
    (store, path) unique key — the backstop of the path rule, never expected under the lock — or found the
    store's rights changed since `store` was judged (`rights_version`), the same statement runs again in a
    transaction after `lock_store` (which judges the caller again) and `fence`, with the fence's time.
    Raises StoreNotFound (404) when the store is gone or no longer readable, StoreWriteForbidden (403),
    LeaseExpired (409) from the fence.
    """
    params = {**params, "rights": store.rights_version, **parent_rights(store)}
    if fence is None:
        try:
            if connection.in_atomic_block:  # tests and callers inside a transaction: keep it usable
                with transaction.atomic():
                    row = _execute(sql, params)
            else:
                row = _execute(sql, params)
        except IntegrityError as exc:
            if not violates(exc, PATH_CONSTRAINT):
                raise
            row = None
        if row is not None and row[0]:
            return row
    with transaction.atomic():
        locked, now = _lock_and_fence(store, fence)  # judges the caller again if the store's rights changed
        rights = {
            "rights": locked.rights_version,
            "parent_rights": hold_parent_rights(project_id=locked.project_id, section_id=locked.section_id),
        }
        row = _execute(sql, {**params, **rights, "now": now if fence is not None else None})
    if row is None or not row[0]:  # pragma: no cover - the lock is held before the statement's snapshot
        raise RuntimeError("file write: stale snapshot under the store lock")
    return row


def _content_params(content: str | None) -> dict:
    if content is None:
        return {"content": None, "sha": None, "size": None}
    return {"content": content, "sha": content_digest(content), "size": len(content.encode("utf-8"))}


def _path_params(path: str | None) -> dict:
    """The clash test's bounds: `path`'s proper ancestors and the bytewise range of paths below it."""
    if path is None:
        return {"path": None, "ancestors": [], "below": None, "beyond": None}
    return {"path": path, "ancestors": _ancestors(path), "below": path + "/", "beyond": path + "0"}


def _actor_params(actor: Actor) -> dict:
    return {"created_by": json.dumps(actor.as_json()), **actor.columns()}


@dataclass(frozen=True)
class CreateResult:
    """`memory` is the new memory, or the existing one when the path already held the same content."""

    memory: Memory
    created: bool


def _memory_pk(store: Store, memory_id: object, fence: Fence | None) -> uuid.UUID:
    """`memory_id` as a UUID. A malformed one raises MemoryNotFound (404), after the store is locked and
    fenced, as before issue 17: a store that is gone is still a 404 store first."""
    pk = canonical_uuid(memory_id)
    if pk is None:
        with transaction.atomic():
            _lock_and_fence(store, fence)
        raise MemoryNotFound()
    return pk


def create_memory(*, store: Store, path: str, content: str, actor: Actor, fence: Fence | None = None) -> CreateResult:
    """Create a memory at `path` and its `created` version (SPEC §5 memory create).

    path: already valid (`versions.validation.clean_path`); content: ≤102,400 UTF-8 bytes, validated.
    Idempotent for retries: if `path` already holds exactly `content`, that memory is returned with
    ``created=False`` and nothing is written. Raises StoreArchived (409), MemoryPathConflict (409: the
    path holds other content, or an ancestor/descendant is a memory), MemoryLimitReached (409 when the
    store already holds `MEMORY_STORE_MAX_MEMORIES` current memories), checked in that order, and
    StoreNotFound (404) when the store is gone. One statement under the store row lock (see `_write`),
    or the lock, `fence`, then that statement.
    """
    memory_id, version_id = uuid.uuid4(), uuid.uuid4()
    params = {
        "store": store.pk,
        "memory": memory_id,
        "version": version_id,
        "exclude": None,
        "now": None,
        "limit": settings.MEMORY_STORE_MAX_MEMORIES,
        **_content_params(content),
        **_path_params(path),
        **_actor_params(actor),
    }
    row = _write(store, _CREATE, params, fence)
    _, archived, full, created_at, blocker_id, blocker_path, same, *blocker = row
    if archived:
        raise StoreArchived()
    if blocker_id is not None:
        if blocker_path == path and same:
            sha, size, current_version_id, existing_created, existing_updated = blocker
            existing = Memory(
                id=blocker_id,
                store_id=store.pk,
                path=path,
                content=content,
                content_sha256=sha,
                content_size_bytes=size,
                current_version_id=current_version_id,
                created_at=existing_created,
                updated_at=existing_updated,
            )
            return CreateResult(existing, False)
        raise MemoryPathConflict(memory_id=blocker_id, path=blocker_path, requested=path)
    if full:
        raise MemoryLimitReached(details={"limit": settings.MEMORY_STORE_MAX_MEMORIES})
    memory = Memory(
        id=memory_id,
        store_id=store.pk,
        path=path,
        content=content,
        content_sha256=params["sha"],
        content_size_bytes=params["size"],
        current_version_id=version_id,
        created_at=created_at,
        updated_at=created_at,
    )
    return CreateResult(memory, True)


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
    MemoryPreconditionFailed (409), MemoryPathConflict (409), checked in that order, and StoreNotFound
    (404) when the store is gone. One statement under the store row lock (see `_write`), or the lock,
    `fence`, then that statement.
    """
    pk = _memory_pk(store, memory_id, fence)
    version_id = uuid.uuid4()
    params = {
        "store": store.pk,
        "exclude": pk,
        "version": version_id,
        "now": None,
        "expected": expected_sha256,
        **_content_params(content),
        **_path_params(path),
        **_actor_params(actor),
    }
    row = _write(store, _UPDATE, params, fence)
    (_, archived, updated_at, found, noop, stale_precondition, blocker_id, blocker_path, old_path, old_content,
     sha, size, current_version_id, created_at, old_updated_at) = row  # fmt: skip
    if not found:
        raise MemoryNotFound()
    if archived:
        raise StoreArchived()
    memory = Memory(
        id=pk,
        store_id=store.pk,
        path=old_path,
        content=old_content if content is None or noop else content,
        content_sha256=sha,
        content_size_bytes=size,
        current_version_id=current_version_id,
        created_at=created_at,
        updated_at=old_updated_at,
    )
    if noop:
        return memory
    if stale_precondition:
        raise MemoryPreconditionFailed(details={"content_sha256": sha})
    if blocker_id is not None:
        raise MemoryPathConflict(memory_id=blocker_id, path=blocker_path, requested=path)
    if path is not None:
        memory.path = path
    if content is not None:
        memory.content_sha256, memory.content_size_bytes = params["sha"], params["size"]
    memory.current_version_id = version_id
    memory.updated_at = updated_at
    return memory


def delete_memory(
    *, store: Store, memory_id: object, actor: Actor, expected_sha256: str | None = None, fence: Fence | None = None
) -> Version:
    """Delete a memory, appending its `deleted` version (path kept, content null); returns that version.

    Allowed on archived stores (SPEC §3). The path becomes free; the versions stay listable.
    expected_sha256: must equal the current hash, else MemoryPreconditionFailed (409), nothing deleted.
    Raises MemoryNotFound (404), StoreNotFound (404) when the store is gone. One statement under the
    store row lock (see `_write`), or the lock, `fence`, then that statement.
    """
    pk = _memory_pk(store, memory_id, fence)
    version_id = uuid.uuid4()
    params = {
        "store": store.pk,
        "exclude": pk,
        "version": version_id,
        "now": None,
        "expected": expected_sha256,
        **_actor_params(actor),
    }
    _, created_at, found, stale_precondition, path, sha = _write(store, _DELETE, params, fence)
    if not found:
        raise MemoryNotFound()
    if stale_precondition:
        raise MemoryPreconditionFailed(details={"content_sha256": sha})
    return Version(
        id=version_id,
        store_id=store.pk,
        memory_id=pk,
        operation=Operation.DELETED,
        path=path,
        content=None,
        content_sha256=None,
        content_size_bytes=None,
        created_by=actor.as_json(),
        created_at=created_at,
        **actor.columns(),
    )


@transaction.atomic
def redact_version(
    *,
    store: Store,
    version_id: object,
    actor: Actor,
    fence: Fence | None = None,
    recheck: Callable[[], object] | None = None,
) -> Version:
    """Redact a version for good: null its content, digest, size and path; record who and when (SPEC §5).

    Allowed on archived stores. An already-redacted version is returned unchanged (first
    `redacted_at`/`redacted_by` kept). Raises VersionNotFound (404), VersionIsCurrent (409) for the
    head version of a live memory. Locks the store row (so the head cannot move underneath the check), then
    passes `fence`, then calls `recheck` (the view's access check again, raising its 404/403): a redaction
    cannot be undone, so a writer removed while the request waited for the lock must not make one (found by
    a breaker; ordinary writes in that window are docs/access.md's "Writes racing a removal").

    Raises RedactionNeedsAPerson (403) for a `session_actor`: an agent may write new versions and delete
    memories, never erase the versions a person would restore from (docs/memory-stores.md, "Redaction").
    """
    locked, now = _lock_and_fence(store, fence)  # a lapsed lease is 409 lease_expired, as for every write
    if recheck is not None:
        recheck()
    if actor.type == "session_actor":
        raise RedactionNeedsAPerson()
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
