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
from tests.serial import serial_tests_run_alone  # noqa: F401

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


def test_a_serial_test_overlaps_no_other_while_the_others_overlap_each_other(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    plain = "\n".join(f"def test_plain_{i}():\n    record('plain{i}')\n" for i in range(8))
    (suite / "test_plain.py").write_text(TESTS.format(pause=0.3, tests=plain))
    serial = "@pytest.mark.serial\ndef test_alone():\n    record('serial')\n"
    (suite / "test_serial.py").write_text(TESTS.format(pause=0.8, tests=serial))
    record = tmp_path / "record.txt"
    env = {**os.environ, "RECORD": str(record), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run in a worker
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:django",
            "-p",
            "no:randomly",
            "--basetemp",
            str(tmp_path / "base"),
            str(suite),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    spans = {name: (float(a), float(b)) for name, a, b in (line.split() for line in record.read_text().splitlines())}
    assert len(spans) == 9
    alone = spans.pop("serial")
    assert not [name for name, (a, b) in spans.items() if a < alone[1] and alone[0] < b], (alone, spans)
    ordered = sorted(spans.values())
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered)), spans  # two workers ran
