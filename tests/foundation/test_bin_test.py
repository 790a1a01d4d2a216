"""`bin/test` runs once per database: a second run against the same database refuses at once, naming the
lock, instead of dropping the first run's test database under it (two runs in one checkout collided)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) is not installed")


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "bin" / "test"), "--version"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_second_bin_test_against_the_same_database_refuses_and_a_lone_one_runs(tmp_path):
    url = f"postgres://nobody@127.0.0.1:1/lock-probe-{uuid.uuid4().hex}"  # never connected to: --version
    env = {**os.environ, "DATABASE_URL": url, "TMPDIR": str(tmp_path)}
    lock = tmp_path / f"memories-test-{hashlib.sha256(url.encode()).hexdigest()[:16]}.lock"

    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a first bin/test's pytest holds it
        refused = _run(env)
        other = _run({**env, "DATABASE_URL": url + "-other"})  # another database: not held up

    assert refused.returncode == 75 and "another bin/test is running against this database" in refused.stderr
    assert str(lock) in refused.stderr and "pytest" not in refused.stdout
    assert other.returncode == 0 and "pytest" in other.stdout + other.stderr
    alone = _run(env)  # released: it runs
    assert alone.returncode == 0 and "pytest" in alone.stdout + alone.stderr


def test_a_run_whose_workers_still_hold_the_lock_refuses(tmp_path):
    """A killed run's xdist workers hold the second lock shared (tests/serial.py) while they finish."""
    url = f"postgres://nobody@127.0.0.1:1/lock-probe-{uuid.uuid4().hex}"
    env = {**os.environ, "DATABASE_URL": url, "TMPDIR": str(tmp_path)}
    lock = tmp_path / f"memories-test-{hashlib.sha256(url.encode()).hexdigest()[:16]}.lock.workers"

    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # as a worker of a run whose controller is gone
        refused = _run(env)
    assert refused.returncode == 75 and "another bin/test is running against this database" in refused.stderr
    assert _run(env).returncode == 0


CONFTEST = 'pytest_plugins = ["tests.serial"]\n'

SLEEPER = """
import os, time

def test_{n}():
    with open(os.path.join(os.environ["PIDS"], str(os.getpid())), "w"):
        pass
    time.sleep(6)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_sigterm_to_bin_test_keeps_the_database_locked_until_its_workers_are_gone(tmp_path):
    """SIGTERM ends pytest's controller at once, and its workers go on with their tests (and would drop their
    test databases): a second run started then is refused until the last worker has exited."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text(CONFTEST)
    for n in range(2):
        (suite / f"test_sleep_{n}.py").write_text(SLEEPER.format(n=n))
    pids = tmp_path / "pids"
    pids.mkdir()
    url = f"postgres://nobody@127.0.0.1:1/lock-probe-{uuid.uuid4().hex}"
    env = {**os.environ, "DATABASE_URL": url, "TMPDIR": str(tmp_path), "PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "DJANGO_SETTINGS_MODULE", "TEST_WORKERS"):
        env.pop(name, None)
    first = subprocess.Popen(
        [
            str(ROOT / "bin" / "test"), "-n", "2", "-p", "no:django", "-p", "no:cacheprovider",
            "-c", str(suite / "pytest.ini"), "--rootdir", str(suite), str(suite),
        ],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(list(pids.iterdir())) < 2:
            assert first.poll() is None and time.monotonic() < deadline, "the two workers never started"
            time.sleep(0.05)
        workers = [int(p.name) for p in pids.iterdir()]
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=10)
        assert all(_alive(pid) for pid in workers)  # the controller is gone, its workers are not

        refused = _run(env)
        assert refused.returncode == 75, refused.stdout + refused.stderr
        assert any(_alive(pid) for pid in workers)  # refused while a worker was still there

        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "the orphaned workers never exited"
            time.sleep(0.1)
        assert _run(env).returncode == 0
    finally:
        first.kill()
        for pid in [int(p.name) for p in pids.iterdir()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
