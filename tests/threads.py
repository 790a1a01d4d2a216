"""Run test code in parallel threads, each on its own database connection (real PostgreSQL concurrency)."""

from __future__ import annotations

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
