"""The MCP server as clients see it: gunicorn (the `bin/serve` stack, two workers) and the official `mcp` client.

`live` starts gunicorn once per test session with `config/gunicorn.conf.py` — the ASGI front, 2 workers × 4
threads, exactly what `bin/serve` runs — against pytest's test database, and writes an access log that
names the worker pid and the `Request-Id` of every response, so a test can prove which worker served
which message. `mcp_client(token)` connects the official `mcp` client (Streamable HTTP, bearer header)
and exposes it synchronously through an anyio blocking portal, so tests stay plain functions that can
also look at the database.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from anyio.from_thread import start_blocking_portal
from django.db import connection
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from accounts import services as account_services
from demo.server import free_port
from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parents[2]
LOG_FORMAT = '%(p)s %({request-id}o)s "%(r)s" %(s)s'
_LOG_LINE = re.compile(r'^<(?P<pid>\d+)> (?P<rid>req_[0-9a-f]+) "(?P<request>[^"]*)" (?P<status>\d+)$')


@dataclass
class LiveServer:
    """A running gunicorn: its base URL, its access log and the pids of its workers."""

    url: str
    access_log: Path
    process: subprocess.Popen

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def served_by(self, request_ids: list[str], *, timeout: float = 5.0) -> dict[str, int]:
        """Map each request id to the pid of the worker that answered it (waits for the log to catch up)."""
        deadline = time.monotonic() + timeout
        while True:
            found: dict[str, int] = {}
            for line in self.access_log.read_text().splitlines():
                match = _LOG_LINE.match(line.strip())
                if match and match["rid"] in request_ids:
                    found[match["rid"]] = int(match["pid"])
            if len(found) == len(set(request_ids)) or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def worker_pids(self) -> set[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return {int(pid) for pid in children}


@contextlib.contextmanager
def gunicorn(folder: Path, *, app: str = "config.asgi:application", worker_class: str | None = None):
    """gunicorn with config/gunicorn.conf.py as `bin/serve` runs it (2 workers; `app` and `worker_class`
    override the ASGI front) on pytest's test database; yields a LiveServer whose access log names pid and
    Request-Id per response."""
    access_log, error_log = folder / "access.log", folder / "error.log"
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.mcp.live_settings",
        "MEMORIES_LIVE_DB_NAME": connection.settings_dict["NAME"],
        "WEB_CONCURRENCY": "2",
        "GUNICORN_THREADS": "4",
        "WEB_THREADS": "4",
    }
    env.pop("GUNICORN_WORKER_CLASS", None)
    if worker_class:
        env["GUNICORN_WORKER_CLASS"] = worker_class
    command = [
        sys.executable, "-m", "gunicorn", app,
        "--config", str(ROOT / "config" / "gunicorn.conf.py"),
        "--bind", f"127.0.0.1:{port}",
        "--access-logfile", str(access_log), "--access-logformat", LOG_FORMAT,
    ]  # fmt: skip
    with error_log.open("wb") as errors:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=errors, stderr=subprocess.STDOUT)
    server = LiveServer(url=f"http://127.0.0.1:{port}", access_log=access_log, process=process)
    try:
        _wait_ready(server, error_log)
        yield server
    finally:
        # Before pytest drops the test database: the workers hold connections to it.
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def live(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[LiveServer]:
    """The `bin/serve` stack: gunicorn, config/gunicorn.conf.py, the ASGI front, 2 workers × 4 threads."""
    with gunicorn(tmp_path_factory.mktemp("gunicorn")) as server:
        yield server


def _wait_ready(server: LiveServer, error_log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{error_log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200 and len(server.worker_pids()) == 2:
                return
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn was not ready:\n{error_log.read_text()[-3000:]}")


@dataclass
class Agent:
    """A user with a token of both scopes (`secret`)."""

    user: Any
    secret: str


@pytest.fixture
def make_agent(db):
    def make(handle: str, scopes=account_services.ALL_SCOPES) -> Agent:
        user = UserFactory(handle=handle)
        return Agent(user=user, secret=account_services.issue_token(user=user, scopes=scopes).secret)

    return make


@pytest.fixture
def alice(make_agent) -> Agent:
    return make_agent("alice")


@pytest.fixture
def bob(make_agent) -> Agent:
    return make_agent("bob")


@dataclass
class SyncClient:
    """The official `mcp.Client`, driven from synchronous test code through a blocking portal.

    `responses` records ``(status, Request-Id)`` of every HTTP response the client received, in order.
    """

    portal: Any
    client: Client
    responses: list[tuple[int, str | None]] = field(default_factory=list)

    def list_tools(self):
        return self.portal.call(self.client.list_tools)

    def call_tool(self, name: str, arguments: dict | None = None):
        return self.portal.call(self.client.call_tool, name, arguments)

    @property
    def protocol_version(self) -> str | None:
        return self.client.session.protocol_version

    @property
    def session(self):
        return self.client.session

    def request_ids(self) -> list[str]:
        return [rid for _status, rid in self.responses if rid]


@pytest.fixture
def mcp_client(live):
    """``mcp_client(token, mode="auto", keepalive=True, server=live)``: a context manager yielding a `SyncClient`.

    mode: the official client's negotiation ('auto' probes server/discover → 2026-07-28; 'legacy' runs the
    initialize handshake). keepalive=False opens a new TCP connection per request, so consecutive
    messages can land on different gunicorn workers.
    """

    @contextlib.contextmanager
    def connect(
        token: str | None, *, mode: str = "auto", keepalive: bool = True, server: LiveServer | None = None
    ) -> Iterator[SyncClient]:
        with start_blocking_portal() as portal:
            wrapper = SyncClient(portal=portal, client=None)  # type: ignore[arg-type]

            async def record(response: httpx2.Response) -> None:
                wrapper.responses.append((response.status_code, response.headers.get("request-id")))

            def build_http() -> httpx2.AsyncClient:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                limits = httpx2.Limits() if keepalive else httpx2.Limits(max_keepalive_connections=0)
                return httpx2.AsyncClient(
                    headers=headers, timeout=30, limits=limits, event_hooks={"response": [record]}
                )

            http = portal.call(build_http)
            url = (server or live).mcp_url
            client = Client(streamable_http_client(url, http_client=http), mode=mode)
            try:
                with portal.wrap_async_context_manager(client) as entered:
                    wrapper.client = entered
                    yield wrapper
            finally:
                portal.call(http.aclose)

    return connect


@pytest.fixture
def rest(live):
    """``rest(token)``: an httpx client on the live server's /api/v1 with the bearer header."""
    clients: list[httpx.Client] = []

    def make(token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=f"{live.url}/api/v1", headers=headers, timeout=30)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
