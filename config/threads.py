"""The Django threads of a server worker: a pool that hands each request to the thread idle the shortest
time (issue 17; docs/decisions.md, "The Django threads: last idle, first busy").

`concurrent.futures.ThreadPoolExecutor` queues work on one queue that every idle thread waits on, so
consecutive requests rotate over all the threads a burst once started: after 16 clients, one client's
notes cost ~10 % more server CPU (each thread its own database connection, prepared statements, cursors
and cold caches). Here an idle thread waits on a lock of its own, on a stack: a request goes to the thread
that went idle last, so a quiet server keeps using the one or two threads that are already warm, and the
others wait with their connections unused.

The interface is the subset of `ThreadPoolExecutor` the front uses (`submit`, `shutdown`), with the same
`concurrent.futures.Future` results: `cancel()` before a thread took the work means it never runs.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

_Work = tuple[concurrent.futures.Future, Callable[..., Any], tuple, dict]


class _Idle:
    """One idle thread's wake-up: `wake` is released once `work` is set (None: the pool shut down)."""

    __slots__ = ("wake", "work")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.work: _Work | None = None


class LifoThreadPool:
    """At most `max_workers` threads, started on demand (one per submit while none is idle), never stopped
    before `shutdown`. `submit` hands the work to the thread that went idle last; with every thread busy,
    work waits in a FIFO backlog that a thread drains before it goes idle. Thread-safe.

    max_workers: the thread count bound (≥ 1). thread_name_prefix: threads are named ``<prefix>_<n>``.
    At interpreter exit the pool is shut down and waits for the work already running, as
    ThreadPoolExecutor's threads are joined.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "pool"):
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._idle: list[_Idle] = []  # a stack: the last one appended went idle last
        self._backlog: collections.deque[_Work] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._shutdown = False
        atexit.register(self.shutdown, wait=True)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run ``fn(*args, **kwargs)`` on a pool thread; returns its Future. Raises RuntimeError after
        `shutdown`."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        work = (future, fn, args, kwargs)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                idle = self._idle.pop()
                idle.work = work
                idle.wake.release()
                return future
            if len(self._threads) >= self._max_workers:
                self._backlog.append(work)
                return future
            thread = threading.Thread(
                target=self._serve, args=(work,), name=f"{self._prefix}_{len(self._threads)}", daemon=True
            )
            # Started under the lock and counted only once started: a thread that cannot start (RuntimeError
            # "can't start new thread") must not take a place of the bound, nor be joined by `shutdown`.
            # The new thread needs the lock only after its first work, so this cannot deadlock.
            thread.start()
            self._threads.append(thread)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more work; idle threads end, busy ones after the backlog (cancelled first with
        `cancel_futures`). With `wait`, return once every thread has ended."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._backlog:
                    self._backlog.popleft()[0].cancel()
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for waiting in idle:
            waiting.wake.release()  # with no work: the thread ends
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _serve(self, work: _Work | None) -> None:
        me = _Idle()
        while work is not None:
            future, fn, args, kwargs = work
            work = None
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # delivered to the Future, as ThreadPoolExecutor does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            with self._lock:
                if self._backlog:
                    work = self._backlog.popleft()
                    continue
                if self._shutdown:
                    return
                self._idle.append(me)
            me.wake.acquire()
            work, me.work = me.work, None


class Slots:
    """How many of one kind of work a process does at once, at most `limit()` (read on every `take`, so a
    changed setting applies at once): the streamed answers of config/asgi.py (`STREAM_THREADS`), the
    waiting work polls of sessions/services/work.py (`POLL_WAITERS`). Thread-safe."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Slots taken and not released."""
        return self._held

    def take(self) -> bool:
        """Take a slot: True, or False (nothing taken) when `limit()` are held already."""
        with self._lock:
            if self._held >= self._limit():
                return False
            self._held += 1
            return True

    def release(self) -> None:
        """Give back a slot `take` returned True for."""
        with self._lock:
            self._held -= 1


# The attribute a view sets on its StreamingHttpResponse to name whose stream it is (the export: the user), the
# key of `KeyedSlots` in config/asgi.py.
STREAM_KEY = "memories_stream_key"


class KeyedSlots:
    """`Slots` with a second limit per key: at most `limit()` taken in all and `per_key()` under one key (a
    user), so one key cannot take every slot — the streamed answers of config/asgi.py (`STREAM_THREADS`,
    `STREAM_THREADS_PER_USER`: one user's stalled exports kept everyone else's refused, a breaker). Both
    limits are read on every `take`. Thread-safe."""

    def __init__(self, limit: Callable[[], int], per_key: Callable[[], int]) -> None:
        self._limit, self._per_key = limit, per_key
        self._held = 0
        self._by_key: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Slots taken and not released, under every key."""
        return self._held

    def held_by(self, key: str) -> int:
        """Slots taken under `key` and not released."""
        return self._by_key.get(key, 0)

    def take(self, key: str | None) -> str | None:
        """Take a slot under `key` (None: no key, only the total applies): None, or why nothing was taken —
        ``"all"`` when `limit()` are held in all, ``"key"`` when `per_key()` are held under `key`."""
        with self._lock:
            if self._held >= self._limit():
                return "all"
            if key is not None and self._by_key.get(key, 0) >= self._per_key():
                return "key"
            self._held += 1
            if key is not None:
                self._by_key[key] = self._by_key.get(key, 0) + 1
            return None

    def release(self, key: str | None) -> None:
        """Give back a slot `take` took under `key`."""
        with self._lock:
            self._held -= 1
            if key is None:
                return
            left = self._by_key[key] - 1
            if left:
                self._by_key[key] = left
            else:
                del self._by_key[key]
