"""The README runs as pasted (issue 19): every ```sh and ```python block, in order, in one bash shell.

The server is a fresh `bin/serve` in a copy of the checkout (its own `.data/`, so its own embedded
PostgreSQL, created from nothing; `.venv` is shared through a symlink), on a free port: the one textual
change made to the README's blocks is `127.0.0.1:8000` → that port. A block preceded by
``<!-- readme-test: skip — reason -->`` is not run (docs/decisions.md, "The README is tested"). A failure
names the block and the README line of the failing command. Afterwards the test stops `bin/serve` and
checks that it stopped the PostgreSQL it started, then starts it again to check the demo token survives.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from demo.server import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RUN_LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s*[—–-]\s*(?P<reason>\S.*?)\s*-->$")
MISPLACED = "a skip marker must sit right above a fence"
FENCE_OPEN = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
COPY_IGNORE = shutil.ignore_patterns(
    ".venv", ".data", ".git", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".hypothesis", "*.egg-info"
)


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, first content line (1-based, in README.md), text and skip reason."""

    number: int
    language: str
    line: int
    text: str
    skip: str | None


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of `text`, in order. Raises AssertionError for a skip marker that is not right
    above a fence or has no reason, and for an unclosed fence."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    pending_skip: tuple[int, str] | None = None
    while index < len(lines):
        line = lines[index]
        if "readme-test:" in line and line.lstrip().startswith("<!--"):
            match = SKIP.match(line.strip())
            assert match, f"README.md line {index + 1}: write `<!-- readme-test: skip — reason -->`"
            pending_skip = (index, match["reason"])
        opened = FENCE_OPEN.match(line)
        if opened:
            start = index + 1
            end = next((n for n in range(start, len(lines)) if lines[n].strip() == "```"), None)
            assert end is not None, f"README.md line {index + 1}: unclosed ``` fence"
            skip = pending_skip[1] if pending_skip and pending_skip[0] == index - 1 else None
            if pending_skip and skip is None:
                raise AssertionError(
                    f"README.md line {pending_skip[0] + 1}: a skip marker must sit right above a fence"
                )
            pending_skip = None
            blocks.append(
                Block(len(blocks) + 1, opened["lang"].lower(), start + 1, "\n".join(lines[start:end]) + "\n", skip)
            )
            index = end + 1
            continue
        index += 1
    assert pending_skip is None, f"README.md line {pending_skip[0] + 1}: {MISPLACED}"
    return blocks


def runnable(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.language in RUN_LANGUAGES and b.skip is None]


def build_script(blocks: list[Block], folder: Path, port: int) -> tuple[str, dict[int, tuple[Block, int]]]:
    """One bash script running `blocks` in order; returns it and {script line: (block, README line)}.

    Python blocks are written to files and run with `python` from the shell's PATH (the README puts
    `.venv/bin` first), so they see the shell's exported variables.
    """
    header = [
        "set -Eeu",  # no pipefail: `curl … | head` ends curl with SIGPIPE, as it would for a reader
        "trap 'echo \"__README_FAILED__ $LINENO\" >&2' ERR",
    ]
    lines = list(header)
    where: dict[int, tuple[Block, int]] = {}
    for block in blocks:
        text = block.text.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        lines.append(f"echo '__README_BLOCK__ {block.number} (README.md line {block.line})'")
        if RUN_LANGUAGES[block.language] == "python":
            path = folder / f"readme-block-{block.number}.py"
            path.write_text(text, encoding="utf-8")
            lines.append(f"python {path}")
            where[len(lines)] = (block, block.line)
            continue
        for offset, command in enumerate(text.splitlines()):
            lines.append(command)
            where[len(lines)] = (block, block.line + offset)
    return "\n".join(lines) + "\n", where


def test_the_readme_blocks_are_marked_consistently():
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    run = runnable(blocks)
    assert len(run) >= 10 and any(b.language == "python" for b in run)
    assert all(b.skip for b in blocks if b.language in RUN_LANGUAGES and "bin/serve" in b.text.split("#")[0])
    with pytest.raises(AssertionError, match="right above a fence"):
        readme_blocks("<!-- readme-test: skip — why -->\n\ntext\n```sh\nls\n```\n")
    with pytest.raises(AssertionError, match="skip — reason"):
        readme_blocks("<!-- readme-test: skip -->\n```sh\nls\n```\n")
    parsed = readme_blocks("a\n<!-- readme-test: skip — needs Docker -->\n```sh\ndocker ps\n```\n```sh\nls\n```\n")
    assert [(b.skip, b.line, b.text) for b in parsed] == [("needs Docker", 4, "docker ps\n"), (None, 7, "ls\n")]


