"""nap's frontier query (memories/nap.py) against a literal reading of SPEC §4 "ready", on random trees.

Each case builds a random but reachable tree — random compactions of ready ranges, with forgets in between
(a forget drops a range and every live ancestor, as `forget_range` does) — inserts it, and compares what
both strategies of the frontier return with the reference: every aligned range of size ≥ 2 inside
``[0, N)`` without a live summary whose two children exist, lowest level first, then oldest start.
"""

from __future__ import annotations

import random
from itertools import islice

import pytest

from memories import nap as nap_module
from memories import tree
from memories.models import WATERMARK_HOLES, Summary, Watermark
from stores.models import Store
from tests.log.conftest import fill

pytestmark = pytest.mark.django_db


def reference_ready(n: int, live: set[tuple[int, int]]) -> list[tree.Block]:
    ready = []
    size = 2
    while size <= n:
        for start in range(0, n - size + 1, size):
            block = tree.Block(start, size)
            if (block.start, block.end) in live:
                continue
            left, right = block.halves()
            if size == 2 or {(left.start, left.end), (right.start, right.end)} <= live:
                ready.append(block)
        size *= 2
    return sorted(ready, key=lambda block: (block.level, block.start))


def random_tree(rng: random.Random, n: int) -> set[tuple[int, int]]:
    """A reachable set of live summaries: compact random ready ranges, sometimes forget one."""
    live: set[tuple[int, int]] = set()
    for _ in range(rng.randrange(0, 2 * n + 1)):
        ready = reference_ready(n, live)
        if rng.random() < 0.12 and live:
            start, end = rng.choice(sorted(live))
            victim = tree.Block(start, end - start + 1)
            live -= {(b.start, b.end) for b in tree.ranges_containing(victim, n)}
        elif ready:
            # Mostly the leftmost ready jobs (as claims hand them out), sometimes anywhere.
            block = ready[0] if rng.random() < 0.5 else rng.choice(ready)
            live.add((block.start, block.end))
    return live


def load(store: Store, live: set[tuple[int, int]]) -> Store:
    Summary.objects.bulk_create(
        Summary(
            store=store,
            start=start,
            end=end,
            level=(end - start + 1).bit_length() - 1,
            summary_md="s",
            size_bytes=1,
            model="m",
            author=store.owner,
            source_digest="0" * 64,
            generation=1,
        )
        for start, end in live
    )
    Store.objects.filter(pk=store.pk).update(summary_count=len(live))
    store.refresh_from_db()
    return store


@pytest.mark.parametrize("seed", range(24))
def test_both_frontier_strategies_agree_with_the_reference(private_store, monkeypatch, seed):
    rng = random.Random(seed)
    n = rng.choice([2, 3, 5, 8, 13, 31, 64, 100, 127, 200])
    store = load(fill(private_store, n), random_tree(rng, n))
    live = set(Summary.objects.filter(store=store, invalidated_at=None).values_list("start", "end"))
    for snapshot in sorted({n, rng.randrange(0, n + 1), rng.randrange(0, n + 1)}):
        inside = {(start, end) for start, end in live if end < snapshot}
        expected = reference_ready(snapshot, inside)
        pending = tree.needed_count(snapshot) - len(inside)
        monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", 10**9)
        assert list(nap_module._frontier(store, snapshot, pending, m=1)) == expected
        monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
        for m in (1, 3, 17):
            got = list(islice(nap_module._frontier(store, snapshot, pending, m=m), m))
            assert got == expected[:m], (seed, snapshot, m)


def test_the_scan_skips_a_compacted_prefix_and_finds_the_holes_after_it(private_store, monkeypatch):
    store = fill(private_store, 1030)
    live = {(b.start, b.end) for size in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) for b in _level(1024, size)}
    live |= {(1024, 1025)}
    store = load(store, live - {(0, 1023)} - {(512, 1023)} - {(768, 1023)} - {(896, 1023)})
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
    pending = tree.needed_count(1030) - store.summary_count
    got = list(islice(nap_module._frontier(store, 1030, pending, m=4), 4))
    assert [block.label for block in got] == ["1026-1027", "1028-1029", "896-1023"]


def _level(n: int, size: int) -> list[tree.Block]:
    return [tree.Block(start, size) for start in range(0, n - size + 1, size)]


# ------------------------------------------------------------------------------------------- watermarks


def first_hole(live: set[tuple[int, int]], level: int) -> int:
    """The first aligned level-`level` start without a live summary (whatever the snapshot)."""
    size, start = 1 << level, 0
    while (start, start + size - 1) in live:
        start += size
    return start


def watermarks(store: Store) -> dict[int, tuple[int, list[tuple[int, int]]]]:
    """level → (start, holes) of the store's watermarks that count (those of its current generation)."""
    store.refresh_from_db()
    rows = Watermark.objects.filter(store=store, generation=store.generation)
    return {
        level: (start, list(zip(starts, ends, strict=True)))
        for level, start, starts, ends in rows.values_list("level", "start", "hole_starts", "hole_ends")
    }


