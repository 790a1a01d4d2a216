"""The Django threads' pool (config/threads.py): the thread idle the shortest time takes the next work,
at most `max_workers` threads, a FIFO backlog, ThreadPoolExecutor's Future semantics (issue 17)."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from config.threads import LifoThreadPool


@pytest.fixture
def make_pool():
    """`make_pool(max_workers)`: a LifoThreadPool shut down after the test."""
    pools = []

    def make(max_workers: int) -> LifoThreadPool:
        pools.append(LifoThreadPool(max_workers=max_workers, thread_name_prefix="t"))
        return pools[-1]

    yield make
    for pool in pools:
        pool.shutdown()


def _burst(pool, n: int) -> None:
    """Make `pool` start `n` threads: n works that wait for each other."""
    gate = threading.Barrier(n + 1)
    works = [pool.submit(gate.wait, 10) for _ in range(n)]
    gate.wait(10)
    concurrent.futures.wait(works, timeout=10)


def test_after_a_burst_one_client_keeps_using_the_thread_idle_the_shortest(make_pool):
    """After 4 threads ran at once, 40 works one after another all run on one thread (the executor's
    shared queue rotated them over all four: each its own database connection and cold caches)."""
    pool = make_pool(4)
    _burst(pool, 4)
    names = {pool.submit(lambda: threading.current_thread().name).result(timeout=10) for _ in range(40)}
    assert len(names) == 1
    assert len(pool._threads) == 4


def test_work_beyond_max_workers_waits_in_order_and_no_thread_is_added(make_pool):
    pool = make_pool(2)
    release, order = threading.Event(), []
    blockers = [pool.submit(release.wait, 10) for _ in range(2)]
    queued = [pool.submit(order.append, i) for i in range(6)]
    assert not any(work.done() for work in queued)
    release.set()
    concurrent.futures.wait(blockers + queued, timeout=10)
    assert order == list(range(6))
    assert len(pool._threads) == 2


def test_work_cancelled_before_a_thread_took_it_never_runs_and_errors_reach_the_future(make_pool):
    pool = make_pool(1)
    release, ran = threading.Event(), []
    busy = pool.submit(release.wait, 10)
    queued = pool.submit(ran.append, "queued")
    assert queued.cancel()
    failing = pool.submit(lambda: 1 / 0)
    release.set()
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=10)
    assert busy.result(timeout=10) is True
    assert queued.cancelled() and ran == []


def test_shutdown_cancels_the_backlog_ends_the_threads_and_refuses_new_work():
    pool = LifoThreadPool(max_workers=1)
    release = threading.Event()
    busy = pool.submit(release.wait, 10)
    queued = pool.submit(lambda: "never")
    threading.Timer(0.2, release.set).start()
    pool.shutdown(wait=True, cancel_futures=True)
    assert busy.result(timeout=0) is True and queued.cancelled()
    assert not any(thread.is_alive() for thread in pool._threads)
    with pytest.raises(RuntimeError):
        pool.submit(print)


def test_many_submitters_at_once_get_every_result_within_the_thread_bound(make_pool):
    """8 threads submit 300 works each at the same time: all 2,400 run exactly once, on at most 3 threads."""
    pool = make_pool(3)
    counts, lock = {}, threading.Lock()

    def record(key):
        with lock:
            counts[key] = counts.get(key, 0) + 1
        return key

    answers = {}

    def submitter(n):
        works = [pool.submit(record, (n, i)) for i in range(300)]
        answers[n] = [work.result(timeout=30) for work in works]

    threads = [threading.Thread(target=submitter, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(counts) == 2400 and set(counts.values()) == {1}
    assert answers == {n: [(n, i) for i in range(300)] for n in range(8)}
    assert len(pool._threads) <= 3


def test_a_thread_that_fails_to_start_leaves_the_pool_its_full_bound(make_pool, monkeypatch):
    """`Thread.start` can fail (RuntimeError "can't start new thread": a pids limit, memory). The submit
    raises, but the pool must not count the thread that never ran: before, it stayed in `_threads`, so a
    1-thread pool queued every later work forever (every request a 503 after REQUEST_TIMEOUT) and the
    atexit `shutdown(wait=True)` raised "cannot join thread before it is started". ThreadPoolExecutor only
    counts a thread once it started."""
    pool = make_pool(1)
    start, failures = threading.Thread.start, []

    def start_once_failing(thread):
        if not failures:
            failures.append(thread.name)
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_once_failing)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        pool.submit(lambda: "lost")
    assert pool.submit(lambda: "served").result(timeout=5) == "served"
    pool.shutdown(wait=True)  # joins only threads that started


def test_keyed_slots_bound_the_total_and_each_key():
    from config.threads import KeyedSlots

    limits = {"all": 3, "key": 2}
    slots = KeyedSlots(lambda: limits["all"], lambda: limits["key"])
    assert [slots.take("a"), slots.take("a"), slots.take("a")] == [None, None, "key"]
    assert [slots.take("b"), slots.take("c")] == [None, "all"]
    assert (slots.held, slots.held_by("a"), slots.held_by("c")) == (3, 2, 0)
    slots.release("a")
    assert slots.take("c") is None and slots.take("a") == "all"
    for key in ("a", "b", "c"):
        slots.release(key)
    assert (slots.held, slots.held_by("a")) == (0, 0)
    limits["key"] = 1  # read on every take
    assert [slots.take("a"), slots.take("a")] == [None, "key"]
    assert [slots.take(None), slots.take(None), slots.take(None)] == [None, None, "all"]  # no key: the total only
    slots.release(None)
    assert (slots.held, slots.held_by("a")) == (2, 1)
