"""Write use-cases of the Memories log (SPEC §4): note, compact, forget, redact.

Access (read / write / owner) is checked by the caller through `stores.selectors.get_store_for`; these
services check state (archived, bounds, generation, digests) under the store row lock. Store counters
(`entry_count`, `generation`, `summary_count`) are only changed here, under that lock. `updated_at` is
not touched: it moves on metadata changes only (file-surface semantics).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from psycopg.errors import ForeignKeyViolation

from accounts.models import User
from backoffice import services as audit
from backoffice.models import AuditAction
from config.compiled import prepared_cursor
from config.constraints import violates
from config.errors import AuthenticationError
from config.text import entries, quoted
from memories import tree
from memories.errors import (
    EntryNotFound,
    EntryRedacted,
    InvalidRange,
    NonceConflict,
    SnapshotTooLarge,
    StaleDigest,
    StaleGeneration,
    SummaryConflict,
)
from memories.models import Claim, Entry, Summary
from memories.selectors import pending_at
from stores.errors import StoreArchived, StoreNotFound
from stores.models import Store
from stores.selectors import PARENT_RIGHTS_CTES, hold_parent_rights, parent_rights
from stores.services import lock_store, recheck_owner

NONCE_CONSTRAINT = "entry_store_author_nonce_unique"


@dataclass(frozen=True)
class Appended:
    """Result of `append_entry`: the entry and whether this call created it (False = nonce replay)."""

    entry: Entry
    created: bool


@dataclass(frozen=True)
class Compacted:
    """Result of `compact_range`: the live summary, whether it was created, and progress at `snapshot`."""

    summary: Summary
    created: bool
    snapshot: int
    pending: int

    @property
    def complete(self) -> bool:
        return self.pending == 0


@dataclass(frozen=True)
class Forgotten:
    """Result of `forget_range`: the invalidated ranges (smallest first) and the store's new generation."""

    invalidated: list[tree.Block]
    generation: int


# One statement, one round trip (SPEC §4 Entries). The UPDATE takes the store row lock exactly like
# `lock_store` (FOR NO KEY UPDATE) and holds it until the statement's transaction commits, so seq = entry_count - 1 is
# assigned in lock order: no gap, no duplicate; UNIQUE (store, seq) is the backstop. clock_timestamp() is
# read after the lock is taken, so created_at never decreases along seq. `prior` serves a sequential
# nonce replay without touching the counter (at the same rights as the append: a replay after a removal is
# judged again like a note, not answered with the entry); concurrent retries of one nonce fall through to the
# UNIQUE (store, author, client_nonce) violation, which aborts the whole statement (counter included).
# The rights are the ones the caller's access check read: the store's `rights_version` (the UPDATE re-reads
# the row it locks) and its project's or section's, read under FOR KEY SHARE (`PARENT_RIGHTS_CTES`: it waits
# for a membership, visibility or posting change holding the parent's row and then reads its newest version;
# such a change waits for this statement's commit in turn). A narrowing committed after the check leaves no
# row to update, and `append_entry` judges the author again under the store lock before it appends.
_APPEND_SQL = """
WITH {parent_ctes}, {prior}bump AS (
    UPDATE {store_table} SET entry_count = entry_count + 1
    WHERE id = %(store)s AND archived_at IS NULL AND deleted_at IS NULL AND rights_version = %(rights)s
      AND (SELECT rights FROM parent) IS NOT DISTINCT FROM %(parent_rights)s::bigint{no_prior}
    RETURNING entry_count - 1 AS seq
), ins AS (
    INSERT INTO {entry_table} (store_id, seq, author_id, body_md, size_bytes, client_nonce, created_at)
    SELECT %(store)s, bump.seq, %(author)s, %(body)s, %(size)s, %(nonce)s, clock_timestamp() FROM bump
    RETURNING id, seq, body_md, created_at
)
SELECT true, id, seq, body_md, created_at FROM ins{union_prior}
"""
_PRIOR_CTE = """prior AS (
    SELECT id, seq, body_md, created_at FROM {entry_table}
    WHERE store_id = %(store)s AND author_id = %(author)s AND client_nonce = %(nonce)s
      AND EXISTS (SELECT 1 FROM {store_table} WHERE id = %(store)s AND rights_version = %(rights)s)
      AND (SELECT rights FROM parent) IS NOT DISTINCT FROM %(parent_rights)s::bigint
), """


