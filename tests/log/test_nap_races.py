"""nap's scan and claims where a breaker found them wanting (2026-12-05; docs/memories-log.md "Watermarks",
"Claims"): a nap claiming while `forget` releases claims (a deadlock: both now lock claims in key order), a
range compacted while the claim statement ran (handed out as a job: `_jobs` now drops it), exactly
WATERMARK_HOLES holes (X stopped at the last one: every nap read the levels after it), and the level ≥ 2
pair scans on a table without statistics (the wrong index: every summary read on every nap)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memories import nap as nap_module
from memories import tree
from memories.models import Claim
from memories.services import forget_range
from stores.models import Store
from tests.log.conftest import fill
from tests.threads import run_threads


@pytest.mark.django_db(transaction=True)
def test_a_nap_taking_over_a_lapsed_claim_after_renewing_its_own_does_not_deadlock_with_forget(private_store):
    """forget deletes every claim of the store (`_release_claims`, in physical order: 0-1 first, then 2-3)
    while a nap's claim statement renews its own claim 2-3 (rank order: own claims first) and then takes
    over the lapsed claim 0-1. A BEFORE INSERT trigger only pauses the nap between its two rows, to make the
    interleaving certain: forget deletes 0-1 and waits for 2-3 (locked by the nap), the nap's insert of 0-1
    waits for forget's delete of it — PostgreSQL kills one of them (a 503 on forget or nap)."""
    store = fill(private_store, 64)
    claimant = f"user:{store.owner_id}"
    now = timezone.now()
    Claim.objects.create(  # 0-1: someone else's claim, lapsed (the next nap takes it over); first on disk
        store=store,
        start=0,
        end=1,
        level=1,
        claimant="user:other",
        generation=store.generation,
        claimed_at=now - timedelta(minutes=10),
        expires_at=now - timedelta(minutes=5),
    )
    Claim.objects.create(  # 2-3: the napper's own active claim (renewed first)
        store=store,
        start=2,
        end=3,
        level=1,
        claimant=claimant,
        generation=store.generation,
        claimed_at=now,
        expires_at=now + timedelta(minutes=5),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION nap_test_pause() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(1.5); RETURN NEW; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER nap_test_pause BEFORE INSERT ON memories_claim FOR EACH ROW "
            "WHEN (NEW.start = 0) EXECUTE FUNCTION nap_test_pause()"
        )
    try:
        started = threading.Event()

        def napper():
            started.set()
            result = nap_module.nap(store=Store.objects.get(pk=store.pk), claimant=claimant, limit=2)
            assert result.data["jobs"]

        def forgetter():
            started.wait(10)
            time.sleep(0.5)  # the nap has renewed 2-3 and pauses before 0-1
            fresh = Store.objects.get(pk=store.pk)
            forget_range(store=fresh, actor=fresh.owner, block=tree.Block(0, 1), generation=fresh.generation)

        errors = run_threads({"nap": napper, "forget": forgetter})
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS nap_test_pause ON memories_claim")
            cursor.execute("DROP FUNCTION IF EXISTS nap_test_pause()")
    assert not errors, {name: repr(exc) for name, exc in errors.items()}


@pytest.mark.django_db(transaction=True)
def test_a_range_compacted_while_the_claim_statement_runs_is_not_handed_out(private_store):
    """A nap's claim statement checks readiness in its snapshot, then inserts the claim; a `compact` of the
    range that commits in between (the claim row it deletes, if any, is gone by then: no conflict) leaves
    the nap handing out a job whose summary already exists — duplicated LLM work, then 200 `created: false`
    or 409 `summary_conflict`. Seen without any trigger: 3 nappers + forgets for 25 s handed one range of
    one generation to two claimants in most runs. The trigger only
    pauses the claim insert of 0-1 to make the interleaving certain."""
    from memories.models import Summary
    from memories.services import compact_range

    store = fill(private_store, 64)
    left, right = tree.Block(0, 1), tree.Block(1, 1)
    digest = tree.source_digest(left, tree.child_text("entry 0"), right, tree.child_text("entry 1"))
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION nap_test_pause() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(1.0); RETURN NEW; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER nap_test_pause BEFORE INSERT ON memories_claim FOR EACH ROW "
            "WHEN (NEW.start = 0) EXECUTE FUNCTION nap_test_pause()"
        )
    handed: list[str] = []
    try:
        started = threading.Event()

        def napper():
            started.set()
            result = nap_module.nap(store=Store.objects.get(pk=store.pk), claimant="user:napper", limit=1)
            handed.extend(job["range"] for job in result.data["jobs"])

        def compactor():
            started.wait(10)
            time.sleep(0.4)  # the nap's claim statement has read 0-1 as ready and pauses before inserting it
            fresh = Store.objects.get(pk=store.pk)
            compact_range(
                store=fresh,
                author=fresh.owner,
                block=tree.Block(0, 2),
                generation=fresh.generation,
                source_digest=digest,
                summary_md="done by someone else",
                model="m",
            )

        errors = run_threads({"nap": napper, "compact": compactor})
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS nap_test_pause ON memories_claim")
            cursor.execute("DROP FUNCTION IF EXISTS nap_test_pause()")
    assert not errors, {name: repr(exc) for name, exc in errors.items()}
    assert Summary.objects.filter(store=store, start=0, end=1, invalidated_at=None).exists()
    assert "0-1" not in handed, handed  # observed: ['0-1'] — a job for a range that already has its summary


