"""The ``serial`` marker under pytest-xdist: a test marked so runs while no other test does (tests/conftest.py
imports the hook; `tests/foundation/test_serial_marker.py` proves it with a run of its own). Plain pytest: no
Django here, so a test run of its own can use it too."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest


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