def _append_sql(with_nonce: bool) -> str:
    tables = {"store_table": Store._meta.db_table, "entry_table": Entry._meta.db_table}
    return _APPEND_SQL.format(
        prior=_PRIOR_CTE.format(**tables) if with_nonce else "",
        no_prior=" AND NOT EXISTS (SELECT 1 FROM prior)" if with_nonce else "",
        union_prior="\nUNION ALL SELECT false, id, seq, body_md, created_at FROM prior" if with_nonce else "",
        parent_ctes=PARENT_RIGHTS_CTES,
        **tables,
    )


_APPEND_WITH_NONCE = _append_sql(True)
_APPEND_WITHOUT_NONCE = _append_sql(False)


def _run_append(params: dict) -> tuple | None:
    sql = _APPEND_WITH_NONCE if params["nonce"] is not None else _APPEND_WITHOUT_NONCE
    with prepared_cursor() as cursor:  # planned once per connection (config/compiled.py)
        cursor.execute(sql, params)
        return cursor.fetchone()


def _append_judged_again(store: Store, params: dict) -> tuple | None:
    """The append found no row to update: the store is archived or deleted, or its rights (or its parent's)
    changed since the caller's access check. Lock the store (`lock_store` judges the caller again when they
    moved: StoreNotFound 404 / StoreWriteForbidden 403) and append under that lock with the versions of now,
    which cannot move before this transaction ends. None when archived or deleted (the caller says which).
    """
    with transaction.atomic():
        try:
            locked = lock_store(store)  # judges the author again when the rights moved (404 / 403)
        except StoreNotFound:
            return None
        now = {
            **params,
            "rights": locked.rights_version,
            "parent_rights": hold_parent_rights(project_id=locked.project_id, section_id=locked.section_id),
        }
        if now == params:
            return None  # not a change of rights: archived (or deleted since)
        return _run_append(now)  # both versions hold still until this transaction ends


def append_entry(*, store: Store, author: User, body_md: str, client_nonce: str | None = None) -> Appended:
    """Append one entry to `store`'s log (SPEC §4 Entries); one SQL statement in autocommit mode.

    body_md: 1..1,024 UTF-8 bytes, validated by the caller (stored exactly as given).
    client_nonce: ≤128 chars or None; scoped to (store, author).
    Returns Appended(entry, created). A replay of (nonce, same body) returns the original entry with
    created=False. Raises EntryRedacted (409 `entry_redacted`) when the original has been redacted
    (whatever the body), NonceConflict (409 `nonce_conflict`) for the nonce with a different body,
    StoreArchived (409) for an archived store, StoreNotFound if the store vanished or was deleted (a
    replay too: one more query, on replays only). When the store's rights changed after `store` was judged
    for the author (its own `rights_version` or its project's or section's), the author is judged again
    under the store lock first: StoreNotFound (404) / StoreWriteForbidden (403) for an author removed
    meanwhile (docs/access.md); AuthenticationError (401) when the author was deleted meanwhile.
    """
    params = {
        "store": store.pk,
        "author": author.pk,
        "body": body_md,
        "size": len(body_md.encode("utf-8")),
        "nonce": client_nonce,
        "rights": store.rights_version,
        **parent_rights(store),
    }
    row = None
    for _attempt in range(3):
        try:
            if connection.in_atomic_block:  # tests and callers inside a transaction: keep it usable
                with transaction.atomic():
                    row = _run_append(params)
            else:
                row = _run_append(params)
            if row is None:
                row = _append_judged_again(store, params)
            break
        except IntegrityError as exc:
            if isinstance(exc.__cause__, ForeignKeyViolation) and not User.objects.filter(pk=author.pk).exists():
                raise AuthenticationError("The credential's user no longer exists.") from None  # deleted meanwhile
            if client_nonce is None or not violates(exc, NONCE_CONSTRAINT):
                raise
            # A concurrent retry of the same nonce committed first: decide from the original.
            original = (
                Entry.objects.filter(store_id=store.pk, author_id=author.pk, client_nonce=client_nonce)
                .values_list("id", "seq", "body_md", "created_at")
                .first()
            )
            if original is not None:
                row = (False, *original)
                break
    if row is None:
        archived = Store.objects.filter(pk=store.pk, deleted_at__isnull=True).values_list("archived_at", flat=True)
        if not archived.exists():
            raise StoreNotFound()
        if archived.first() is not None:
            raise StoreArchived()
        raise StoreNotFound()  # pragma: no cover - only a nonce race that keeps rolling back lands here
    created, entry_id, seq, stored_body, created_at = row
    if not created and not Store.objects.filter(pk=store.pk, deleted_at__isnull=True).exists():
        # a replay reads the original without the store lock: its entries outlive a deletion until purged
        raise StoreNotFound()
    if not created and stored_body is None:  # the original was redacted: never hand its text back
        raise EntryRedacted(details={"seq": seq})
    if not created and stored_body != body_md:
        raise NonceConflict(details={"seq": seq})
    entry = Entry(
        id=entry_id,
        store_id=store.pk,
        seq=seq,
        author=author,
        body_md=stored_body,
        size_bytes=len(stored_body.encode("utf-8")),
        client_nonce=client_nonce,
        created_at=created_at,
    )
    return Appended(entry=entry, created=created)