def _rows_read_with_filtered(store, n: int, m: int) -> int:
    """Rows of memories_summary the scan statement reads, counting rows an index scan read and then
    dropped by its Filter (`summary_rows_read` in test_nap_frontier.py counts only the rows kept)."""
    roots = [block for block in tree.maximal_blocks(n) if block.size >= 2]
    params = {
        "store": store.pk,
        "n": n,
        "m": m,
        "top_level": n.bit_length() - 1,
        "root_starts": [block.start for block in roots],
        "root_levels": [block.level for block in roots],
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + nap_module._SCAN_SQL, params)
        (plan,) = cursor.fetchone()

    def rows(node) -> int:
        own = 0
        if node.get("Relation Name") == "memories_summary":
            own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        return own + sum(rows(child) for child in node.get("Plans", ()))

    return rows(plan[0]["Plan"])


@pytest.mark.django_db
def test_exactly_sixteen_holes_do_not_make_every_nap_read_the_levels_after_them(private_store, monkeypatch):
    """Levels 1–3 complete on 4,096 entries, then 16 entries forgotten far apart: 16 holes per level, and
    nothing else missing in levels 1–3. The first scan finds exactly WATERMARK_HOLES runs, treats the full
    list as "maybe more" and stops X at the 16th hole's end (1,442) instead of the level's end; every later
    nap (room 0) then scans [1442, ∞) of levels 1–3 to the end for jobs that do not exist.
    Observed: 4,414 summary rows per nap (15 holes: 99); expected: about what 15 holes cost."""
    from tests.log.test_nap_frontier import _level, load, summary_rows_read, watermarks

    n = 4096
    live = {(b.start, b.end) for size in (2, 4, 8) for b in _level(n, size)}
    store = load(fill(private_store, n), live)
    for k in range(16):
        store.refresh_from_db()
        forget_range(store=store, actor=store.owner, block=tree.Block(k * 96, 1), generation=store.generation)
    store.refresh_from_db()
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
    summary_rows_read(store, n, m=8)  # the first scan after the forgets learns the levels once
    later = [summary_rows_read(store, n, m=8) for _ in range(2)]
    marks = watermarks(store)
    assert all(len(marks[level][1]) == 16 for level in (1, 2, 3)), marks
    assert max(later) < 300, (later, {level: start for level, (start, _) in marks.items()})


@pytest.mark.django_db
def test_the_pair_scans_stay_on_the_level_index_without_column_statistics(private_store, monkeypatch):
    """A table never analyzed (a fresh database, a burst of compactions before autovacuum): the pair scans
    bound `start` with plain keys, which the (store, start, end) index `summary_one_live_per_range` can serve,
    and the planner takes it for `level = g.level - 1` (an expression); the row comparison is then only a
    Filter. Level 1 complete on 16,384 entries and nothing above it: the pair scan of every level L ≥ 3
    streams every live summary of every level from its segment's start to N (the Filter drops them), on
    every nap. `summary_rows_read` cannot see it (it counts only rows kept after the Filter).
    Observed: 82,173 rows per nap (180,488 at 32,768 entries: 45-55 ms instead of 0.5 ms);
    expected: a few dozen (28 with the child level passed as a plain column)."""
    from tests.log.test_nap_frontier import _level, load

    n = 1 << 14
    live = {(b.start, b.end) for b in _level(n, 2)} | {(b.start, b.end) for b in _level(64, 4)}
    store = load(fill(private_store, n), live)
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
    _rows_read_with_filtered(store, n, m=8)  # the first scan learns the levels once
    later = [_rows_read_with_filtered(store, n, m=8) for _ in range(2)]
    assert max(later) < 1000, later
