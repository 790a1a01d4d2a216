"""Run the Memories service under gunicorn on a free loopback port for the length of a demo.

The server is a child process started with the same interpreter, settings and environment as the caller,
so it serves the database the caller is configured for (DATABASE_URL, or the embedded PostgreSQL in
`.data/`). It is stopped (SIGTERM, then SIGKILL after a grace period) when the context exits.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parent.parent


class ServerError(RuntimeError):
    """gunicorn did not become ready (the message carries the tail of its log)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn_server(
    *,
    workers: int,
    threads: int | None = None,
    host: str = "127.0.0.1",
    ready_timeout: float = 60.0,
    ready_path: str = "/readyz",
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Start the server as `bin/serve` does (gunicorn, config/gunicorn.conf.py) with `workers` worker
    processes of `threads` Django threads each (None: the config's default); yield its base URL. `env`
    adds to (or overrides) the caller's environment.

    Waits until `GET <ready_path>` answers 200 (`/readyz`: the database is reachable). Raises ServerError
    when the process exits early or is not ready within `ready_timeout` seconds. Always stops the process.
    """
    port = free_port(host)
    log_path = BASE_DIR / ".data" / f"demo-gunicorn-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(env or {}), "WEB_CONCURRENCY": str(workers)}
    if threads is not None:
        env["WEB_THREADS"] = str(threads)
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.asgi:application",
        "--config",
        str(BASE_DIR / "config" / "gunicorn.conf.py"),
        "--bind",
        f"{host}:{port}",
    ]
    url = f"http://{host}:{port}"
    with log_path.open("wb") as log:
        # Our own interpreter and a fixed argument list (no shell, no user input).
        process = subprocess.Popen(  # noqa: S603
            command, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            _wait_ready(process, url + ready_path, ready_timeout, log_path)
            yield url
        finally:
            _stop(process)
    log_path.unlink(missing_ok=True)


def _wait_ready(process: subprocess.Popen, ready_url: str, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"gunicorn exited with {process.returncode}:\n{_tail(log_path)}")
        try:
            if httpx.get(ready_url, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise ServerError(f"gunicorn was not ready after {timeout:.0f} s:\n{_tail(log_path)}")


def _stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # gunicorn's graceful shutdown of the arbiter and its workers
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
