"""nap (SPEC §4 nap / compact, "Claims"): the next ready compaction jobs, claimed for the caller.

A job is *ready* when its range has no live summary and both children exist; nap serves ready jobs
lowest level first, then oldest start. A caller with write access (`claimant_for`) *claims* every job
it is given for ``NAP_CLAIM_SECONDS``; other callers skip ranges claimed by someone else, so parallel
agents never do the same LLM work twice. Claims are advisory: `compact` checks stay the only truth, and
anyone may still compact any ready range.

Every nap costs a constant number of queries whatever the store size (a claimant's nap: the active
claims, the frontier, the claim upsert, the children; a reader's: claims, frontier, children):

- The claim upsert is one autocommit statement that re-checks each candidate (still ready, held by
  nobody else) and claims the first `limit`; the unique claim key makes a concurrent nap of the same
  range wait for this one and then skip the range, so two naps never claim one job. No lock is held
  across statements; a nap that lost candidates to a concurrent one claims its spare candidates in one
  more statement.
- The frontier query reads only the part of the tree that can hold missing summaries: everything
  before the origin ``P`` is covered by live summaries (found by descending from the leftmost root block
  without a summary, moving right past every live left child), so it is skipped at every level. When few
  summaries are pending (≤ `EXHAUSTIVE_PENDING`) it walks the missing ranges from the roots instead and
  returns every ready job; otherwise it streams, per level, the live summaries from that level's first
  missing range through the ``(store, level, start)`` index and stops after the first `m` holes (level
  1) or complete pairs without a parent (higher levels), ``m = limit + active claims``. Each level is
  scanned only where it can have missing ranges: inside the runs of missing ranges its watermark
  (`memories.models.Watermark`) lists and after the watermark's start, both of which the same statement
  moves forward — so a nap reads only what was compacted since the last one, not every summary of a level
  that is complete while the one above it is not, nor every summary after a hole that a forget or a
  redaction opened near the start of a large store.

Claims live in `memories.models.Claim` (database time only: `statement_timestamp()`); see that model
for how they are cleaned up without a background job, and docs/memories-log.md "Claims".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError

from accounts.models import TokenScope
from config.compiled import prepared_cursor
from config.errors import InvalidRequest
from memories import tree
from memories.models import BODY_MAX_BYTES, WATERMARK_HOLES, Claim, Summary, Watermark
from memories.selectors import MISSING_ROOTS_SQL as _MISSING_ROOTS
from memories.selectors import MISSING_WALK_SQL, compaction_prompt, pending_at, render_lines, resolve_snapshot
from memories.selectors import live_sql as _live
from stores.errors import StoreArchived, StoreNotFound
from stores.models import Store

NAP_MAX_LIMIT = 16
# Up to this many pending summaries, the frontier walks every missing range from the roots (≈ 3 index
# probes each); above it, it scans live summaries level by level from the origin and stops early.
EXHAUSTIVE_PENDING = 256

_SUMMARY = Summary._meta.db_table
_CLAIM = Claim._meta.db_table
_WATERMARK = Watermark._meta.db_table
_MAX_START = "9223372036854775807::bigint"  # the largest bigint: an upper bound on any start
_STORE = Store._meta.db_table


# A claimant's own claim row that lapsed at its hold's cap (renewals stop at `claimed_at + max_hold`, so its
# `expires_at` is exactly that) less than NAP_CLAIM_SECONDS ago: the range is not this claimant's to take
# again yet (`_CLAIM_SQL`), though anyone else may take it. A claim that lapsed before its cap — its
# claimant stopped napping (a tester: a first version judged by the clock alone refused an agent back after
# a restart) — leaves no cool-down, nor does one never extended past its first period (with
# NAP_CLAIM_MAX_SECONDS equal to NAP_CLAIM_SECONDS every lapse looked like a cut hold: a tester). Never
# NULL: a reader naps with a NULL claimant.
_COOLING = (
    "COALESCE(c.claimant = %(claimant)s::text "
    "AND c.expires_at = c.claimed_at + make_interval(secs => %(max_hold)s::int) "
    "AND c.expires_at > c.claimed_at + make_interval(secs => %(seconds)s::int) "
    "AND c.expires_at <= statement_timestamp() "
    "AND statement_timestamp() < c.expires_at + make_interval(secs => %(seconds)s::int), false)"
)

# The store's active claims (this generation, not lapsed), with whether each range is still a ready job
# inside the snapshot, and the database time they are compared with. The caller's own cooling rows come as
# someone else's claim (`mine` false) that lapses when the caller may take the range again.
_CLAIMS_SQL = f"""
SELECT statement_timestamp(), c.start, c.level,
       c.claimant = %(claimant)s::text AND c.expires_at > statement_timestamp(),
       CASE WHEN c.expires_at > statement_timestamp() THEN c.expires_at
            ELSE c.expires_at + make_interval(secs => %(seconds)s::int) END,
       c."end" < %(n)s::bigint AND NOT {_live("l", "c.level", "c.start")}
       AND (c.level = 1
            OR ({_live("a", "c.level - 1", "c.start")}
                AND {_live("b", "c.level - 1", "c.start + (1::bigint << (c.level - 1))")})) AS ready