def _clean_env(**extra: str) -> dict[str, str]:
    dropped = ("ROG_", "DATABASE_URL", "MEMORIES_", "DJANGO_", "PYTEST", "HOST", "PORT", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return {**env, **extra}


class Serve:
    """`bin/serve` of the copy, in the background, on `port`; `stop()` sends SIGTERM (as Ctrl-C would)."""

    def __init__(self, copy: Path, port: int):
        self.copy, self.port = copy, port
        self.log = copy / f"serve-{time.monotonic_ns()}.log"
        env = _clean_env(PORT=str(port), WEB_CONCURRENCY="1", GUNICORN_THREADS="4")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                ["bash", "bin/serve"], cwd=copy, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"bin/serve exited early:\n{self.output()}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.kill()
        raise AssertionError(f"bin/serve was not ready in 240 s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> str:
        if self.process.poll() is not None:
            return self.output()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"bin/serve did not stop on SIGTERM:\n{self.output()}") from None
        return self.output()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _bin_stop(where: Path) -> subprocess.CompletedProcess:
    """`bin/stop` of the checkout `where` is, or of its parent when `where` is its bin/ folder (then `./stop`)."""
    script = "./stop" if where.name == "bin" else "bin/stop"
    done = subprocess.run(["bash", script], cwd=where, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _embedded_status(copy: Path) -> str:
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "config.embedded_db", "status"],
        cwd=copy,
        env=_clean_env(MEMORIES_DATA_DIR=str(copy / ".data" / "pg")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A copy of the checkout without `.data/` (a fresh server) sharing `.venv`; its PostgreSQL is
    stopped and the copy removed afterwards, whatever happened."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=COPY_IGNORE, symlinks=True)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    yield copy
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "config.embedded_db", "stop"],
        cwd=copy,
        env=_clean_env(MEMORIES_DATA_DIR=str(copy / ".data" / "pg")),
        capture_output=True,
        timeout=60,
    )
    shutil.rmtree(copy, ignore_errors=True)


@pytest.mark.slow
def test_the_readme_runs_as_pasted_on_a_fresh_server(checkout, tmp_path):
    port = free_port()
    serve = Serve(checkout, port)
    try:
        blocks = runnable(readme_blocks((checkout / "README.md").read_text(encoding="utf-8")))
        script, where = build_script(blocks, tmp_path, port)
        (tmp_path / "readme.sh").write_text(script, encoding="utf-8")
        done = subprocess.run(
            ["bash", str(tmp_path / "readme.sh")],
            cwd=checkout,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        (tmp_path / "readme.out").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr, encoding="utf-8")
        if done.returncode != 0:
            failed = re.findall(r"__README_FAILED__ (\d+)", done.stderr)
            block, line = where.get(int(failed[-1]), (None, None)) if failed else (None, None)
            command = (checkout / "README.md").read_text(encoding="utf-8").splitlines()[line - 1] if line else "?"
            pytest.fail(
                f"README block {block.number if block else '?'} failed at README.md line {line}: {command}\n"
                f"--- stdout (tail) ---\n{done.stdout[-3000:]}\n--- stderr (tail) ---\n{done.stderr[-3000:]}",
                pytrace=False,
            )
    finally:
        stopped = serve.stop()
    assert "stopped the embedded PostgreSQL" in stopped, stopped
    assert _embedded_status(checkout) == "stopped"

    # A restart keeps the demo token that the README exported. One bin/serve per checkout: a second one (another
    # port) is refused at once — it overwrote the pid file and bin/stop then stopped nothing (a breaker).
    kept = (checkout / ".data" / "demo-token").read_text().strip()
    again = Serve(checkout, port)
    sleeper = subprocess.Popen(["sleep", "300"])
    third = None
    try:
        assert f"Demo token (the same as the last start): {kept}" in again.output()
        me = httpx.get(f"http://127.0.0.1:{port}/api/v1/me", headers={"Authorization": f"Bearer {kept}"})
        assert me.status_code == 200 and me.json()["data"]["handle"] == "demo"
        second = subprocess.run(
            ["bash", "bin/serve"],
            cwd=checkout,
            env=_clean_env(PORT=str(free_port())),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"already running in this checkout (pid {again.process.pid}, 127.0.0.1:{port})" in second.stderr

        # bin/serve killed outright leaves gunicorn serving: bin/stop stops that gunicorn too (a breaker).
        os.kill(again.process.pid, signal.SIGKILL)
        again.process.wait(timeout=10)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        stop = _bin_stop(checkout)
        assert "stopped the gunicorn a killed bin/serve left running" in stop.stdout, stop.stdout
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)

        # A stale pid file whose pid now belongs to another process: that process is never signalled, and
        # the file does not stop the next start.
        (checkout / ".data" / "serve.pid").write_text(f"{sleeper.pid} 127.0.0.1:1\n")
        third = Serve(checkout, port)
        stop = _bin_stop(checkout / "bin")  # from another folder too: ./stop in bin/ (it failed there once)
        assert third.process.wait(timeout=60) == 0
        assert f"stopped bin/serve (pid {third.process.pid}, 127.0.0.1:{port})" in stop.stdout, stop.stdout
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        with contextlib.suppress(ProcessLookupError):  # its gunicorn, should the test have stopped half-way
            os.killpg(again.process.pid, signal.SIGKILL)
        if third is not None:
            third.stop()
    assert "stopped the embedded PostgreSQL" in third.output()
    assert _embedded_status(checkout) == "stopped"
    assert not (checkout / ".data" / "serve.pid").exists()
