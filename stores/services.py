"""Write use-cases for stores (SPEC §3), shared by the Memories and Memory Stores surfaces.

Each service owns its transaction and locks the store row first (`select_for_update(of=("self",))`).
Access (read / write / owner) is checked by the caller through `stores.selectors.get_store_for`;
services check state (archived, counts, generation) under the lock.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from accounts.models import Project, Section, User, Visibility
from accounts.selectors import user_by_handle
from config.compiled import CompiledQuery
from config.constraints import violates
from config.errors import InvalidRequest, ServiceUnavailable
from stores import validation
from stores.errors import (
    MembershipGoverned,
    StaleConfirmation,
    StoreArchived,
    StoreAttached,
    StoreNotFound,
)
from stores.models import CanonicalStore, ReaderGrant, Scope, Store
from stores.selectors import canonical_store_id, get_store_for, hold_parent_rights, judge_again

UNSET: Any = object()
logger = logging.getLogger(__name__)

# The primary key of `stores_canonicalstore` (scope, subject_id): the one-canonical-store-per-subject rule.
CANONICAL_KEY = "stores_canonicalstore_pkey"


def lock_store(store: Store, *, for_delete: bool = False) -> Store:
    """Lock `store`'s row inside the caller's transaction; return it fresh.

    The one lock helper of every write service (stores, versions, memories): ``SELECT … FOR NO KEY UPDATE
    OF``, the lock an UPDATE of the row takes (the note's append takes the same one), so every writer of a
    store waits for the one before it. It does not block the foreign-key checks of rows inserted into the
    store by statements that hold no store lock (nap's claims and watermarks): they take ``FOR KEY SHARE``
    on the store row, and under ``FOR UPDATE`` they waited for the writer's commit while holding the rows
    they had written — a deadlock with a `forget` deleting those rows. `for_delete`: ``FOR UPDATE``, for
    `delete_store` only, which does remove the key: every insert referencing the store then waits for the
    deletion and fails (the store is gone).

    A store deleted after the caller's access check (a write racing `DELETE`) raises `StoreNotFound` (404,
    SPEC §2), never a 500 — also while its rows are still being purged (`deleted_at` set): the lock returns
    the row's newest version, so a writer that waited for the deleting transaction sees the deletion. When
    the store's rights changed since `store` was judged for the caller (`rights_version`), the caller's right
    is judged again under the lock (`judge_again`: 404 / 403 for a member removed meanwhile).
    """
    locked = (_LOCK_STORE_FOR_DELETE if for_delete else _LOCK_STORE).first(pk=store.pk)
    if locked is None or locked.deleted_at is not None:
        raise StoreNotFound()
    judge_again(locked, store)
    return locked


# The locking reads of one store, compiled once per process and run as prepared statements
# (config/compiled.py): every write locks its store, and the 0041 import locks each of a batch's stores in
# turn (`lock_stores_in_order`), where building the ORM query per store was half of the import's time.
_LOCK_STORE = CompiledQuery(
    lambda pk: Store.objects.select_for_update(of=("self",), no_key=True).filter(pk=pk),
    pk=uuid.UUID("00000000-0000-4000-8000-0000000010c6"),
)
_LOCK_STORE_FOR_DELETE = CompiledQuery(
    lambda pk: Store.objects.select_for_update(of=("self",)).filter(pk=pk),
    pk=uuid.UUID("00000000-0000-4000-8000-0000000010c7"),
)


def default_name(*, scope: str, user: User | None = None, project: Project | None = None, section=None) -> str:
    """The name `ensure` gives a new canonical store: the handle's, project's or section's name."""
    if scope == Scope.PROJECT:
        return project.name[:255]
    if scope == Scope.BOARD:
        return section.name[:255]
    return f"{user.handle} memories"


def ensure_canonical_store(
    *,
    scope: str,
    user: User | None = None,
    project: Project | None = None,
    section: Section | None = None,
    name: str | None = None,
    description: str | None = None,
    created_by: User | None = None,
    recheck: Callable[[], object] | None = None,
) -> tuple[Store, bool]:
    """Return the canonical store of one subject, creating it if absent (SPEC §4 ensure).

    Exactly one of `user`/`project`/`section` matches `scope`. Returns ``(store, created)``; an
    existing store is returned untouched (name/description arguments are ignored then). The key of the
    subject-keyed `CanonicalStore`, written in the store's transaction, makes concurrent ensures safe: the
    loser of the race rolls its store back and reads the winner's — or, when the winner was deleted in
    between, tries again. The caller has already checked the write right on the subject. Raises
    InvalidRequest for a bad name/description (only when a store is created), ServiceUnavailable (503) when
    `ENSURE_ATTEMPTS` rounds in a row each lost to a store that was deleted before it could be read.
    recheck: the caller's write check on the subject, run again before a project or board store is created,
    with the parent's row held `FOR KEY SHARE` (`hold_parent_rights`): a member removed after the caller's
    check gets what it raises (404 / 403) and no store (a breaker's removed member created one and got 404).
    """
    subject = {"user": {"owner": user}, "project": {"project": project}, "board": {"section": section}}[scope]
    subject_id = (user or project or section).pk
    cleaned: tuple[str, str] | None = None  # validated only when a store is created (an existing one wins)
    # A racer's store can win the key and be deleted before the loser reads it: then the subject has no
    # store again and the loser tries once more (bounded: each round needs a concurrent create *and* delete).
    for _attempt in range(ENSURE_ATTEMPTS):
        existing = _canonical_of(scope, subject_id)
        if existing is not None:
            return existing, False
        if cleaned is None:
            cleaned = (
                validation.clean_name(name)
                if name is not None
                else default_name(scope=scope, user=user, project=project, section=section),
                validation.clean_description(description, field="description_md") if description else "",
            )
        try:
            with transaction.atomic():
                if recheck is not None and (project or section) is not None:
                    hold_parent_rights(project_id=getattr(project, "pk", None), section_id=getattr(section, "pk", None))
                    recheck()
                store = Store.objects.create(
                    scope=scope,
                    canonical=True,
                    name=cleaned[0],
                    description=cleaned[1],
                    visibility=Visibility.PRIVATE if scope == Scope.USER else None,
                    created_by=created_by,
                    **subject,
                )
                if not claim_canonical(store):
                    raise _CanonicalTaken()  # roll the store back: a racing ensure created the subject's store
        except _CanonicalTaken:
            continue
        return store, True
    raise ServiceUnavailable("The store was created and deleted concurrently too often; retry.")


# How many times `ensure_canonical_store` looks again after a racing ensure's store won and was deleted.
ENSURE_ATTEMPTS = 3


class _CanonicalTaken(Exception):
    pass


def _canonical_of(scope: str, subject_id) -> Store | None:
    store_id = canonical_store_id(scope=scope, subject_id=subject_id)
    return None if store_id is None else Store.objects.filter(pk=store_id, deleted_at__isnull=True).first()


def claim_canonical(store: Store) -> bool:
    """Record `store` as its subject's canonical store, inside the caller's transaction (issue 21).

    Returns True when recorded, False (nothing written, the caller's transaction still usable) when the
    subject already has a canonical store — a racing writer's insert waits for the first to commit, then
    fails on the key. The caller sets or keeps `Store.canonical` accordingly. Other integrity errors raise.
    """
    try:
        with transaction.atomic():
            CanonicalStore.objects.create(scope=store.scope, subject_id=store.subject_id, store_id=store.pk)
    except IntegrityError as exc:
        if not violates(exc, CANONICAL_KEY):
            raise
        return False
    return True


def create_store(
    *, owner: User, name: object, description: object = "", metadata: object = None, canonical: bool = False
) -> Store:
    """Create a private user store owned by `owner` (the Memory Stores surface's `create`, SPEC §5).

    name: 1–255 chars; description: ≤1,024 chars; metadata: ≤16 string pairs. Raises InvalidRequest.
    """
    with transaction.atomic():
        store = Store.objects.create(
            scope=Scope.USER,
            owner=owner,
            canonical=canonical,
            name=validation.clean_name(name),
            description=validation.clean_description(description if description is not None else ""),
            metadata=validation.clean_metadata(metadata if metadata is not None else {}),
            visibility=Visibility.PRIVATE,
            created_by=owner,
        )
        if canonical and not claim_canonical(store):  # the owner has one already: this one is ordinary
            Store.objects.filter(pk=store.pk).update(canonical=False)
            store.canonical = False
    return store


def recheck_owner(locked: Store, actor) -> None:
    """Under the store lock, check again that `actor` (a User; None for an operator or a test) holds the owner
    right on `locked` — the view checked it before the lock, and a project or section owner demoted (or
    removed) meanwhile must not complete the change: a breaker's owner, demoted while her DELETE waited for
    the store lock, still deleted the store. Raises what `get_store_for(need="owner")` raises: StoreNotFound
    (404) once the store is unreadable, StoreOwnerRequired (403). No query for a user store's own owner (that
    ownership never changes)."""
    if actor is None or (locked.scope == Scope.USER and locked.owner_id == actor.pk):
        return
    get_store_for(actor, locked.pk, need="owner")


@transaction.atomic
def update_store(
    *,
    store: Store,
    actor=None,
    name: object = UNSET,
    description: object = UNSET,
    metadata_patch: object = UNSET,
    visibility: object = UNSET,
    description_field: str = "description",
) -> Store:
    """Update store metadata; the caller has checked the owner right (SPEC §3 / §5 update), and `actor` is
    checked again under the lock (`recheck_owner`).

    metadata_patch: ``{key: str | None}``; None deletes the key; the result must satisfy the metadata
    limits. visibility: user stores only (400 otherwise). `updated_at` moves only when something changes.
    An archived store is read-only (StoreArchived, 409) except for being made private: archiving is one-way,
    and a public store must never be stuck public — a stranger's live session on it would otherwise keep its
    owner from deleting it for good (the delete guard's way out is to make the store private first).
    Raises InvalidRequest (400).
    """
    locked = lock_store(store)
    recheck_owner(locked, actor)
    unpublishing = (
        visibility == "private" and locked.scope == Scope.USER and {name, description, metadata_patch} <= {UNSET, None}
    )
    if locked.archived_at is not None and not unpublishing:
        raise StoreArchived()
    changed: list[str] = []
    if name is not UNSET and name is not None:
        new = validation.clean_name(name)
        if new != locked.name:
            locked.name = new
            changed.append("name")
    if description is not UNSET and description is not None:
        new = validation.clean_description(description, field=description_field)
        if new != locked.description:
            locked.description = new
            changed.append("description")
    if metadata_patch is not UNSET and metadata_patch is not None:
        merged = validation.patch_metadata(locked.metadata, metadata_patch)
        if merged != locked.metadata:
            locked.metadata = merged
            changed.append("metadata")
    if visibility is not UNSET and visibility is not None:
        new = validation.clean_visibility(visibility)
        if locked.scope != Scope.USER:
            raise InvalidRequest(
                "visibility: project and board stores follow their project's or board's visibility; change that "
                "instead (`rog projects edit` / `rog boards edit`, PATCH /api/v1/projects/{ref} or /sections/{ref})."
            )
        if new != locked.visibility:
            locked.visibility = new
            locked.rights_version += 1  # who may read (and so write) changed: writes judged before are judged again
            changed.extend(["visibility", "rights_version"])
    if changed:
        locked.updated_at = timezone.now()
        locked.save(update_fields=[*changed, "updated_at"])
    return locked


@transaction.atomic
def archive_store(*, store: Store, actor=None) -> tuple[Store, bool]:
    """Archive `store` (one-way). Returns ``(store, changed)``; an archived store is returned unchanged.

    Locks the store row (then `recheck_owner(actor)`); bumps `updated_at` when it archives (SPEC §3,
    MEMORY_STORES_API §6.9).
    """
    locked = lock_store(store)
    recheck_owner(locked, actor)
    if locked.archived_at is not None:
        return locked, False
    now = timezone.now()
    locked.archived_at = now
    locked.updated_at = now
    locked.save(update_fields=["archived_at", "updated_at"])
    return locked, True


def _check_not_attached(store: Store) -> None:
    """Raise StoreAttached while a session that is not terminated has `store` attached (SPEC §3).

    Called under the store row lock: `sessions.services.sessions.create_session` locks the store rows it
    attaches, so a session created concurrently either commits first (and this refuses) or finds the
    store gone (404). The import is local because the sessions app builds on stores, not the reverse.
    """
    from sessions.selectors import store_is_attached

    if store_is_attached(store.pk):
        raise StoreAttached()


def delete_store(
    *, store: Store, actor=None, expected_entry_count: int | None = None, generation: int | None = None
) -> None:
    """Delete `store` with all entries, summaries, files and versions (SPEC §4 delete / §5 store delete).

    When `expected_entry_count`/`generation` are given (the Memories surface requires both), they must
    equal the locked store's values, else StaleConfirmation (409 `stale_confirmation`) and nothing is
    deleted. Archived stores may be deleted. Raises StoreAttached while a live session holds it, and
    StoreNotFound when it is gone (or already deleted); `actor` is checked again under the lock
    (`recheck_owner`).

    Two steps, so that a store of any size can be deleted within a request's budgets (docs/decisions.md
    "Deleting a store of any size"): one transaction, under the store's `FOR UPDATE` lock, checks the
    confirmation, removes the canonical mark and sets `deleted_at` — from its commit on, no read or write
    path sees the store (a writer that waited for the lock gets 404) and the deletion is final. Then
    `purge_deleted_stores` removes its rows in batches, this store first, for at most
    `STORE_PURGE_SECONDS`; whatever is left (a store of millions of entries) is purged by the next
    deletions or `manage.py purge_stores`. A database fault during that purge is logged, not raised: the
    deletion has been committed, and a 503 would invite a retry that can only find the store gone.
    """
    with transaction.atomic():
        locked = lock_store(store, for_delete=True)
        recheck_owner(locked, actor)
        confirming = expected_entry_count is not None or generation is not None
        if confirming and (expected_entry_count != locked.entry_count or generation != locked.generation):
            raise StaleConfirmation(details={"entry_count": locked.entry_count, "generation": locked.generation})
        _check_not_attached(locked)
        mark_deleted([locked.pk])
    purge_after_deletion(first=locked.pk)


def mark_deleted(store_ids) -> int:
    """Delete the stores `store_ids` for every read and write path, inside the caller's transaction: set
    `deleted_at`, drop their canonical marks (the subject may ensure a new store at once), detach them from
    their subject (a user, project or section with only deleted stores left can be deleted at once) and
    remove their imports (an import of a deleted store is gone, as the cascade made it). Their other rows
    are purged later (`purge_deleted_stores`). Returns how many stores were marked; the caller holds their
    locks or otherwise knows no writer is inside them (an import's row lock, `delete_store`'s FOR UPDATE).
    """
    ids = list(store_ids)
    CanonicalStore.objects.filter(store_id__in=ids).delete()
    apps.get_model("memories.StoreImport").objects.filter(store_id__in=ids).delete()
    return Store.objects.filter(pk__in=ids, deleted_at__isnull=True).update(
        canonical=False, deleted_at=Now(), owner=None, project=None, section=None
    )


def purge_after_deletion(*, first: object = None) -> None:
    """Purge for at most `STORE_PURGE_SECONDS` after a deletion committed (`first`: the store just deleted).

    A database fault is logged, not raised: the deletion has been committed, and a 503 would invite a
    retry that can only find the store gone; the next purge resumes where this one stopped.
    """
    try:
        purge_deleted_stores(seconds=settings.STORE_PURGE_SECONDS, first=first)
    except DatabaseError as exc:
        logger.warning("store %s deleted; purging its rows stopped (the next purge resumes): %s", first, exc)


# The store-content tables a purge empties batch by batch, in this order (a file memory references its
# current version: memories go before versions); the small ones (grants, claims, watermarks, the import)
# go with the store row. Named by label: those apps build on stores, not the reverse. Each batch deletes
# the store's next `STORE_PURGE_BATCH` rows in primary-key order (store_id, id) — all that is left when
# fewer remain (the last id read backwards: uuid keys have no max()) — as one range of that index, one
# store, one shard on Citus, and returns its upper bound: the next batch starts after it (`after`, kept in
# `Store.purge_cursor`, so a later purge — another request, `purge_stores` — resumes there too), and no
# batch walks the index entries of rows an earlier batch deleted (dead until VACUUM). Measured at 400,000
# entries: from the store's start every time, a batch grew from 13 to 77 ms (quadratic over a purge);
# after the bound, 17–23 ms throughout; and `purge_stores` after a request had purged 10⁶ rows spent
# 20 s walking them in its first batch before the cursor was kept. `id IN (SELECT … LIMIT n)` read every
# row of the store per batch (a hash semi-join over a bitmap scan: 173 ms per batch at 300,000 entries).
_PURGED_MODELS = ("memories.Entry", "memories.Summary", "versions.Memory", "versions.Version")

_PURGE_BATCH_SQL = """
WITH bound AS MATERIALIZED (
    SELECT coalesce(
        (SELECT id FROM {table} WHERE store_id = %(store)s AND (%(after)s::{key} IS NULL OR id > %(after)s::{key})
         ORDER BY id OFFSET %(batch)s - 1 LIMIT 1),
        (SELECT id FROM {table} WHERE store_id = %(store)s ORDER BY id DESC LIMIT 1)) AS id
), gone AS (
    DELETE FROM {table} WHERE store_id = %(store)s AND (%(after)s::{key} IS NULL OR id > %(after)s::{key})
        AND id <= (SELECT id FROM bound)
    RETURNING 1
)
SELECT (SELECT id FROM bound), (SELECT count(*) FROM gone)
"""


@functools.cache
def _purge_batches() -> tuple[str, ...]:
    """One batch statement per `_PURGED_MODELS` table (parameters: store, after, batch; returns the batch's
    last id and how many rows it deleted)."""
    models = [apps.get_model(label) for label in _PURGED_MODELS]
    return tuple(
        _PURGE_BATCH_SQL.format(table=model._meta.db_table, key=model._meta.get_field("id").db_type(connection))
        for model in models
    )


@dataclass(frozen=True)
class Purged:
    """What one `purge_deleted_stores` call did: rows deleted, store rows removed, stores still waiting."""

    rows: int
    stores: int
    pending: int


def purge_deleted_stores(*, seconds: float | None, first: object = None, only_first: bool = False) -> Purged:
    """Remove the rows of deleted stores (`deleted_at` set), oldest deletion first, `first` (a store id)
    before the others; each batch in its own transaction (docs/decisions.md "Deleting a store of any size").

    seconds: stop starting batches after this many seconds of wall time (None: until nothing is left).
    Each transaction locks one deleted store's row `FOR UPDATE` (`SKIP LOCKED` except for `first`: two
    purgers work on different stores, or take turns on one), deletes up to `STORE_PURGE_BATCH` rows of the
    first non-empty table of `_PURGED_MODELS`, and once they are all empty deletes the store row with its
    small relations. `only_first`: purge `first` and no other store. Returns
    `Purged` (rows deleted, stores finished, stores still to purge). Database errors propagate; what was
    committed stays committed and the next purge resumes there.
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    rows = stores = 0
    while deadline is None or time.monotonic() < deadline:
        with transaction.atomic():
            found = _next_to_purge(first, others=not only_first)
            if found is None:
                break
            victim, cursor_state = found
            start = (cursor_state or {}).get("table", 0)
            removed = 0
            with connection.cursor() as cursor:
                batches = _purge_batches()
                for table in range(start, len(batches)):
                    after = cursor_state["after"] if cursor_state and table == start else None
                    params = {"store": victim, "after": after, "batch": settings.STORE_PURGE_BATCH}
                    cursor.execute(batches[table], params)
                    last, removed = cursor.fetchone()
                    if removed:
                        # where the next batch starts, whoever runs it: the tables before `table` are empty and
                        # its ids up to `last` gone (nothing is written into a deleted store)
                        Store.objects.filter(pk=victim).update(purge_cursor={"table": table, "after": str(last)})
                        break
            rows += removed
            if not removed:
                Store.objects.filter(pk=victim, deleted_at__isnull=False).delete()
                stores += 1
    return Purged(rows=rows, stores=stores, pending=Store.objects.filter(deleted_at__isnull=False).count())


def _next_to_purge(first: object, *, others: bool = True):
    """``(id, purge_cursor)`` of the deleted store to purge next, locked for this transaction, or None:
    `first` while it is there — waiting for its lock, which only a purger's batch or a writer about to find
    the store deleted holds, and briefly — then the oldest deletion no other purger holds (`SKIP LOCKED`)."""
    deleted = Store.objects.select_for_update(of=("self",)).filter(deleted_at__isnull=False)
    if first is not None:
        found = deleted.filter(pk=first).values_list("pk", "purge_cursor").first()
        if found is not None or not others:
            return found
    waiting = Store.objects.select_for_update(of=("self",), skip_locked=True).filter(deleted_at__isnull=False)
    return waiting.order_by("deleted_at", "pk").values_list("pk", "purge_cursor").first()


@transaction.atomic
def set_reader(*, store: Store, handle: object, active: bool, granted_by: User) -> ReaderGrant:
    """Grant (`active=True`) or revoke (`active=False`) read access to the user `handle` (SPEC §4 share).

    User stores only (MembershipGoverned 409 otherwise); granting on an archived store → StoreArchived, while
    revoking stays allowed there (archiving is one-way, and a reader must never be stuck reading — with a live
    session on the store the owner could not even delete it; a breaker); unknown handle, or an inactive one
    when granting → UserNotFound naming it (`accounts.selectors.user_by_handle`; an inactive user's grant can
    still be revoked); the owner cannot grant themselves (400). Idempotent: revoking someone who holds no
    grant stores nothing and returns an unsaved inactive grant.
    """
    locked = lock_store(store)
    if locked.scope != Scope.USER:
        raise MembershipGoverned()
    if locked.archived_at is not None and active:
        raise StoreArchived()
    if not isinstance(handle, str) or not handle:
        raise InvalidRequest("handle: must be a non-empty string.")
    user = user_by_handle(handle, active=active)
    if user.pk == locked.owner_id:
        raise InvalidRequest("handle: the owner already reads their own store.")
    if not active and not ReaderGrant.objects.filter(store=locked, user=user).exists():
        return ReaderGrant(store=locked, user=user, active=False, granted_by=granted_by)
    grant, created = ReaderGrant.objects.get_or_create(
        store=locked, user=user, defaults={"active": active, "granted_by": granted_by}
    )
    if not created and grant.active != active:
        grant.active = active
        grant.granted_by = granted_by
        grant.updated_at = timezone.now()
        grant.save(update_fields=["active", "granted_by", "updated_at"])
        if not active:  # a narrowing: writes and attaches judged before are judged again (`judge_again`)
            Store.objects.filter(pk=locked.pk).update(rights_version=F("rights_version") + 1)
    return grant


def rights_changed(parent: Project | Section) -> None:
    """Bump `rights_version` of `parent` (a project or section whose row the caller has locked `FOR UPDATE`,
    inside its transaction) after a change that may narrow who reads, writes or owns its stores: a
    membership deactivated or changed (role, posting right), the parent made private, its posting closed.

    One row, whatever the number of stores. Every write to one of its stores takes `FOR KEY SHARE` on this row
    and compares its version with the one its access check read (`stores.selectors.judge_again`, the note's
    and the file writes' statements): that lock waits for this change to commit, and this change's lock waits
    for the writes that hold it. So a write judged before the change either commits before it, or finds the
    new version and is judged again — a removed member's queued note or file write is a 404/403, never a late
    success (docs/access.md "Writes racing a removal").
    """
    type(parent).objects.filter(pk=parent.pk).update(rights_version=F("rights_version") + 1)


def lock_stores_in_order(store_ids) -> dict:
    """Lock the store rows `store_ids` (UUIDs) as `lock_store` does, one statement per store in id order; return
    ``{id: Store}`` of those that exist (inside the caller's transaction).

    One statement per store, not one `pk IN (…)`: on Citus a locking read must stay on one shard (Citus
    runs `SELECT … FOR UPDATE` only as a single-shard query). Id order keeps concurrent multi-store writers
    free of deadlocks, as the single `ORDER BY pk` did (issue 21, docs/scaling.md). The statements are
    pipelined (`CompiledQuery.many`): one round trip for all of them, the server still taking the locks
    one by one in id order (the 0041 import locks ~200 stores per batch).
    """
    ids = sorted({key if isinstance(key, uuid.UUID) else uuid.UUID(str(key)) for key in store_ids})
    found = _LOCK_STORE.many({"pk": pk} for pk in ids)
    return {pk: rows[0] for pk, rows in zip(ids, found, strict=True) if rows and rows[0].deleted_at is None}
