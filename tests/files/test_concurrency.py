"""Real parallel clients against a live server on PostgreSQL: the cap, paths and preconditions hold (SPEC §5)."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import anthropic
import pytest
from django.utils import timezone

from stores.models import Store
from versions.models import Memory, Operation, Version

pytestmark = pytest.mark.django_db(transaction=True)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fill(store: Store, count: int) -> None:
    """Put `count` memories (each with its `created` version) into `store` in bulk, as the service would."""
    now = timezone.now()
    versions = [
        Version(
            store=store,
            memory_id=uuid.uuid4(),
            operation=Operation.CREATED,
            path=f"/bulk/{i:05}.md",
            content="x",
            content_sha256=sha("x"),
            content_size_bytes=1,
            created_at=now,
        )
        for i in range(count)
    ]
    Version.objects.bulk_create(versions)
    Memory.objects.bulk_create(
        Memory(
            id=v.memory_id,
            store=store,
            path=v.path,
            content="x",
            content_sha256=v.content_sha256,
            content_size_bytes=1,
            current_version=v,
        )
        for v in versions
    )
    Store.objects.filter(pk=store.pk).update(memory_count=count)


def race(n: int, work) -> list:
    """Run ``work(i)`` in `n` threads released together; return each result or the exception it raised."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        try:
            return work(i)
        except Exception as exc:  # collected and asserted on by the caller
            return exc

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run, range(n)))


def test_eight_parallel_creators_at_1995_memories_never_exceed_the_2000_cap(sdk_for, owner, private_store, settings):
    assert settings.MEMORY_STORE_MAX_MEMORIES == 2000
    fill(private_store, 1995)
    clients = [sdk_for(owner) for _ in range(8)]

    def create_two(i):
        outcomes = []
        for j in range(2):
            try:
                clients[i].beta.memory_stores.memories.create(
                    str(private_store.pk), path=f"/race/{i}-{j}.md", content=f"{i}-{j}"
                )
                outcomes.append("created")
            except anthropic.ConflictError as exc:
                outcomes.append(exc.body["error"]["details"]["reason"])
        return outcomes

    results = race(8, create_two)
    outcomes = Counter(o for result in results for o in result)
    assert outcomes == {"created": 5, "memory_limit": 11}
    private_store.refresh_from_db()
    assert private_store.memory_count == 2000 == Memory.objects.filter(store=private_store).count()
    assert Version.objects.filter(store=private_store).count() == 2000


def test_two_parallel_updates_with_the_same_precondition_exactly_one_wins(sdk_for, owner, private_store):
    clients = [sdk_for(owner), sdk_for(owner)]
    memories = clients[0].beta.memory_stores.memories
    memory = memories.create(str(private_store.pk), path="/shared.md", content="v0")
    for round_ in range(1, 6):
        expected = Memory.objects.get(pk=memory.id).content_sha256

        def update(i, expected=expected, round_=round_):
            return clients[i].beta.memory_stores.memories.update(
                memory.id,
                memory_store_id=str(private_store.pk),
                content=f"round {round_} by {i}",
                precondition={"type": "content_sha256", "content_sha256": expected},
            )

        results = race(2, update)
        winners = [r for r in results if not isinstance(r, Exception)]
        losers = [r for r in results if isinstance(r, Exception)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert isinstance(losers[0], anthropic.ConflictError)
        assert losers[0].type == "memory_precondition_failed_error"
        assert Memory.objects.get(pk=memory.id).current_version_id == uuid.UUID(winners[0].memory_version_id)
    lineage = list(Version.objects.filter(memory_id=memory.id).order_by("created_at"))
    assert [v.operation for v in lineage] == ["created"] + ["modified"] * 5
    assert len({v.content for v in lineage}) == 6  # no version lost or duplicated


def test_parallel_creates_of_overlapping_paths_leave_exactly_one(sdk_for, owner, private_store):
    clients = [sdk_for(owner) for _ in range(6)]
    paths = ["/a", "/a/b", "/a/b/c.md", "/a/b/c.md/d", "/a", "/a/b"]  # every pair overlaps

    def create(i):
        return clients[i].beta.memory_stores.memories.create(str(private_store.pk), path=paths[i], content=str(i))

    results = race(6, create)
    created = [r for r in results if not isinstance(r, Exception)]
    conflicts = [r for r in results if isinstance(r, anthropic.ConflictError)]
    assert len(created) == 1 and len(conflicts) == 5
    assert all(c.type == "memory_path_conflict_error" for c in conflicts)
    private_store.refresh_from_db()
    assert private_store.memory_count == 1 == Memory.objects.count() == Version.objects.count()
