"""A test marked ``serial`` runs alone under `bin/test`'s parallel workers (tests/serial.py): a run of its own
with two xdist workers, one serial test among tests that sleep, records when each ran."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import pytest
from tests.serial import pytest_runtest_protocol  # noqa: F401

def pytest_configure(config):
    config.addinivalue_line("markers", "serial: runs alone")
"""

TESTS = """
import os, time
import pytest

def record(name):
    started = time.monotonic()
    time.sleep({pause})
    with open(os.environ["RECORD"], "a") as out:
        out.write(f"{{name}} {{started}} {{time.monotonic()}}\\n")

{tests}
"""


def _run(tmp_path, files: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Run `files` (name → text, beside CONFTEST) with two xdist workers; the spans each test recorded."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    for name, text in files.items():
        (suite / name).write_text(text)
    record = tmp_path / "record.txt"
    env = {**os.environ, "RECORD": str(record), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run in a worker
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "-p", "no:django",
            "--basetemp", str(tmp_path / "base"), str(suite),
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return {name: (float(a), float(b)) for name, a, b in (line.split() for line in record.read_text().splitlines())}


def test_a_serial_test_overlaps_no_other_while_the_others_overlap_each_other(tmp_path):
    plain = "\n".join(f"def test_plain_{i}():\n    record('plain{i}')\n" for i in range(8))
    serial = "@pytest.mark.serial\ndef test_alone():\n    record('serial')\n"
    spans = _run(
        tmp_path,
        {
            "test_plain.py": TESTS.format(pause=0.3, tests=plain),
            "test_serial.py": TESTS.format(pause=0.8, tests=serial),
        },
    )
    assert len(spans) == 9
    alone = spans.pop("serial")
    assert not [name for name, (a, b) in spans.items() if a < alone[1] and alone[0] < b], (alone, spans)
    ordered = sorted(spans.values())
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered)), spans  # two workers ran


def test_waiting_for_the_lock_does_not_count_against_a_tests_timeout(tmp_path):
    """A serial test that waits behind a long test on the other worker must not time out before it begins: a
    chaos test with a 150-s limit did, behind the 160-s schemathesis run (a tester)."""
    long = "def test_long():\n    record('long')\n"
    quick = "\n".join(f"def test_quick_{i}():\n    record('quick{i}')\n" for i in range(3))
    serial = "@pytest.mark.serial\n@pytest.mark.timeout(1)\ndef test_alone():\n    record('serial')\n"
    spans = _run(
        tmp_path,
        {
            "test_a_long.py": TESTS.format(pause=2.5, tests=long),
            "test_b_quick.py": TESTS.format(pause=0.2, tests=quick + "\n" + serial),
        },
    )
    assert spans["serial"][0] >= spans["long"][1], spans  # it waited for the long test, then ran and passed
