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
