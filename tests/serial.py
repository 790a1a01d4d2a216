"""The ``serial`` marker under pytest-xdist: a test marked so runs while no other test does (tests/conftest.py
uses the fixture; `tests/foundation/test_serial_marker.py` proves it with a run of its own). Plain pytest: no
Django here, so a test run of its own can use it too."""

from __future__ import annotations

import fcntl
import os

import pytest


@pytest.fixture(autouse=True)
def serial_tests_run_alone(request, tmp_path_factory):
    """Under `bin/test`'s parallel workers (pytest-xdist), a test marked ``serial`` runs while no other test
    does: it measures time, a ratio or how work spreads over server processes, which a test running beside
    it on the same cores would skew. A readers–writer lock over files shared by the run's workers: every
    other test holds it shared, a serial test exclusively; a turnstile taken first keeps a waiting serial
    test from being overtaken by the next shared holders. Without xdist (``-n 0``, plain ``pytest``) it does
    nothing. Module- and session-scoped fixtures (a server, a template cluster) are set up before it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, the parent of every worker's popen-gwK/
    alone = request.node.get_closest_marker("serial") is not None
    with open(shared / "serial.turnstile", "a") as turnstile, open(shared / "serial.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