def _block_q(blocks) -> Q:
    q = Q(pk__in=[])
    for block in blocks:
        q |= Q(start=block.start, end=block.end)
    return q


# compact's reads under the store lock, in one round trip: the children's texts (entries for a range of
# size 2, else the two child summaries) and the live summary already at the range, if any.
_COMPACT_INPUTS_SQL = """
SELECT 'entry', e.seq, e.seq, e.body_md, NULL::bigint
FROM {entry} e WHERE e.store_id = %(store)s AND e.seq = ANY(%(seqs)s::bigint[])
UNION ALL
SELECT 'summary', s.start, s."end", s.summary_md, s.id
FROM unnest(%(starts)s::bigint[], %(ends)s::bigint[]) AS wanted(start, stop)
CROSS JOIN LATERAL (
    SELECT t.start, t."end", t.summary_md, t.id FROM {summary} t
    WHERE t.store_id = %(store)s AND t.invalidated_at IS NULL AND t.start = wanted.start AND t."end" = wanted.stop
    LIMIT 1
) AS s
"""

# The new summary, the store's counter and the range's nap claim (SPEC §4 Claims: done now) in one round
# trip; the store row is already locked by this transaction.
_INSERT_SUMMARY_SQL = """
WITH ins AS (
    INSERT INTO {summary} (store_id, start, "end", level, summary_md, size_bytes, model, author_id,
                           source_digest, generation, created_at)
    VALUES (%(store)s, %(start)s, %(end)s, %(level)s, %(summary_md)s, %(size_bytes)s, %(model)s, %(author)s,
            %(source_digest)s, %(generation)s, %(created_at)s)
    RETURNING id
), bump AS (
    UPDATE {store_table} SET summary_count = summary_count + 1 WHERE id = %(store)s
), released AS (
    DELETE FROM {claim} WHERE store_id = %(store)s AND start = %(start)s AND "end" = %(end)s
)
SELECT id FROM ins
"""