def assert_watermark_true(live: set[tuple[int, int]], level: int, mark: tuple[int, list[tuple[int, int]]]) -> None:
    """What a watermark says holds for the live summaries `live`, and it says as much as a fresh scan learns:
    every aligned range before `start` outside the holes is live; the holes are sorted, disjoint, aligned,
    at most WATERMARK_HOLES, each starts at a missing range; with room left, no live summary lies past
    `start` (the scan read the level to its end)."""
    size = 1 << level
    start, holes = mark
    assert len(holes) <= WATERMARK_HOLES
    bound = 0
    for lo, hi in holes:
        assert bound <= lo < hi <= start and lo % size == 0 and hi % size == 0, (level, mark)
        assert (lo, lo + size - 1) not in live, (level, mark)  # each hole starts at a missing range
        bound = hi
    inside_a_hole = {a for lo, hi in holes for a in range(lo, hi, size)}
    for a in range(0, start, size):
        assert a in inside_a_hole or (a, a + size - 1) in live, (level, a, mark)
    if len(holes) < WATERMARK_HOLES:
        assert all(a < start for a, b in live if b - a + 1 == size), (level, mark)


@pytest.mark.parametrize("seed", range(16))
def test_watermarks_follow_compactions_and_forgets(private_store, monkeypatch, seed):
    """Compactions (summaries added, same generation) and real `forget_range` calls (generation moves on)
    in random order; after each, the scan strategy still agrees with the reference at the full snapshot and
    a random lower one, and the watermarks it leaves are true and complete (`assert_watermark_true`)."""
    from memories.services import forget_range

    rng = random.Random(1000 + seed)
    n = rng.choice([40, 64, 100, 127, 200, 300])
    store = fill(private_store, n)
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
    live: set[tuple[int, int]] = set()
    for _step in range(30):
        ready = reference_ready(n, live)
        if live and rng.random() < 0.2:
            start, end = rng.choice(sorted(live))
            victim = tree.Block(start, end - start + 1)
            forget_range(store=store, actor=store.owner, block=victim, generation=store.generation)
            live -= {(b.start, b.end) for b in tree.ranges_containing(victim, n)}
        else:
            # Mostly a batch of leftmost ready jobs (as nap hands them out), sometimes random ones.
            batch = ready[: rng.randrange(1, 40)] if rng.random() < 0.7 else rng.sample(ready, min(len(ready), 5))
            added = {(block.start, block.end) for block in batch} - live
            load(store, added)
            Store.objects.filter(pk=store.pk).update(summary_count=len(live) + len(added))
            live |= added
        store.refresh_from_db()
        assert set(Summary.objects.filter(store=store, invalidated_at=None).values_list("start", "end")) == live
        for snapshot in (n, rng.randrange(2, n + 1)):
            inside = {(start, end) for start, end in live if end < snapshot}
            expected = reference_ready(snapshot, inside)
            pending = tree.needed_count(snapshot) - len(inside)
            for m in (1, 17):
                got = list(islice(nap_module._frontier(store, snapshot, pending, m=m), m))
                assert got == expected[:m], (seed, _step, snapshot, m)
        marks = watermarks(store)
        for level in range(1, n.bit_length()):
            if level in marks:
                assert_watermark_true(live, level, marks[level])
            else:  # never written at this generation: nothing is live at the level
                assert not any(b - a + 1 == 1 << level for a, b in live), (seed, _step, level, marks)


def test_a_full_hole_list_stops_at_its_last_hole_and_learns_more_as_holes_fill(private_store, monkeypatch):
    """Level 1 with a hole every fourth range (25 holes): the watermark lists the first WATERMARK_HOLES and
    stops at the last one's end; nap order stays the reference's; once holes fill, the next scan drops them
    and learns the ones after."""
    n = 200
    holes = [start for start in range(0, n, 8)]  # 25 level-1 holes: 0-1, 8-9, 16-17, …
    live = {(start, start + 1) for start in range(0, n, 2) if start not in holes}
    store = load(fill(private_store, n), live)
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)

    def scan_and_check(live):
        pending = tree.needed_count(n) - len(live)
        expected = reference_ready(n, live)
        for m in (1, 5, 17, 40):
            assert list(islice(nap_module._frontier(store, n, pending, m=m), m)) == expected[:m], m
        mark = watermarks(store)[1]
        assert_watermark_true(live, 1, mark)
        return mark

    start, listed = scan_and_check(live)
    # X: the start of the first run the list had no room for
    assert [lo for lo, _hi in listed] == holes[:WATERMARK_HOLES] and start == holes[WATERMARK_HOLES]
    filled = {(start, start + 1) for start in holes[:10]}
    load(store, filled)
    live |= filled
    start, listed = scan_and_check(live)
    assert [lo for lo, _hi in listed] == holes[10:] and start == n  # 15 left: room to read the level to its end