FROM {_CLAIM} c
WHERE c.store_id = %(store)s::uuid AND c.generation = %(generation)s::bigint
  AND (c.expires_at > statement_timestamp() OR ({_COOLING}))
"""  # noqa: S608 - table names and SQL fragments are module constants, never input

# Few pending summaries: walk every missing range from the missing roots and keep the ready ones.
_EXHAUSTIVE_SQL = f"""
{MISSING_WALK_SQL}
SELECT 'ready', m.start, m.level FROM missing m
WHERE m.level = 1 OR ({_live("a", "m.level - 1", "m.start")}
                      AND {_live("b", "m.level - 1", "m.start + (1::bigint << (m.level - 1))")})
"""  # noqa: S608 - table names and SQL fragments are module constants, never input


def _at_level(level: str, lo: str, hi: str) -> str:
    """SQL: summary `s` is at `level` with ``lo <= start <= hi`` (SQL expressions), written so that only the
    ``(store, level, start)`` indexes can serve it and the scan starts at `lo` and stops after `hi`.

    The row comparison keeps the planner on those indexes (no other index can serve it; with statistics
    from ANALYZE alone it streamed the ``(store, start, end)`` index for an equality on `level` and a range
    on `start` only). The plain keys position and stop the scan. Measured on PostgreSQL 15: a scan bounded
    by row comparisons alone stops only at the level's end (nbtree stops on a row comparison's first
    column), and an upper row comparison next to the plain keys still made it read to the level's end
    (1,500 index pages for an empty range at 500,000 entries; 4 without it). Order such a scan by `start`
    alone: with `level` fixed by the equality, an order on `(level, start)` above a subquery made
    PostgreSQL sort the whole range instead of stopping at a LIMIT.
    """
    return f"s.level = {level} AND s.start >= {lo} AND s.start <= {hi} AND (s.level, s.start) >= ({level}, {lo})"


# Many pending summaries: everything before the origin P is covered by live summaries, and at each level L
# the level's watermark (memories.models.Watermark, valid only at the store's generation read in this
# statement's snapshot) says that every range before its `start` X_L is live except inside its listed
# holes. Per level, the statement
# - `kept`: moves each listed hole's start past what was compacted since (it reads only those summaries:
#   the first range without one), and drops a hole that filled;
# - `learned`: streams the level's summaries after X_L (only those X_L has not passed yet) for new runs of
#   missing ranges between them, one more than the list has room for (`learned_all`; `learned` keeps what
#   fits), and `marks_new` moves X_L to the end of what it knows: the start of that unlisted run, else the
#   end of the level's last summary;
# - `advanced`: stores the new watermark when it changed (one row per level, in level order, so two naps
#   never wait for each other's rows in a cycle). Before it locks a watermark row it takes FOR KEY SHARE on
#   the store row (`store_lock`: what the new rows' foreign-key check takes anyway, taken first), so it
#   waits for a `delete_store` holding the store while holding nothing that delete needs, and then writes
#   nothing. The rows carry the generation its snapshot read (`current`); the lock returns the row's newest
#   version, and when a `forget` committed in between (another generation) the write, which would be
#   ignored anyway, is skipped. Within a generation a row is replaced by one that knows as far or further.
# Ready jobs at level L are missing ranges, so they lie inside the level's *segments*: its holes and
# [X_L, ∞). Each segment is scanned apart and stops after m hits: level 1 yields holes between consecutive
# live summaries (`gap` rows [lo, hi), step 2) and the hole after the segment's last one (`tail`); level
# L ≥ 2 yields complete pairs of live level-(L-1) summaries whose parent is missing (`pair` rows). Each scan
# streams the partial index (store, level, start) in order from the segment's start and stops at its LIMIT
# or at the segment's end (`_at_level`: how the bounds are written so that PostgreSQL 15 keeps to that
# index, positions the scan at the lower bound and stops it at the upper one).
# Without watermarks a store whose level 1 was complete and level 2 not yet paid a scan of every level-1
# summary on every nap (570 ms at 500,000 entries), i.e. quadratic work to compact a large store level by
# level; with a first-hole watermark only, a forget of entry 0 in a store compacted up to level 3 made every
# nap read every summary of levels 1–3 past that hole (530 ms at 500,000) until its path was compacted
# again.
_SCAN_SQL = f"""
WITH RECURSIVE
descent(start, level) AS (
    (SELECT * FROM ({_MISSING_ROOTS}) AS roots ORDER BY start LIMIT 1)
    UNION ALL
    SELECT CASE WHEN {_live("t", "d.level - 1", "d.start")} THEN d.start + (1::bigint << (d.level - 1))
                ELSE d.start END,
           d.level - 1
    FROM descent d WHERE d.level > 1
),
origin AS MATERIALIZED (
    SELECT coalesce((SELECT start FROM descent ORDER BY level LIMIT 1), %(n)s::bigint) AS p
),
current AS MATERIALIZED (
    SELECT st.generation FROM {_STORE} st WHERE st.id = %(store)s::uuid
),
store_lock AS MATERIALIZED (
    SELECT st.generation FROM {_STORE} st WHERE st.id = %(store)s::uuid AND st.deleted_at IS NULL FOR KEY SHARE
),
levels AS MATERIALIZED (
    SELECT l.level, (SELECT p FROM origin) >> l.level << l.level AS base, coalesce(w.start, 0) AS mark,
           coalesce(w.hole_starts, '{{}}'::bigint[]) AS hole_starts,
           coalesce(w.hole_ends, '{{}}'::bigint[]) AS hole_ends
    FROM generate_series(1, %(top_level)s::int) AS l(level)
    LEFT JOIN LATERAL (
        SELECT w.start, w.hole_starts, w.hole_ends FROM {_WATERMARK} w JOIN current ON w.generation = current.generation
        WHERE w.store_id = %(store)s::uuid AND w.level = l.level
    ) AS w ON true
),
kept AS MATERIALIZED (
    SELECT k.level, k.hi, coalesce(
        (SELECT x.expect FROM (
            SELECT s.level, s.start, k.lo + ((row_number() OVER (ORDER BY s.start) - 1) << k.level) AS expect
            FROM {_SUMMARY} s
            WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
              AND {_at_level("k.level", "k.lo", "k.hi - 1")}
         ) AS x WHERE x.start <> x.expect ORDER BY x.start LIMIT 1),
        (SELECT q.start + (1::bigint << k.level) FROM (
            SELECT s.start FROM {_SUMMARY} s
            WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
              AND {_at_level("k.level", "0", "k.hi - 1")}
            ORDER BY s.start DESC LIMIT 1
         ) AS q WHERE q.start >= k.lo),
        k.lo) AS lo
    FROM (SELECT v.level, greatest(h.lo, v.base) AS lo, h.hi
          FROM levels v CROSS JOIN LATERAL unnest(v.hole_starts, v.hole_ends) AS h(lo, hi)
          WHERE h.hi > v.base) AS k
),
room AS MATERIALIZED (
    SELECT v.level, greatest(v.mark, v.base) AS x0,
           {WATERMARK_HOLES} - (SELECT count(*) FROM kept k WHERE k.level = v.level AND k.lo < k.hi) AS room
    FROM levels v
),
learned_all AS MATERIALIZED (
    SELECT r.level, g.lo, g.hi, g.k, r.room
    FROM room r
    CROSS JOIN LATERAL (
        SELECT y.lo, y.hi, row_number() OVER (ORDER BY y.hi) AS k FROM (
            SELECT s.level, s.start AS hi,
                   coalesce(lag(s.start) OVER (ORDER BY s.start) + (1::bigint << r.level), r.x0) AS lo
            FROM {_SUMMARY} s
            WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
              AND {_at_level("r.level", "r.x0", _MAX_START)}
        ) AS y WHERE y.hi > y.lo ORDER BY y.hi LIMIT r.room + 1
    ) AS g
),
learned AS MATERIALIZED (
    SELECT l.level, l.lo, l.hi FROM learned_all l WHERE l.k <= l.room
),
marks_new AS MATERIALIZED (
    SELECT v.level, v.mark, v.hole_starts, v.hole_ends,
           CASE WHEN EXISTS (SELECT 1 FROM learned_all l WHERE l.level = v.level AND l.k > l.room)
                THEN (SELECT l.lo FROM learned_all l WHERE l.level = v.level AND l.k > l.room)
                ELSE greatest(r.x0, coalesce((SELECT q.start + (1::bigint << v.level) FROM (
                         SELECT s.start FROM {_SUMMARY} s
                         WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
                           AND {_at_level("v.level", "0", _MAX_START)}
                         ORDER BY s.start DESC LIMIT 1) AS q), 0))
           END AS start,
           ARRAY(SELECT u.lo FROM (SELECT k.lo FROM kept k WHERE k.level = v.level AND k.lo < k.hi
                                   UNION ALL SELECT l.lo FROM learned l WHERE l.level = v.level) AS u ORDER BY u.lo)
               AS new_starts,
           ARRAY(SELECT u.hi FROM (SELECT k.hi FROM kept k WHERE k.level = v.level AND k.lo < k.hi
                                   UNION ALL SELECT l.hi FROM learned l WHERE l.level = v.level) AS u ORDER BY u.hi)
               AS new_ends
    FROM levels v JOIN room r ON r.level = v.level
),
advanced AS (
    INSERT INTO {_WATERMARK} AS w (store_id, level, start, hole_starts, hole_ends, generation)
    SELECT %(store)s::uuid, m.level, m.start, m.new_starts, m.new_ends, current.generation
    FROM marks_new m CROSS JOIN current JOIN store_lock ON store_lock.generation = current.generation
    WHERE m.start <> m.mark OR m.new_starts <> m.hole_starts OR m.new_ends <> m.hole_ends
    ORDER BY m.level
    ON CONFLICT (store_id, level) DO UPDATE
    SET start = EXCLUDED.start, hole_starts = EXCLUDED.hole_starts, hole_ends = EXCLUDED.hole_ends,
        generation = EXCLUDED.generation
    WHERE w.generation < EXCLUDED.generation OR (w.generation = EXCLUDED.generation AND w.start <= EXCLUDED.start)
),
segments AS MATERIALIZED (
    SELECT u.level, u.level - 1 AS below, u.lo, u.hi FROM (
        SELECT k.level, k.lo, k.hi FROM kept k WHERE k.lo < k.hi AND k.lo < %(n)s::bigint
        UNION ALL
        SELECT l.level, l.lo, l.hi FROM learned l WHERE l.lo < %(n)s::bigint
        UNION ALL
        SELECT m.level, m.start, {_MAX_START} FROM marks_new m WHERE m.start < %(n)s::bigint
    ) AS u
),
gaps AS (
    SELECT g.lo AS segment, x.lo, x.hi
    FROM segments g
    CROSS JOIN LATERAL (
        SELECT y.lo, y.hi FROM (
            SELECT coalesce(lag(s.start) OVER (ORDER BY s.start) + 2, g.lo) AS lo, s.level, s.start AS hi
            FROM {_SUMMARY} s
            WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
              AND {_at_level("1", "g.lo", "least(g.hi, %(n)s::bigint) - 2")}
        ) AS y WHERE y.hi > y.lo ORDER BY y.hi LIMIT %(m)s::bigint
    ) AS x
    WHERE g.level = 1
),
tails AS (
    SELECT g.lo AS segment,
           coalesce((SELECT q.start FROM (
                         SELECT s.start FROM {_SUMMARY} s
                         WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
                           AND {_at_level("1", "0", "least(g.hi, %(n)s::bigint) - 2")}
                         ORDER BY s.start DESC LIMIT 1
                     ) AS q WHERE q.start >= g.lo) + 2, g.lo) AS lo,
           least(g.hi, %(n)s::bigint / 2 * 2) AS hi
    FROM segments g WHERE g.level = 1
),
pairs AS (
    SELECT g.level, g.lo AS segment, x.start
    FROM segments g
    CROSS JOIN LATERAL (
        SELECT y.start FROM (
            SELECT s.level, s.start, lead(s.start) OVER (ORDER BY s.start) AS next
            FROM {_SUMMARY} s
            WHERE s.store_id = %(store)s::uuid AND s.invalidated_at IS NULL
              AND {_at_level("g.below", "g.lo", "least(g.hi, %(n)s::bigint) - (1::bigint << (g.level - 1))")}
        ) AS y
        WHERE y.start %% (1::bigint << g.level) = 0 AND y.next = y.start + (1::bigint << (g.level - 1))
          AND y.start + (1::bigint << g.level) <= %(n)s::bigint
          AND NOT {_live("u", "g.level", "y.start")}
        ORDER BY y.start LIMIT %(m)s::bigint
    ) AS x
    WHERE g.level >= 2
)
SELECT 'gap', 1, segment, lo, hi FROM gaps
UNION ALL
SELECT 'tail', 1, segment, lo, hi FROM tails
UNION ALL
SELECT 'pair', level, segment, start, NULL FROM pairs
"""  # noqa: S608 - table names and SQL fragments are module constants, never input

# Claim the first `limit` of the candidates (in the caller's order of preference) that are still ready
# and not claimed by someone else, in one autocommit statement. Two naps racing for one range cannot both
# claim it: the second INSERT waits for the first to commit, then ON CONFLICT ... WHERE finds the range
# held and skips it — a claim held by someone else is only taken over once it has lapsed or belongs to
# an older generation. The caller's own claim is renewed, up to `claimed_at + NAP_CLAIM_MAX_SECONDS` (its hold):
# a range whose hold ended is not a candidate for that claimant for one more NAP_CLAIM_SECONDS (`_COOLING`).
# The statement also reports which candidates it
# picked, so a nap that lost some to a concurrent one tries the next candidates. It takes FOR KEY SHARE on
# the store row before it inserts or renews any claim (`store_row`), for the reason the scan does: a
# renewal locks a claim row, and the foreign-key check of a new claim waited for a `delete_store` then,
# which was waiting to delete that claim — a deadlock. A deleted store yields no `store` row: nothing is
# claimed, and the nap is a 404.
_CLAIM_SQL = f"""
WITH store_row AS MATERIALIZED (
    SELECT st.id FROM {_STORE} st WHERE st.id = %(store)s::uuid AND st.deleted_at IS NULL FOR KEY SHARE
), candidate AS (
    SELECT r.start, r.level
    FROM unnest(%(starts)s::bigint[], %(levels)s::int[]) WITH ORDINALITY AS r(start, level, rank)
    WHERE r.start + (1::bigint << r.level) <= %(n)s::bigint
      AND NOT {_live("l", "r.level", "r.start")}
      AND (r.level = 1 OR ({_live("a", "r.level - 1", "r.start")}
                           AND {_live("b", "r.level - 1", "r.start + (1::bigint << (r.level - 1))")}))
      AND NOT EXISTS (
          SELECT 1 FROM {_CLAIM} o
          WHERE o.store_id = %(store)s::uuid AND o.start = r.start AND o."end" = r.start + (1::bigint << r.level) - 1
            AND o.claimant <> %(claimant)s::text AND o.expires_at > statement_timestamp()
            AND o.generation >= %(generation)s::bigint)
      AND NOT EXISTS (
          SELECT 1 FROM {_CLAIM} c
          WHERE c.store_id = %(store)s::uuid AND c.start = r.start AND c."end" = r.start + (1::bigint << r.level) - 1
            AND c.generation = %(generation)s::bigint AND {_COOLING})
    ORDER BY r.rank LIMIT %(limit)s::int
), claimed AS (
    INSERT INTO {_CLAIM} AS c (store_id, start, "end", level, claimant, generation, claimed_at, expires_at)
    SELECT %(store)s::uuid, r.start, r.start + (1::bigint << r.level) - 1, r.level, %(claimant)s::text,
           %(generation)s::bigint, statement_timestamp(),
           statement_timestamp() + make_interval(secs => %(seconds)s::int)
    FROM (SELECT * FROM candidate ORDER BY start, level) r CROSS JOIN store_row
    ON CONFLICT (store_id, start, "end") DO UPDATE
    SET claimant = EXCLUDED.claimant, generation = EXCLUDED.generation, level = EXCLUDED.level,
        expires_at = CASE WHEN c.claimant = EXCLUDED.claimant AND c.generation = EXCLUDED.generation
                               AND c.expires_at > statement_timestamp()
                          THEN LEAST(EXCLUDED.expires_at, c.claimed_at + make_interval(secs => %(max_hold)s::int))
                          ELSE EXCLUDED.expires_at END,
        claimed_at = CASE WHEN c.claimant = EXCLUDED.claimant AND c.generation = EXCLUDED.generation
                               AND c.expires_at > statement_timestamp()
                          THEN c.claimed_at ELSE EXCLUDED.claimed_at END
    WHERE c.claimant = EXCLUDED.claimant OR c.expires_at <= statement_timestamp()
       OR c.generation < EXCLUDED.generation
    RETURNING c.start, c.level, c.expires_at
)
SELECT 'picked', start, level, NULL::timestamptz FROM candidate
UNION ALL
SELECT 'claimed', start, level, expires_at FROM claimed
UNION ALL
SELECT 'store', NULL, NULL, NULL FROM store_row
"""  # noqa: S608 - table names and SQL fragments are module constants, never input


def claimant_for(user, scopes: frozenset[str] | set[str], store: Store, *, session_id: object = None) -> str | None:
    """The key a nap claims under, or None when the caller naps without claiming (SPEC §4 Claims).

    user: the authenticated user (anonymous → None); scopes: the credential's token scopes
    (`accounts.permissions.token_scopes`); store: fetched through `get_store_for` (carries `can_write`).
    A caller claims only with write access: the store's write right *and* the `memories:write` scope (an
    archived store is refused by `nap` itself). Returns ``"user:<uuid>"``, or ``"session:<uuid>"`` when a per-work
    credential names its session (`session_id`), so each session of one user claims separately.
    """
    if not getattr(user, "is_authenticated", False):
        return None
    if TokenScope.MEMORIES_WRITE.value not in scopes or not getattr(store, "can_write", False):
        return None
    return f"session:{session_id}" if session_id is not None else f"user:{user.pk}"


@dataclass(frozen=True)
class Napped:
    """What `nap` returns: `data` for ``NapDataSerializer`` and `meta` (``{pending, retry_after?}``)."""

    data: dict[str, Any]
    meta: dict[str, Any]


@dataclass(frozen=True)
class _ActiveClaim:
    block: tree.Block
    mine: bool
    expires_at: datetime
    ready: bool


def _order(block: tree.Block) -> tuple[int, int]:
    """SPEC §4 nap order: lowest level first, then oldest start."""
    return block.level, block.start


def _active_claims(store: Store, n: int, claimant: str | None) -> tuple[datetime | None, list[_ActiveClaim]]:
    with prepared_cursor() as cursor:
        cursor.execute(
            _CLAIMS_SQL,
            {
                "store": store.pk,
                "n": n,
                "generation": store.generation,
                "claimant": claimant,
                "seconds": int(settings.NAP_CLAIM_SECONDS),
                "max_hold": int(settings.NAP_CLAIM_MAX_SECONDS),
            },
        )
        rows = cursor.fetchall()
    now = rows[0][0] if rows else None
    claims = [
        _ActiveClaim(tree.Block(start, 1 << level), bool(mine), expires_at, bool(ready))
        for _, start, level, mine, expires_at, ready in rows
    ]
    return now, claims


def _write_rows(store: Store, sql: str, params: dict[str, Any]) -> list[tuple]:
    """Run one of nap's writing statements (claims, watermarks) and return its rows.

    Raises StoreNotFound when the rows' store reference failed because the store was deleted after the
    nap read it; any other IntegrityError propagates.
    """
    try:
        with prepared_cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    except IntegrityError:
        if not Store.objects.filter(pk=store.pk, deleted_at__isnull=True).exists():
            raise StoreNotFound() from None
        raise


def _frontier(store: Store, n: int, pending: int, m: int):
    """Ready jobs at snapshot `n` in nap order: all of them (few pending) or enough to pick `m` from.

    Yields Blocks lazily (a level-1 hole run can be long); at least `m` ready jobs come before the first
    ready job that a scan left out, so a caller skipping at most ``m - limit`` of them gets `limit`.
    """
    roots = [block for block in tree.maximal_blocks(n) if block.size >= 2]
    params = {
        "store": store.pk,
        "n": n,
        "root_starts": [block.start for block in roots],
        "root_levels": [block.level for block in roots],
    }
    if pending <= EXHAUSTIVE_PENDING:
        with prepared_cursor() as cursor:
            cursor.execute(_EXHAUSTIVE_SQL, params)
            ready = [tree.Block(start, 1 << level) for _, start, level in cursor.fetchall()]
        yield from sorted(ready, key=_order)
        return
    params.update(m=m, top_level=max(n.bit_length() - 1, 0))
    rows = _write_rows(store, _SCAN_SQL, params)
    segments: dict[tuple[int, int], list[tuple[str, int, int | None]]] = {}
    for kind, level, segment, lo, hi in rows:
        segments.setdefault((level, segment), []).append((kind, lo, hi))
    truncated: set[int] = set()  # levels where a segment found m jobs: later segments may hide earlier jobs
    for (level, _segment), found in sorted(segments.items()):
        if level in truncated:
            continue
        if level == 1:
            gaps = sorted((lo, hi) for kind, lo, hi in found if kind == "gap")
            tail = next((lo, hi) for kind, lo, hi in found if kind == "tail")
            full = len(gaps) >= m
            runs = gaps if full else [*gaps, tail]  # a full page of gaps may hide later ones: no tail then
            yield from (tree.Block(start, 2) for lo, hi in runs for start in range(lo, hi, 2))
        else:
            starts = sorted(lo for _kind, lo, _hi in found)
            full = len(starts) >= m
            yield from (tree.Block(start, 1 << level) for start in starts)
        if full:
            truncated.add(level)


def _candidates(store: Store, n: int, pending: int, claims: list[_ActiveClaim], want: int) -> list[tree.Block]:
    """Up to `want` jobs in order of preference: the caller's own ready claims first (nap order), then
    ready jobs nobody holds, in nap order."""
    candidates = sorted((claim.block for claim in claims if claim.mine and claim.ready), key=_order)[:want]
    taken = {claim.block for claim in claims}
    if len(candidates) < want:
        for block in _frontier(store, n, pending, m=want + len(claims)):
            if block not in taken:
                candidates.append(block)
                taken.add(block)
                if len(candidates) == want:
                    break
    return candidates


def _claim(
    store: Store, n: int, claimant: str, candidates: list[tree.Block], limit: int
) -> tuple[dict[tree.Block, datetime], bool]:
    """Claim (or renew) the first `limit` `candidates` still free.

    Returns ``(the claims held and when each lapses, whether a concurrent nap won one of them)``. One
    statement; when a concurrent nap won some of the candidates it picked, one more statement per round
    with the candidates it has not tried yet (at most three rounds).
    """
    claimed: dict[tree.Block, datetime] = {}
    lost = False
    remaining = list(candidates)
    for _round in range(3):
        params = {
            "store": store.pk,
            "n": n,
            "claimant": claimant,
            "generation": store.generation,
            "seconds": int(settings.NAP_CLAIM_SECONDS),
            "max_hold": int(settings.NAP_CLAIM_MAX_SECONDS),
            "limit": limit - len(claimed),
            "starts": [block.start for block in remaining],
            "levels": [block.level for block in remaining],
        }
        rows = _write_rows(store, _CLAIM_SQL, params)
        if not any(kind == "store" for kind, *_ in rows):
            raise StoreNotFound()  # deleted since the nap read it (the lock waited for the deletion)
        picked = {tree.Block(start, 1 << level) for kind, start, level, _ in rows if kind == "picked"}
        won = {tree.Block(start, 1 << level): at for kind, start, level, at in rows if kind == "claimed"}
        claimed.update(won)
        lost = lost or len(won) < len(picked)
        remaining = [block for block in remaining if block not in picked]
        if len(won) == len(picked) or len(claimed) >= limit or not remaining:
            break  # no race lost, or nothing more to want or to try
    return claimed, lost


# How many times one nap reads the frontier again after concurrent naps won its candidates. Each attempt is
# a few statements and happens only under contention; 16 agents napping one store at the same instant
# (tests/log/test_claims_parallel.py) need more than three on a loaded machine.
NAP_ATTEMPTS = 6


@dataclass(frozen=True)
class _Attempt:
    chosen: list[tree.Block]
    claimed: dict[tree.Block, datetime]
    retry_after: int | None
    found: bool  # whether any ready job nobody else held was seen
    lost: bool  # whether a concurrent nap won a job this attempt wanted


def _pick(store: Store, n: int, pending: int, claimant: str | None, limit: int) -> _Attempt:
    """One attempt: read the active claims and the frontier, then claim the jobs when `claimant` is set.

    A claimant considers a few spare candidates, so that jobs a concurrent nap took since the frontier was
    read are replaced by the next ones without reading the frontier again.
    """
    now, claims = _active_claims(store, n, claimant)
    claimed: dict[tree.Block, datetime] = {}
    lost = False
    if claimant is None:
        chosen = _candidates(store, n, pending, claims, limit)
        found = bool(chosen)
    else:
        candidates = _candidates(store, n, pending, claims, 2 * limit + 4)
        if candidates:
            claimed, lost = _claim(store, n, claimant, candidates, limit)
        chosen = sorted(claimed, key=_order)
        found = bool(candidates)
    retry_after = None
    blocking = [claim for claim in claims if not claim.mine and claim.ready]
    if not chosen and blocking and now is not None:
        lapse = min(claim.expires_at for claim in blocking)
        retry_after = max(1, math.ceil((lapse - now).total_seconds()))
    return _Attempt(chosen, claimed, retry_after, found, lost)


def _jobs(store: Store, n: int, blocks: list[tree.Block], claimed: dict[tree.Block, datetime]) -> list[dict]:
    """The job objects of `blocks` (each block and its children read in one query); a job whose range was
    compacted since the claim statement read it as ready, or whose child vanished, is dropped."""
    halves = [half for block in blocks for half in block.halves()]
    lines = {line["range"]: line for line in render_lines(store, [*blocks, *halves])}  # StoreNotFound if gone
    jobs = []
    for block in blocks:
        if lines[block.label]["kind"] != "missing":  # compacted since the claim statement read it as ready
            continue
        left, right = (lines[half.label] for half in block.halves())
        if "missing" in (left["kind"], right["kind"]):  # a concurrent forget took a child away
            continue
        children = [_child(line) for line in (left, right)]
        job_left, job_right = block.halves()
        jobs.append(
            {
                "range": block.label,
                "level": block.level,
                "generation": store.generation,
                "source_digest": tree.source_digest(job_left, children[0]["text"], job_right, children[1]["text"]),
                "snapshot": n,
                "children": children,
                "max_bytes": BODY_MAX_BYTES,
                "prompt": compaction_prompt(block, children),
                "claimed_until": claimed.get(block),
            }
        )
    return jobs


def _child(line: dict[str, Any]) -> dict[str, Any]:
    """A job child from a wake line; a redacted entry is a child of kind `redacted` with text "" (SPEC §4)."""
    child = {key: line[key] for key in ("range", "kind", "text", "author", "created_at")}
    if line["kind"] == "summary":
        child["model"] = line["model"]
    else:
        child["text"] = tree.child_text(line["text"])
    return child


def nap(*, store: Store, claimant: str | None, snapshot: int | None = None, limit: int = 1) -> Napped:
    """SPEC §4 nap: up to `limit` ready compaction jobs at snapshot N, claimed for `claimant`.

    store: from `get_store_for` (read access checked). claimant: `claimant_for(...)`, or None to nap
    without claiming (no write access). snapshot: ≤ entry_count (else SnapshotTooLarge, 400); default the
    entry_count. limit: 1..16 (else InvalidRequest, 400).

    Returns Napped with data ``{complete, snapshot, generation, job, jobs}``: `jobs` holds up to `limit`
    jobs in nap order (the caller's own claimed jobs first chosen, then unclaimed ones), `job` is
    ``jobs[0]`` or None. A job is ``{range, level, generation, source_digest, snapshot, children[2],
    max_bytes, prompt, claimed_until}`` (`claimed_until`: when the claim lapses; None when not claimed).
    meta: ``{pending}`` plus ``retry_after`` (whole seconds until the earliest blocking claim lapses) when
    every ready job is claimed by someone else (then `job` is None and `complete` false). A claimant's own
    range whose hold (`NAP_CLAIM_MAX_SECONDS` from its first claim) ended less than `NAP_CLAIM_SECONDS` ago
    counts as claimed by someone else, lapsing at the end of that cool-down.
    A constant number of queries whatever the store size (module docstring).
    Raises StoreArchived (409 `store_archived`) for an archived store, for every caller.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= NAP_MAX_LIMIT:
        raise InvalidRequest(f"limit: must be an integer from 1 to {NAP_MAX_LIMIT}.")
    if store.archived_at is not None:
        # No summary can be stored in an archived store (compact is 409 store_archived): a job handed out
        # would be model work wasted, and a claim made before the archiving would answer "retry later".
        raise StoreArchived()
    n = resolve_snapshot(store, snapshot)
    pending = pending_at(store=store, snapshot=n)
    jobs: list[dict] = []
    retry_after = None
    # Concurrent naps can win candidates this nap wanted, or a concurrent forget take a chosen job's
    # child away, between our queries: look again (bounded). A new attempt keeps what the last one
    # claimed: the caller's own claims come first among its candidates.
    for _attempt in range(NAP_ATTEMPTS):
        if pending == 0:
            break
        attempt = _pick(store, n, pending, claimant, limit)
        retry_after = attempt.retry_after
        if attempt.chosen:
            found = _jobs(store, n, attempt.chosen, attempt.claimed)
            if len(found) >= len(jobs):
                jobs = found
            if len(found) == len(attempt.chosen) and (len(jobs) == limit or not attempt.lost):
                break
        elif not attempt.found:
            if retry_after is None:  # nothing ready and nothing claimed: the counters raced ahead of the rows
                pending = 0
            break
    else:
        if not jobs:
            retry_after = retry_after or 1  # every attempt lost its candidates to other naps: try again soon
    data = {
        "complete": pending == 0,
        "snapshot": n,
        "generation": store.generation,
        "job": jobs[0] if jobs else None,
        "jobs": jobs,
    }
    meta: dict[str, Any] = {"pending": pending}
    if retry_after is not None and not jobs:
        meta["retry_after"] = retry_after
    return Napped(data=data, meta=meta)
