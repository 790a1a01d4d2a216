"""Fixtures for `memories-worker` (SPEC §5 "The self-hosted worker"): the real console script as a subprocess
against pytest-django's live server, with a temporary mount root (no Docker engine here).

`worker(agent_source, **options)` writes the agent script, starts `memories-worker run --once … -- python
agent.py` and returns a `WorkerRun`; the agent and the test coordinate through marker files in the work
directory (`agent.say(name)` / `run.wait_for(name)`, `run.tell(name)` / `agent.wait(name)`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent.conftest import (  # noqa: F401  (the cast: owner, environment, key, stores, sessions)
    api_url,
    client_for,
    env_key,
    environment,
    key_sdk,
    make_session,
    notes_store,
    owner_token,
)

WORKER = Path(sys.executable).with_name("memories-worker")


def left_in(mounts: Path) -> list[str]:
    """What is in a mount root but its marker, which stays for good (`worker.mountroot.ROOT_MARKER`)."""
    from worker.mountroot import ROOT_MARKER

    return sorted(p.name for p in mounts.iterdir() if p.name != ROOT_MARKER)


# What every agent script starts with: coordination helpers and the mount paths from the system context.
AGENT_PRELUDE = """
import json, os, sys, time
from pathlib import Path

WORK = Path.cwd()

def say(name, text=""):
    (WORK / (name + ".tmp")).write_text(text)
    os.replace(WORK / (name + ".tmp"), WORK / name)

def wait(name, timeout=60):
    deadline = time.monotonic() + timeout
    while not (WORK / name).exists():
        if time.monotonic() > deadline:
            sys.exit("timed out waiting for " + name)
        time.sleep(0.05)

MOUNTS = Path(os.environ["MOUNT_ROOT"])
"""


@dataclass
class WorkerRun:
    """A running `memories-worker run --once`: its process, work directory, mount root and output files."""

    process: subprocess.Popen
    workdir: Path
    mounts: Path
    stdout: Path
    stderr: Path

    def wait_for(self, name: str, timeout: float = 60) -> str:
        """Wait for the agent's marker file `name` and return its text."""
        deadline = time.monotonic() + timeout
        path = self.workdir / name
        while not path.exists():
            if self.process.poll() is not None:
                pytest.fail(f"the worker exited ({self.process.returncode}) before {name}:\n{self.log()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {name}:\n{self.log()}")
            time.sleep(0.05)
        return path.read_text()

    def wait_log(self, text: str, timeout: float = 60) -> None:
        """Wait until the worker's stderr contains `text`."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {text!r} in the worker's log:\n{self.log()}")
            time.sleep(0.1)

    def tell(self, name: str) -> None:
        (self.workdir / name).write_text("")

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def finish(self, timeout: float = 90) -> dict:
        """Wait for the worker to exit (status 0) and return its one item summary."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"the worker did not exit within {timeout}s:\n{self.log()}")
        assert self.process.returncode == 0, self.log()
        lines = [line for line in self.stdout.read_text().splitlines() if line.strip()]
        assert len(lines) == 1, (lines, self.log())
        summary = json.loads(lines[0])
        # strict JSON: no lone surrogate escape, which strict parsers refuse (an undecodable file name; helper-99)
        json.dumps(summary, ensure_ascii=False).encode("utf-8")
        return summary


@pytest.fixture
def worker(live_server, environment, env_key, tmp_path):  # noqa: F811  (the imported fixtures)
    """``start(agent_source, sync_interval=5, name="worker", **options) -> WorkerRun``; every worker is killed
    afterwards. Every worker shares the mount root `<tmp>/mnt`; one with another `name` gets its own work
    directory, agent script and output files (`<tmp>/<name>-work`, `<tmp>/<name>.out`, …)."""
    started: list[WorkerRun] = []

    def start(agent_source: str, *, sync_interval: float = 5, name: str = "worker", **options) -> WorkerRun:
        workdir, mounts = tmp_path / ("work" if name == "worker" else f"{name}-work"), tmp_path / "mnt"
        script = tmp_path / ("agent.py" if name == "worker" else f"{name}-agent.py")
        script.write_text(AGENT_PRELUDE + textwrap.dedent(agent_source))
        args = [
            str(WORKER),
            "run",
            "--environment",
            str(environment.pk),
            "--api-url",
            live_server.url,
            "--mount-root",
            str(mounts),
            "--workdir",
            str(workdir),
            "--once",
            "--sync-interval",
            str(sync_interval),
        ]
        for name, value in options.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        args += ["--", sys.executable, str(script)]
        env = {**os.environ, "MEMORIES_ENVIRONMENT_KEY": env_key.secret, "MOUNT_ROOT": str(mounts)}
        stdout, stderr = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(args, env=env, stdout=out, stderr=err)
        run = WorkerRun(process=process, workdir=workdir, mounts=mounts, stdout=stdout, stderr=stderr)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.process.poll() is None:
            run.process.send_signal(signal.SIGKILL)
            run.process.wait()
