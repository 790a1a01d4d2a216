"""`bin/test` runs once per database: a second run against the same database refuses at once, naming the
lock, instead of dropping the first run's test database under it (two runs in one checkout collided)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
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
