"""Run test code in parallel threads, each on its own database connection (real PostgreSQL concurrency)."""

from __future__ import annotations

import contextlib
import threading

from django.db import connections


def run_threads(works: dict, *, timeout: float = 30) -> dict[str, BaseException]:
    """Run every ``name → callable`` of `works` in a thread named `name` (own connections, closed after);
    wait for all, at most `timeout` seconds each. Returns the exceptions raised, by name. Fails the test
    when a thread is still running (a lock wait that never ended)."""
    errors: dict[str, BaseException] = {}

    def run(name, work):
        try:
            work()
        except BaseException as exc:  # reported to the test
            errors[name] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(name, work), name=name) for name, work in works.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread is still waiting"
    return errors


@contextlib.contextmanager
def held_past_the_lock_budget(lock, *, budget: str = "200ms"):
    """Inside the block, another thread holds what `lock()` locks (in its own open transaction) and this
    thread's connection gives up waiting for a lock after `budget` — as the server's requests do after
    `DB_LOCK_TIMEOUT`. On exit the holder commits and the budget is reset."""
    from django.db import connection, transaction

    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                lock()
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [budget])
        yield
    finally:
        release.set()
        holder.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
