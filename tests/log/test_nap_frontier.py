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
from memories.models import Summary, Watermark
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


def watermarks(store: Store) -> dict[int, int]:
    """level → start of the store's watermarks that count (those of its current generation)."""
    store.refresh_from_db()
    return dict(Watermark.objects.filter(store=store, generation=store.generation).values_list("level", "start"))


@pytest.mark.parametrize("seed", range(16))
def test_watermarks_follow_compactions_and_forgets(private_store, monkeypatch, seed):
    """Compactions (summaries added, same generation) and real `forget_range` calls (generation moves on)
    in random order; after each, the scan strategy still agrees with the reference at the full snapshot and
    a random lower one, and the watermarks it leaves are exactly each level's first missing range."""
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
            assert marks.get(level, 0) == first_hole(live, level), (seed, _step, level, marks)


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
