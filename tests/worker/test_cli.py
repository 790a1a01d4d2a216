"""`memories-worker run`'s options: seconds are finite numbers in range, refused before anything starts; the
environment key is taken from the environment without leaving a copy a child can read."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest

from tests.interrupted import run_with_import_interrupted
from worker.cli import main


def option_of(name: str) -> click.Option:
    return next(param for param in main.commands["run"].params if name in param.opts)


@pytest.mark.parametrize("name", ["--grace", "--flush-timeout", "--sync-interval", "--delete-after"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e9"])
def test_a_number_of_seconds_that_is_not_finite_or_beyond_a_day_is_refused(name, value):
    """`click.FloatRange` let `nan` and `inf` through: `--grace nan` made every wait `nan` (a breaker)."""
    option = option_of(name)
    with pytest.raises(click.BadParameter):
        option.type.convert(value, option, None)


@pytest.mark.parametrize(("name", "value"), [("--grace", "0"), ("--grace", "2.5"), ("--flush-timeout", "86400")])
def test_finite_seconds_in_range_are_taken(name, value):
    option = option_of(name)
    assert option.type.convert(value, option, None) == float(value)


TAKE_KEY = """
import ctypes, os, subprocess, sys
from worker.cli import take_environment_key
key = take_environment_key()
child = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], capture_output=True, check=True).stdout
print(key, "MEMORIES_ENVIRONMENT_KEY" in os.environ, b"menv_" in child, b"KEEP=kept" in child,
      ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
"""


def test_the_environment_key_is_taken_and_leaves_no_copy_a_child_can_read():
    """An agent read the key from `/proc/$PPID/environ` and claimed other sessions' work (a breaker)."""
    env = {"PATH": os.environ["PATH"], "KEEP": "kept", "MEMORIES_ENVIRONMENT_KEY": "menv_" + "k" * 43}
    out = subprocess.run([sys.executable, "-c", TAKE_KEY], env=env, capture_output=True, text=True, check=True)
    key, still_set, child_saw_key, child_saw_other, dumpable = out.stdout.split()
    assert key == env["MEMORIES_ENVIRONMENT_KEY"]
    assert (still_set, child_saw_key, child_saw_other, dumpable) == ("False", "False", "True", "0")


def test_a_ctrl_c_while_the_worker_loads_is_one_line_not_a_traceback():
    """The console script imported `worker.cli` (the anthropic SDK: about half a second) before any handler:
    a Ctrl-C then was a KeyboardInterrupt traceback. Nothing is claimed yet: one line, exit 0 (a stopped worker)."""
    from tests.worker.conftest import WORKER

    assert "from worker.entry import main" in WORKER.read_text()  # what `pip install` made of pyproject.toml
    done = run_with_import_interrupted(
        "worker.cli", "import sys\nfrom worker.entry import main\nsys.exit(main())\n", "run"
    )
    assert (done.returncode, done.stderr) == (0, b"memories-worker: interrupted while starting; nothing was claimed.\n")
