"""The ``serial`` marker under pytest-xdist: a test marked so runs while no other test does (tests/conftest.py
imports the hook; `tests/foundation/test_serial_marker.py` proves it with a run of its own). Plain pytest: no
Django here, so a test run of its own can use it too."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

_run_lock: list = []  # the open lock file of this worker's run, held until the process exits


def pytest_configure(config):
    """An xdist worker of `bin/test` holds the run's lock (``MEMORIES_TEST_RUN_LOCK``) shared until it exits,
    as its controller does: a run whose controller was killed (SIGTERM ends it at once) goes on in its
    workers for seconds — the current tests, then each worker drops its test database — and a new `bin/test`
    against the same database must wait for that (it refuses while anyone holds the lock). Never released
    here: the kernel releases it when the worker's process ends, after its last teardown."""
    path = os.environ.get("MEMORIES_TEST_RUN_LOCK")
    if path and "PYTEST_XDIST_WORKER" in os.environ and not _run_lock:
        held = open(path, "a")  # noqa: SIM115 (kept open for the process's life)
        fcntl.flock(held, fcntl.LOCK_SH)
        _run_lock.append(held)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Under `bin/test`'s parallel workers (pytest-xdist), a test marked ``serial`` runs while no other test
    does: it measures time, a ratio or how work spreads over server processes, which a test running beside
    it on the same cores would skew. A readers–writer lock over files shared by the run's workers: every
    other test holds it shared, a serial test exclusively; a turnstile taken first keeps a waiting serial
    test from being overtaken by the next shared holders. Without xdist (``-n 0``, plain ``pytest``) it does
    nothing.

    Held around the whole test protocol — set-up (module and session fixtures the item starts, a server, a
    template cluster, included), call and teardown — and outside pytest-timeout's timer, whose hook this one
    wraps: waiting for the other worker's test (once 160 s, the schemathesis run) counted against a chaos
    module's 150-s limit and failed a serial test before it began (a tester).
    """
    basetemp = getattr(item.config.option, "basetemp", None)
    if "PYTEST_XDIST_WORKER" not in os.environ or not basetemp:
        return (yield)
    shared = Path(basetemp).parent  # xdist gives each worker <run's basetemp>/popen-gwK
    alone = item.get_closest_marker("serial") is not None
    with open(shared / "serial.turnstile", "a") as turnstile, open(shared / "serial.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