def summary_rows_read(store: Store, n: int, m: int) -> int:
    """Rows of memories_summary one run of the scan statement reads (EXPLAIN ANALYZE of its plan): the rows
    its scans return and the rows they read and then dropped by a Filter."""
    from django.db import connection

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
        if node.get("Relation Name") == Summary._meta.db_table:
            own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        return own + sum(rows(child) for child in node.get("Plans", ()))

    return rows(plan[0]["Plan"])


def test_after_a_forget_near_the_start_the_scan_reads_a_level_once_not_on_every_nap(private_store, monkeypatch):
    """Levels 1–3 complete on 4,096 entries, then entry 0 forgotten (its three summaries invalidated, the
    generation moves on): the first scan reads each level's summaries once and lists the hole; the next
    ones read a few rows, not the ~3,600 summaries of levels 1–3 (before the hole lists: every nap)."""
    from memories.services import forget_range

    n = 4096
    live = {(b.start, b.end) for size in (2, 4, 8) for b in _level(n, size)}
    store = load(fill(private_store, n), live)
    forget_range(store=store, actor=store.owner, block=tree.Block(0, 1), generation=store.generation)
    store.refresh_from_db()
    live -= {(0, 1), (0, 3), (0, 7)}
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
    # Statistics as autovacuum keeps them: in the full suite the table's statistics could be an earlier
    # test's, and the planner then read every summary of the table through another index (71,710 rows in two
    # CI runs of 2026-12-05; the index choice without statistics is docs/memories-log.md's "pair scans" note)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_summary")
    first = summary_rows_read(store, n, m=8)
    assert first > len(live)  # the first scan after the forget learns every level once
    marks = watermarks(store)
    assert {level: holes for level, (_start, holes) in marks.items()} == {1: [(0, 2)], 2: [(0, 4)], 3: [(0, 8)]}
    for level in (1, 2, 3):
        assert_watermark_true(live, level, marks[level])
    for _ in range(2):
        assert summary_rows_read(store, n, m=8) < 100
    pending = tree.needed_count(n) - len(live)
    expected = reference_ready(n, live)
    assert list(islice(nap_module._frontier(store, n, pending, m=8), 8)) == expected[:8]
    assert [block.label for block in expected[:3]] == ["0-1", "16-31", "32-47"]


def test_the_scan_trusts_a_watermark_of_the_current_generation_only(private_store, monkeypatch):
    store = load(fill(private_store, 64), set())  # 32 ready jobs at level 1, nothing compacted
    monkeypatch.setattr(nap_module, "EXHAUSTIVE_PENDING", -1)
    pending = tree.needed_count(64)
    Watermark.objects.create(store=store, level=1, start=20, generation=store.generation - 1)
    got = list(islice(nap_module._frontier(store, 64, pending, m=2), 2))
    assert [block.label for block in got] == ["0-1", "2-3"]  # an older generation's mark counts for nothing
    Watermark.objects.filter(store=store).update(start=20, generation=store.generation)
    got = list(islice(nap_module._frontier(store, 64, pending, m=2), 2))
    assert [block.label for block in got] == ["20-21", "22-23"]  # the scan starts at a current mark


@pytest.mark.django_db(transaction=True)  # the foreign keys are checked at commit: each statement's here
def test_a_store_deleted_before_the_scan_is_a_404_and_leaves_no_watermark(owner):
    from memories import nap as nap_service
    from stores.errors import StoreNotFound
    from tests.factories import ProjectFactory, project_store

    store = fill(project_store(ProjectFactory(), canonical=False), 600, author=owner)  # 599 pending: the scan
    type(store).objects.filter(pk=store.pk).delete()
    for claimant in (f"user:{owner.pk}", None):
        with pytest.raises(StoreNotFound):
            nap_service.nap(store=store, claimant=claimant, limit=2)
    assert not Watermark.objects.exists()


# ------------------------------------------------------------------------------------- pending at a snapshot


@pytest.mark.parametrize("seed", range(12))
def test_pending_below_the_entry_count_agrees_with_the_reference_both_ways(private_store, monkeypatch, seed):
    """`pending_at` below the entry_count: the walk (few missing) and the count on either side of the
    snapshot (many missing) both give the number of aligned ranges inside [0, snapshot) without a live
    summary."""
    from memories import selectors

    rng = random.Random(2000 + seed)
    n = rng.choice([13, 64, 100, 200, 300])
    store = load(fill(private_store, n), random_tree(rng, n))
    live = set(Summary.objects.filter(store=store, invalidated_at=None).values_list("start", "end"))
    for snapshot in sorted({rng.randrange(0, n), rng.randrange(0, n), n // 3, n - 1}):
        expected = sum(
            1
            for size in (2**k for k in range(1, snapshot.bit_length()))
            for start in range(0, snapshot - size + 1, size)
            if (start, start + size - 1) not in live
        )
        for cap in (10**6, 0, 3):
            monkeypatch.setattr(selectors, "PENDING_WALK_CAP", cap)
            assert selectors.pending_at(store=store, snapshot=snapshot) == expected, (seed, snapshot, cap)