def _compact_inputs(store: Store, block: tree.Block) -> tuple[dict[tree.Block, str], tuple[int, str] | None]:
    """``({child block: text}, (id, summary_md) of the live summary at `block` or None)``; one query."""
    left, right = block.halves()
    wanted = [block] if block.size == 2 else [block, left, right]
    params = {
        "store": store.pk,
        "seqs": [left.start, right.start] if block.size == 2 else [],
        "starts": [b.start for b in wanted],
        "ends": [b.end for b in wanted],
    }
    sql = _COMPACT_INPUTS_SQL.format(entry=Entry._meta.db_table, summary=Summary._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    texts, existing = {}, None
    for kind, start, end, text, summary_id in rows:
        if kind == "summary" and (start, end) == (block.start, block.end):
            existing = (summary_id, text)
        elif kind == "entry":
            texts[tree.Block(start, 1)] = tree.child_text(text)  # a redacted entry is a child whose text is ""
        else:
            texts[tree.Block(start, end - start + 1)] = text
    return texts, existing


def _insert_summary(summary: Summary) -> int:
    """Insert `summary` (unsaved), bump its store's summary_count, delete the range's claim; returns the id."""
    sql = _INSERT_SUMMARY_SQL.format(
        summary=Summary._meta.db_table, store_table=Store._meta.db_table, claim=Claim._meta.db_table
    )
    params = {
        "store": summary.store_id,
        "start": summary.start,
        "end": summary.end,
        "level": summary.level,
        "summary_md": summary.summary_md,
        "size_bytes": summary.size_bytes,
        "model": summary.model,
        "author": summary.author_id,
        "source_digest": summary.source_digest,
        "generation": summary.generation,
        "created_at": summary.created_at,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def _release_claims(store: Store, block: tree.Block | None = None) -> None:
    """Delete the nap claim of `block`, or every claim of `store` (one DELETE through the claim key).

    Every claim of the store is locked in key order (start, end) first: nap's claim statement locks its
    rows in that order too, so the two never wait for each other in a cycle."""
    claims = Claim.objects.filter(store=store)
    if block is not None:
        claims.filter(start=block.start, end=block.end).delete()
        return
    with connection.cursor() as cursor:
        cursor.execute(_RELEASE_CLAIMS_SQL, [store.pk])


# Every claim of a store, locked in key order before they are deleted (`_release_claims`).
_RELEASE_CLAIMS_SQL = f"""
DELETE FROM {Claim._meta.db_table} WHERE id IN (
    SELECT id FROM {Claim._meta.db_table} WHERE store_id = %s ORDER BY start, "end" FOR UPDATE
)"""  # noqa: S608 - a model's table name, never input


@transaction.atomic
def compact_range(
    *,
    store: Store,
    author: User,
    block: tree.Block,
    generation: int,
    source_digest: str,
    summary_md: str,
    model: str,
    snapshot: int | None = None,
) -> Compacted:
    """Store the summary of aligned range `block` (size ≥ 2) built from its two children (SPEC §4 compact).

    Checks in order under the store lock: archived (409 `store_archived`); range inside the current
    entries and snapshot ≤ entry_count (400); `generation` is the store's (409 `stale_generation`); both
    children live and the recomputed digest equals `source_digest` (409 `stale_digest`); a live summary
    at the range with the same text → returned with created=False (200), with another text → 409
    `summary_conflict`. summary_md (1..1,024 UTF-8 bytes) and model (1..200 chars) are validated by the
    caller. `pending`/`complete` are for `snapshot` (default: the current entry_count). Deletes the
    range's nap claim, whoever held it (SPEC §4 Claims: claims are advisory).
    """
    locked = lock_store(store)
    if locked.archived_at is not None:
        raise StoreArchived()
    if block.end >= locked.entry_count:
        raise InvalidRange(
            f"range: {quoted(block.label)} is beyond the store's {entries(locked.entry_count)}.",
            details={"entry_count": locked.entry_count},
        )
    if snapshot is not None and snapshot > locked.entry_count:
        raise SnapshotTooLarge(
            f"snapshot: {snapshot} is larger than the store's entry_count {locked.entry_count}.",
            details={"entry_count": locked.entry_count},
        )
    if generation != locked.generation:
        raise StaleGeneration(details={"generation": locked.generation})
    left, right = block.halves()
    texts, existing = _compact_inputs(locked, block)
    left_text, right_text = texts.get(left), texts.get(right)
    if left_text is None or right_text is None:
        raise StaleDigest("A child of this range has no live summary; call nap again.")
    if tree.source_digest(left, left_text, right, right_text) != source_digest:
        raise StaleDigest()
    n = locked.entry_count if snapshot is None else snapshot
    if existing is not None:
        existing_id, existing_text = existing
        if existing_text != summary_md:
            raise SummaryConflict(details={"range": block.label})
        _release_claims(locked, block)  # the range has its summary: whoever claimed it is done
        summary = Summary.objects.select_related("author").get(store_id=locked.pk, pk=existing_id)
        return Compacted(summary=summary, created=False, snapshot=n, pending=pending_at(store=locked, snapshot=n))
    summary = Summary(
        store=locked,
        start=block.start,
        end=block.end,
        level=block.level,
        summary_md=summary_md,
        size_bytes=len(summary_md.encode("utf-8")),
        model=model,
        author=author,
        source_digest=source_digest,
        generation=locked.generation,
    )
    summary.id = _insert_summary(summary)
    locked.summary_count += 1
    return Compacted(summary=summary, created=True, snapshot=n, pending=pending_at(store=locked, snapshot=n))


@transaction.atomic
def forget_range(*, store: Store, actor: User, block: tree.Block, generation: int) -> Forgotten:
    """Invalidate the live summary at `block` and every live summary containing it (SPEC §4 forget).

    block: an entry (``n``) or an aligned range inside the current entries (else 400). `generation` must
    be the store's (409 `stale_generation`). Archived → 409 `store_archived`. Entries are never touched.
    Always increments `generation`; `summary_count` drops by the number invalidated; every nap claim of
    the store is deleted (the jobs handed out are stale now). The caller has checked the owner right;
    `actor`'s is checked again under the lock (`stores.services.recheck_owner`).
    """
    locked = lock_store(store)
    recheck_owner(locked, actor)
    if locked.archived_at is not None:
        raise StoreArchived()
    if block.end >= locked.entry_count:
        raise InvalidRange(
            f"range: {quoted(block.label)} is beyond the store's {entries(locked.entry_count)}.",
            details={"entry_count": locked.entry_count},
        )
    if generation != locked.generation:
        raise StaleGeneration(details={"generation": locked.generation})
    # The block and its ancestors are at most ~63 exact ranges: an index lookup each, never a scan.
    candidates = list(tree.ranges_containing(block, locked.entry_count))
    invalidated: list[tree.Block] = []
    if candidates:
        hits = list(
            Summary.objects.filter(store=locked, invalidated_at=None)
            .filter(_block_q(candidates))
            .values_list("pk", "start", "end")
        )
        if hits:
            Summary.objects.filter(store_id=locked.pk, pk__in=[pk for pk, _, _ in hits]).update(
                invalidated_at=timezone.now(), invalidated_by=actor
            )
        invalidated = sorted((tree.Block(start, end - start + 1) for _, start, end in hits), key=lambda b: b.size)
    _release_claims(locked)  # every job handed out before is stale now (the generation moves on)
    locked.generation += 1
    locked.summary_count -= len(invalidated)
    locked.save(update_fields=["generation", "summary_count"])
    return Forgotten(invalidated=invalidated, generation=locked.generation)


@dataclass(frozen=True)
class Redacted:
    """Result of `redact_entry`.

    entry: the redacted entry (author loaded). changed: False when it was already redacted (nothing done).
    invalidated: the live summaries invalidated now, smallest first. summaries_redacted: how many summary
    rows (live or already invalidated) had their text nulled now. generation: the store's generation after.
    """

    entry: Entry
    changed: bool
    invalidated: list[tree.Block]
    summaries_redacted: int
    generation: int


@transaction.atomic
def redact_entry(*, store: Store, actor: User, seq: int, reason: object, request_id: str = "") -> Redacted:
    """Redact entry `seq` of `store` for good (SPEC §4 "redact an entry"); the caller checked the owner right.

    seq: 0 ≤ seq ≤ MAX_SEQ (validated by the caller); seq ≥ entry_count raises EntryNotFound (404).
    reason: 1..1,000 characters (ReasonRequired, 400, before anything is locked); it goes to an AuditEvent
    (`redact_entry`) and nowhere else — never to readers, never into an export.
    The entry keeps seq, author, created_at, size_bytes and client_nonce; `body_md` becomes null with
    `redacted_at`/`redacted_by`. Every summary whose range contains `seq` — live or already invalidated —
    has its `summary_md` and `source_digest` nulled (`redacted_at` set; the digest hashes the text, a guess
    oracle beside a sibling's text); the live ones are first invalidated as `forget` does, and `generation`
    increments, so in-flight nap jobs built from the old text fail with
    `stale_generation`. Irreversible and idempotent: an entry already redacted is returned unchanged
    (changed=False, no new event, generation untouched). Allowed on archived stores, like redacting a file
    version (SPEC §3). Locks the store row, then the entry: serialised with note, compact and forget.
    Render the result with `EntrySerializer(result.entry)` and `RedactMetaSerializer(result)`
    (memories.api.serializers), as the REST view does; an MCP tool is the same three lines.
    """
    reason = audit.clean_reason(reason)
    locked = lock_store(store)
    recheck_owner(locked, actor)  # the owner right, checked by the caller before the lock, again
    if seq >= locked.entry_count:
        raise EntryNotFound(
            f"Entry {seq} not found; the store has {entries(locked.entry_count)}.",
            details={"seq": seq, "entry_count": locked.entry_count},
        )
    entry = (
        Entry.objects.select_for_update(of=("self",)).select_related("author", "redacted_by").get(store=locked, seq=seq)
    )
    if entry.redacted_at is not None:
        return Redacted(entry=entry, changed=False, invalidated=[], summaries_redacted=0, generation=locked.generation)
    now = timezone.now()
    entry.body_md = None
    entry.redacted_at = now
    entry.redacted_by = actor
    # By (store, seq), not by id alone: one shard on Citus (tests/scaling/test_hot_paths.py).
    Entry.objects.filter(store_id=locked.pk, seq=seq).update(body_md=None, redacted_at=now, redacted_by=actor)
    # Every summary row of the ~log2(N) ranges containing seq (index summary_by_level), live or not.
    candidates = list(tree.ranges_containing(tree.Block(seq, 1), locked.entry_count))
    in_ranges = Q(pk__in=[])
    for block in candidates:
        in_ranges |= Q(level=block.level, start=block.start)
    rows = (
        list(
            Summary.objects.filter(store=locked)
            .filter(in_ranges)
            .values_list("pk", "start", "end", "invalidated_at", "redacted_at")
        )
        if candidates
        else []
    )
    live = [(pk, start, end) for pk, start, end, invalidated_at, _ in rows if invalidated_at is None]
    if live:
        Summary.objects.filter(store_id=locked.pk, pk__in=[pk for pk, _, _ in live]).update(
            invalidated_at=now, invalidated_by=actor
        )
    unredacted = [pk for pk, _, _, _, redacted_at in rows if redacted_at is None]
    if unredacted:
        Summary.objects.filter(store_id=locked.pk, pk__in=unredacted).update(
            summary_md=None,
            source_digest=None,  # it hashes the redacted text: beside a sibling's text, a guess oracle
            redacted_at=now,
        )
    invalidated = sorted((tree.Block(start, end - start + 1) for _, start, end in live), key=lambda b: b.size)
    locked.generation += 1
    locked.summary_count -= len(live)
    locked.save(update_fields=["generation", "summary_count"])
    _release_claims(locked)  # jobs handed out before this are stale now (as after forget)
    audit.record_event(
        actor=actor,
        action=AuditAction.REDACT_ENTRY,
        store=locked,
        reason=reason,
        seq=seq,
        details={
            "author": entry.author.handle,
            "created_at": entry.created_at.isoformat(),
            "size_bytes": entry.size_bytes,
            "invalidated": [block.label for block in invalidated],
            "summaries_redacted": len(unredacted),
            "generation": locked.generation,
        },
        request_id=request_id,
    )
    return Redacted(
        entry=entry,
        changed=True,
        invalidated=invalidated,
        summaries_redacted=len(unredacted),
        generation=locked.generation,
    )
