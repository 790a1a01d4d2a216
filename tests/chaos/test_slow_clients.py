"""Slow and idle clients cannot starve others (SPEC §2 "Faults are not bugs", issue 16).

The attack the fault-injection run used against gthread (where it served nothing for 30 s): 200 idle
TCP connections and 32 clients trickling headers one byte every 2 s, held for 20 s, reconnecting
whenever the server closes them. Meanwhile a probe sends one request at a time; ≥ 95 % must be
answered within 1 s. Every slow connection must be closed by the server: idle ones silently, tricklers
with the 408 error object, both within HEADER_TIMEOUT (10 s) plus a little.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.chaos.harness import exchange, parse_response, read_response

pytestmark = pytest.mark.timeout(150)

HOLD_S = 20.0
IDLE, TRICKLERS = 200, 32
HEADER_TIMEOUT = 10.0
SLACK = 2.5  # the server's timer, a loaded 2-core machine


class Attack:
    """Idle and header-trickling connections on one selector thread, reopened when the server closes them."""

    def __init__(self, port: int):
        self.port = port
        self.sel = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.closed = {"idle": [], "trickle": []}  # seconds each lived before the server closed it
        self.answers: list[bytes] = []  # what the server wrote to tricklers before closing
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self, kind: str) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, {"kind": kind, "t0": time.monotonic(), "sent": 0, "buf": b""})

    def run(self) -> None:
        for _ in range(IDLE):
            self.open("idle")
        for _ in range(TRICKLERS):
            self.open("trickle")
        request = b"GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
        next_byte = time.monotonic()
        while not self.stop.is_set():
            for key, _ in self.sel.select(timeout=0.2):
                state = key.data
                try:
                    chunk = key.fileobj.recv(65536)
                except OSError:
                    chunk = b""
                state["buf"] += chunk
                if not chunk:
                    self.closed[state["kind"]].append(time.monotonic() - state["t0"])
                    if state["kind"] == "trickle":
                        self.answers.append(state["buf"])
                    self.sel.unregister(key.fileobj)
                    key.fileobj.close()
                    if not self.stop.is_set():
                        self.open(state["kind"])
            if time.monotonic() >= next_byte:  # one byte per trickler every 2 s
                next_byte += 2.0
                for key in list(self.sel.get_map().values()):
                    if key.data["kind"] == "trickle":
                        with contextlib.suppress(OSError):
                            key.fileobj.send(request[key.data["sent"] : key.data["sent"] + 1])
                            key.data["sent"] += 1
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()


@pytest.mark.serial  # the others' latencies timed
def test_idle_and_trickling_clients_do_not_starve_others_and_are_closed(server, owners):
    owner = owners[0]
    attack = Attack(server.port)
    attack.thread.start()
    latencies, statuses = [], []
    try:
        time.sleep(0.5)  # the attackers are connected
        end = time.monotonic() + HOLD_S
        with httpx.Client(base_url=server.url, timeout=5.0) as client:
            i = 0
            while time.monotonic() < end:
                path = "/healthz" if i % 2 else f"/api/v1/memories/{owner.store}"
                started = time.monotonic()
                try:
                    statuses.append(client.get(path, headers=owner.auth).status_code)
                except httpx.HTTPError as exc:
                    statuses.append(type(exc).__name__)
                latencies.append(time.monotonic() - started)
                i += 1
                time.sleep(0.05)
    finally:
        attack.stop.set()
        attack.thread.join(timeout=10)

    fast = sum(1 for s, t in zip(statuses, latencies, strict=True) if s == 200 and t <= 1.0)
    assert len(statuses) >= 50
    assert fast / len(statuses) >= 0.95, f"{fast}/{len(statuses)} probes answered 200 within 1 s"
    # The server closed the slow connections, and within the header timeout.
    assert len(attack.closed["idle"]) >= IDLE, attack.closed["idle"][:5]
    assert len(attack.closed["trickle"]) >= TRICKLERS
    assert max(attack.closed["idle"] + attack.closed["trickle"]) <= HEADER_TIMEOUT + SLACK
    assert min(attack.closed["trickle"]) >= HEADER_TIMEOUT - 0.5
    for raw in attack.answers:
        status, headers, body = parse_response(raw)
        assert status == 408
        doc = json.loads(body)
        assert doc["error"]["type"] == "invalid_request_error"
        assert doc["request_id"] == headers["request-id"]


def test_a_trickled_body_gets_408_and_frees_nothing_it_held(server, owners):
    owner = owners[0]
    head = (
        f"POST /api/v1/memories/{owner.store}/note HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {owner.secret}\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n"
    ).encode()
    slow = socket.create_connection(("127.0.0.1", server.port))
    with slow:
        slow.sendall(head + b"{")
        started = time.monotonic()
        raw = b""
        slow.settimeout(0.5)
        while time.monotonic() - started < HEADER_TIMEOUT + SLACK + 2:
            with contextlib.suppress(OSError):
                slow.send(b" ")
            try:
                chunk = slow.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            raw += chunk
        elapsed = time.monotonic() - started
    status, headers, body = parse_response(raw)
    assert status == 408
    assert 10.0 - 0.5 <= elapsed <= 10.0 + SLACK + 1
    assert json.loads(body)["request_id"] == headers["request-id"]
    # Nothing was stored, and the store still takes notes.
    status, _, body = exchange(
        server.port,
        head.replace(b"Content-Length: 64", b"Connection: close\r\nContent-Length: 20") + b'{"body_md": "after"}',
    )
    assert status == 201
    assert json.loads(body)["data"]["seq"] == 0


def test_a_stopped_worker_leaves_new_connections_to_the_others(server):
    """The workers share one listening socket and whichever can accept does (config/gunicorn.conf.py
    `reuse_port`): while one worker is stopped (busy, frozen, dying), every new connection goes to the other and
    is answered — with a socket per worker (SO_REUSEPORT) about half would wait on the stopped one. Both ways
    round, so each worker takes connections. (How evenly two idle workers split a burst is a race between
    their wake-ups on a shared machine — 2 of 32 in a clean run once — so it is not asserted.)"""
    pids = server.worker_pids()
    assert len(pids) == 2
    for stopped in pids:
        (running,) = set(pids) - {stopped}
        sockets = []
        os.kill(stopped, signal.SIGSTOP)
        try:
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", server.port))
                sockets.append(sock)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.settimeout(5)
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            counts = server.established_per_worker()
        finally:
            os.kill(stopped, signal.SIGCONT)
            for sock in sockets:
                sock.close()
        assert counts == {stopped: 0, running: 8}


def test_the_shared_socket_queues_a_burst_of_connections_past_100(server):
    """gunicorn's master listens with `backlog` (2048); uvloop's `create_server` in each worker called
    `listen(100)` on that socket again (config.server.Loop keeps the master's). With every worker stopped, the
    kernel completes the handshake of as many connections as the backlog holds and drops the rest's SYNs:
    250 at once all connect, and each is answered once the workers run again."""
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    if somaxconn < 251:
        pytest.skip(f"net.core.somaxconn is {somaxconn}: the kernel caps every backlog below this burst")
    pids = server.worker_pids()
    sockets = []
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(250):
            sock = socket.socket()
            sock.setblocking(False)
            sockets.append(sock)
            sock.connect_ex(("127.0.0.1", server.port))
        with selectors.DefaultSelector() as sel:
            for sock in sockets:
                sel.register(sock, selectors.EVENT_WRITE)
            connected, deadline = set(), time.monotonic() + 3
            while len(connected) < len(sockets) and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=0.2):
                    if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                        connected.add(key.fileobj)
                    sel.unregister(key.fileobj)
        assert len(connected) == 250  # 101 when the backlog was 100
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    try:
        for sock in sockets:
            sock.setblocking(True)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        for sock in sockets:
            sock.settimeout(10)
            assert read_response(sock, 10).startswith(b"HTTP/1.1 200")
    finally:
        for sock in sockets:
            sock.close()


def test_a_silent_connection_is_closed_without_an_answer(server):
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        started = time.monotonic()
        data = read_response(sock, HEADER_TIMEOUT + SLACK + 2)
        elapsed = time.monotonic() - started
    assert data == b""
    assert HEADER_TIMEOUT - 0.5 <= elapsed <= HEADER_TIMEOUT + SLACK


def test_a_client_that_never_reads_a_whole_answer_loses_its_connection(cluster):
    """A client asked for the OpenAPI document (~320 KB) and never read: gunicorn waited for its send buffer to
    drain with no limit, holding the connection and the answer's memory (a breaker). Past STREAM_SEND_TIMEOUT
    the connection is dropped, with one WARNING line; the worker serves others throughout."""
    from tests.chaos.harness import Server

    with Server(cluster, workers=1, env={"STREAM_SEND_TIMEOUT": "2"}) as server:
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", server.port))
        stalled.sendall(b"GET /openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            deadline = time.monotonic() + 15
            while "(STREAM_SEND_TIMEOUT)" not in server.log() and time.monotonic() < deadline:
                assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
                time.sleep(0.25)
            assert "answer 200 to GET /openapi.yaml cut: the client did not take a block" in server.log(), server.log()
            assert "returned without completing" not in server.log()  # one WARNING line, no ERROR
            stalled.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while stalled.recv(1 << 20):  # what reached the client's buffers, then the reset
                    pass
        except ConnectionResetError:
            pass  # the connection was dropped: what the test wants
        else:
            pytest.fail("the connection was still open after its answer was cut")
        finally:
            stalled.close()


def test_a_client_reading_a_whole_answer_slowly_but_steadily_is_never_cut(cluster):
    """One bound on the whole answer cut a client that read the OpenAPI document at 20 KB/s after 30 s (a
    breaker): the bound is per 64 KiB block, as for the export. Here 8 s per block (on loopback a reader's
    closed window stalls the sender for seconds at a time: the 64 KiB loopback MSS), the document (~320 KB)
    read in ~14 s, whatever its size: a 64 KiB block every 3 s or so."""
    from tests.chaos.harness import Server

    with Server(cluster, workers=1, env={"STREAM_SEND_TIMEOUT": "8"}) as server:
        expected = len(httpx.get(f"{server.url}/openapi.yaml", timeout=10).content)
        rate = expected / 14  # bytes per second
        assert rate < 65_536 / 2  # a block takes more than 2 s: several blocks, and not one under the bound
        with socket.create_connection(("127.0.0.1", server.port)) as slow:
            slow.sendall(b"GET /openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            slow.settimeout(20)
            received, started = b"", time.monotonic()
            try:
                while chunk := slow.recv(4096):
                    received += chunk
                    time.sleep(max(0.0, len(received) / rate - (time.monotonic() - started)))
            except ConnectionResetError:
                elapsed = time.monotonic() - started
                pytest.fail(f"cut after {len(received)} bytes, {elapsed:.1f} s: {server.log()[-800:]}")
        assert time.monotonic() - started > 10  # longer than the bound: one bound on the whole would cut it
        status, headers, body = parse_response(received)
        assert status == 200 and len(body) == expected == int(headers["content-length"])
        assert "cut:" not in server.log(), server.log()
