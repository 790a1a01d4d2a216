"""`worker.agent_output.AgentOutput` on its own: the agent's pipes, read and logged by the worker (no server)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from worker.agent_output import AgentOutput


class SlowSink(logging.Handler):
    """Keeps every record's text, taking `delay` seconds per record: a worker stderr read slowly (ssh, tee)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay, self.texts = delay, []

    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(self.delay)
        self.texts.append((record.levelname, record.getMessage()))


@pytest.fixture
def sink():
    """``make(delay) -> SlowSink`` attached to the `memories_worker.agent` logger for the test."""
    logger, made = logging.getLogger("memories_worker.agent"), []
    level = logger.level

    def make(delay: float) -> SlowSink:
        handler = SlowSink(delay)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        made.append(handler)
        return handler

    yield make
    for handler in made:
        logger.removeHandler(handler)
    logger.setLevel(level)


def run_agent(source: str) -> AgentOutput:
    output = AgentOutput()
    process = subprocess.Popen(
        [sys.executable, "-c", source], stdout=output.stdout, stderr=output.stderr, start_new_session=True
    )
    output.started()
    process.wait(timeout=60)
    return output


def test_a_slow_stderr_is_no_silence_and_drops_nothing(sink):
    """The reader stamped "last read" when a chunk came in, before logging its lines: logging a chunk for
    longer than the silence allowed (a slow stderr) stopped the reading, dropped the rest and blamed a
    process that left the agent's group (helper-104). Silence is only time spent waiting on empty pipes."""
    slow = sink(0.0002)
    lines = 12_000  # one 24 KB read: about 3 s to log at this sink's pace
    output = run_agent(f"import os\nos.write(1, b'x\\n' * {lines} + b'LAST\\n')")
    started = time.monotonic()
    output.close(0.5, 60.0)
    assert time.monotonic() - started > 0.5  # the logging really outlasted the silence allowed
    assert slow.texts.count(("INFO", "stdout: x")) == lines and slow.texts[-1] == ("INFO", "stdout: LAST")
    assert [text for level, text in slow.texts if level == "WARNING"] == []


def test_a_pipe_held_silent_is_given_up_after_the_silence_with_a_warning(sink, tmp_path):
    """A process that left the agent's process group and holds the pipes without writing: the reading ends
    after the silence allowed, saying so."""
    logged = sink(0)
    pid_file = tmp_path / "child.pid"
    source = (
        "import pathlib, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(child.pid))\n"
        "print('bye', flush=True)\n"
    )
    output = run_agent(source)
    started = time.monotonic()
    try:
        output.close(0.5, 60.0)
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert 0.5 <= time.monotonic() - started < 10
    assert ("INFO", "stdout: bye") in logged.texts
    warnings = [text for level, text in logged.texts if level == "WARNING"]
    assert warnings == [
        "no longer reading the agent's stdout and stderr: a process that left its process group still holds "
        "them; what it writes from now on is not logged"
    ]


def test_the_time_allowed_bounds_a_slow_stderr_and_the_other_streams_last_lines_are_kept(sink):
    """Once the time allowed had passed, the reader still logged the whole read it held (65,536 lines: 48 s to
    a slow stderr), and the agent's last stderr line, queued behind a flood on stdout, was lost (helper-106).
    It stops within a record of the limit, then logs the last lines each pipe holds."""
    slow = sink(0.0002)
    source = (
        "import fcntl, os\n"
        "fcntl.fcntl(1, 1031, 1 << 20)  # F_SETPIPE_SZ\n"
        "data = memoryview(b'\\n' * 200_000)\n"
        "while data:\n"
        "    data = data[os.write(1, data):]\n"
        "os.write(2, b'Traceback: the last words\\n')\n"
    )
    output = run_agent(source)
    started = time.monotonic()
    output.close(0.5, 1.0)
    assert time.monotonic() - started < 5
    assert ("INFO", "stderr: Traceback: the last words") in slow.texts
    warnings = [text for level, text in slow.texts if level == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith(
        "stopped reading the agent's stdout and stderr after the time allowed"
    )


def test_a_carriage_return_right_after_a_full_piece_waits_for_its_newline(sink):
    """`y` × 16,384 then `\\r`, and the `\\n` in a later write: the `\\r` was left alone after two full pieces
    and became an empty record when the `\\n` came (helper-106). A `\\r\\n` ending is one line end."""
    logged = sink(0)
    output = run_agent("import os, time\nos.write(1, b'y' * 16384 + b'\\r')\ntime.sleep(0.3)\nos.write(1, b'\\n')")
    output.close(0.5, 10.0)
    assert logged.texts == [("INFO", "stdout: " + "y" * 8192)] * 2
