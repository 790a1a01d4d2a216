"""The streamed export through the real server (gunicorn + config.asgi) against a cluster of its own: the
ways it ends early (found by a breaker) leave the worker serving; HTTP/1.0 and HEAD are answered as HTTP
says (config/asgi.py `_Stream`; docs/export-import.md)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import httpx
import pytest

from tests.chaos import harness
from tests.chaos.harness import Server, manage

UNFINISHED = "returned without completing the response"

FILL = """
from stores.models import Store
from tests.log.conftest import fill
fill(Store.objects.get(pk="{store}"), {entries}, body=lambda seq: f"entry {{seq}} " + "x" * 150)
"""


def fill(cluster, store: str, entries: int) -> None:
    manage(cluster, "shell", "-c", FILL.format(store=store, entries=entries))


def request_export(
    port: int, owner, *, rcvbuf: int | None = None, version: str = "1.1", method: str = "GET", extra: str = ""
) -> socket.socket:
    sock = socket.socket()
    if rcvbuf is not None:  # a client that reads slowly: the server's writes fill up at once
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"{method} /api/v1/memories/{owner.store}/export HTTP/{version}\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {owner.secret}\r\n{extra}\r\n".encode()
    )
    return sock


def read_all(sock: socket.socket, timeout: float) -> bytes:
    return harness.read_response(sock, timeout)


def backends(cluster) -> list[tuple]:
    with cluster.connect() as conn:
        return conn.execute(
            "SELECT pid, state, left(query, 60) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()


def test_a_stream_cut_by_a_stalled_client_does_not_poison_its_thread(cluster, owners):
    """One worker, two Django threads (one may stream). An export whose client stops reading is cut after
    STREAM_SEND_TIMEOUT; every request after it must still be answered normally. Observed before the fix:
    every later request that lands on the export's thread (the LIFO pool hands it the next one) is a 500
    `TransactionManagementError: An error occurred in the current transaction`, forever."""
    owner = owners[0]
    fill(cluster, owner.store, 40_000)  # ~9 MB of export: far more than the socket buffers hold
    env = {"WEB_THREADS": "2", "STREAM_SEND_TIMEOUT": "1"}
    with Server(cluster, workers=1, env=env) as server:
        sock = request_export(server.port, owner, rcvbuf=4096)
        try:
            sock.settimeout(10)
            assert sock.recv(12) == b"HTTP/1.1 200"
            harness.wait_until(lambda: "cut: the client did not take a block" in server.log(), 15, what="the cut")
            # the cut drops the connection: what the server still had queued (megabytes of kernel buffers,
            # kept as long as the client liked before) never arrives
            after_cut = 0
            with contextlib.suppress(ConnectionResetError, TimeoutError):
                while chunk := sock.recv(65536):
                    after_cut += len(chunk)
            assert after_cut < 512 * 1024, f"{after_cut} bytes still sent after the cut"
        finally:
            sock.close()
        # logged once, as the WARNING above: not again as gunicorn's ERROR about an unfinished response
        assert UNFINISHED not in server.log()
        statuses = [httpx.get(f"{server.url}/api/v1/me", headers=owner.auth, timeout=15).status_code for _ in range(4)]
        assert statuses == [200] * 4, server.log().count("TransactionManagementError")
        with httpx.stream(
            "GET", f"{server.url}/api/v1/memories/{owner.store}/export", headers=owner.auth, timeout=60
        ) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line]
        assert json.loads(lines[-1])["type"] == "end"
        assert "TransactionManagementError" not in server.log()


def test_a_slow_export_client_does_not_hold_the_transaction_or_block_a_migration(cluster, owners):
    """An export whose client reads slowly used to keep its REPEATABLE READ transaction — and its table
    locks and snapshot — until the client had taken the last block (up to STREAM_SECONDS, 900 s): a
    migration's ALTER TABLE waited behind it, and every query behind the ALTER. Now the export is read
    ahead into a spool: once the database part is done the transaction is gone, an ACCESS EXCLUSIVE lock
    is granted at once, and the client still gets the whole export, end line included."""
    owner = owners[0]
    fill(cluster, owner.store, 40_000)  # ~9 MB: far more than the socket buffers hold
    with Server(cluster, workers=1) as server:
        sock = request_export(server.port, owner, rcvbuf=4096, version="1.0")  # unchunked: the body as sent
        try:
            sock.settimeout(10)
            data = sock.recv(12)
            assert data == b"HTTP/1.0 200"
            harness.wait_until(lambda: backends(cluster) and all(row[1] == "idle" for row in backends(cluster)), 30)
            with cluster.connect() as conn:
                conn.execute("SET lock_timeout = '1s'")
                with conn.transaction():
                    conn.execute("LOCK TABLE memories_entry, memories_summary IN ACCESS EXCLUSIVE MODE")
            data += read_all(sock, 60)
        finally:
            sock.close()
    lines = data.partition(b"\r\n\r\n")[2].rstrip(b"\n").split(b"\n")
    assert json.loads(lines[-1])["type"] == "end", lines[-1][:300]
    assert sum(json.loads(line)["type"] == "entry" for line in lines) == 40_000


@pytest.mark.serial  # timed
def test_a_slow_export_client_does_not_hold_a_thread_once_the_export_is_read(cluster, owners):
    """One worker with ONE Django thread. An export to a client that stops reading used to keep that
    thread until the answer was cut (STREAM_SEND_TIMEOUT): every other request of the worker waited, then
    got 503 after REQUEST_TIMEOUT. Once the export is read ahead, the event loop sends the rest and the
    thread serves others at once; the stream's slot stays taken (a second export is refused) until the
    first is done, so what is spooled stays bounded."""
    owner = owners[0]
    fill(cluster, owner.store, 40_000)
    env = {"WEB_THREADS": "1", "STREAM_THREADS": "1", "STREAM_SEND_TIMEOUT": "20"}
    with Server(cluster, workers=1, env=env) as server:
        sock = request_export(server.port, owner, rcvbuf=4096, version="1.0")
        try:
            sock.settimeout(10)
            data = sock.recv(12)
            assert data == b"HTTP/1.0 200"
            harness.wait_until(lambda: backends(cluster) and all(row[1] == "idle" for row in backends(cluster)), 30)
            started = time.monotonic()
            me = httpx.get(f"{server.url}/api/v1/me", headers=owner.auth, timeout=30)
            assert me.status_code == 200 and time.monotonic() - started < 2
            second = httpx.get(f"{server.url}/api/v1/memories/{owner.store}/export", headers=owner.auth, timeout=30)
            assert second.status_code == 503 and second.headers["retry-after"]
            data += read_all(sock, 60)
        finally:
            sock.close()
        lines = data.partition(b"\r\n\r\n")[2].rstrip(b"\n").split(b"\n")
        assert json.loads(lines[-1])["type"] == "end"
        # the slot came back: the next export is served
        assert (
            httpx.get(f"{server.url}/api/v1/memories/{owner.store}/export", headers=owner.auth, timeout=60).status_code
            == 200
        )
        assert "[ERROR]" not in server.log() and "Traceback" not in server.log()


def test_a_slow_but_steady_export_client_is_not_cut(cluster, owners):
    """A client taking the export steadily at ~40 kB/s makes progress: it must not be cut as stalled. Found
    by a breaker: the kernel's send queue autotuned to ~4 MB and the socket was writable again only once a
    third of it had drained (33 s at 40 kB/s), so no block got through within STREAM_SEND_TIMEOUT (30 s;
    here 8). With TCP_NOTSENT_LOWAT the unsent queue stays at 128 KiB. (On loopback a closed receive window
    still stalls the sender a few seconds at a time — the 64 KiB loopback MSS — hence 8 s here, not 3.)"""
    owner = owners[0]
    fill(cluster, owner.store, 40_000)
    with Server(cluster, workers=1, env={"STREAM_SEND_TIMEOUT": "8"}) as server:
        sock = request_export(server.port, owner)
        received, started = 0, time.monotonic()
        try:
            sock.settimeout(10)
            while time.monotonic() - started < 20:
                try:
                    chunk = sock.recv(2000)
                except ConnectionResetError:
                    raise AssertionError(f"cut after {received} bytes: {server.log()[-600:]}") from None
                assert chunk, f"the answer ended after {received} bytes"
                received += len(chunk)
                time.sleep(0.05)
        finally:
            sock.close()
        assert "cut:" not in server.log()
    assert received > 500_000


def test_a_burst_of_exports_past_stream_threads_leaves_the_worker_serving(cluster, owners):
    """Ten exports at once on a worker with 4 threads (STREAM_THREADS 2): two stream, the rest are refused
    with 503. Everything else must go on being answered. Observed before the fix: each refused export (and
    each cut one) leaves its thread inside the export's atomic block, so within one burst every thread of
    the worker answers 500 to everything, for good."""
    owner, other = owners[0], owners[1]
    fill(cluster, owner.store, 40_000)
    env = {"WEB_THREADS": "4", "STREAM_SEND_TIMEOUT": "2", "STREAM_THREADS_PER_USER": "2"}  # one user, both slots
    with Server(cluster, workers=1, env=env) as server:
        socks = [request_export(server.port, owner, rcvbuf=4096) for _ in range(10)]
        try:
            statuses = []
            for sock in socks:
                sock.settimeout(15)
                statuses.append(int(sock.recv(12)[-3:]))
            assert sorted(statuses) == [200, 200] + [503] * 8
            with httpx.Client(base_url=server.url, timeout=15) as client:
                answers = []
                for k in range(20):
                    answers.append(
                        client.post(
                            f"/api/v1/memories/{other.store}/note", headers=other.auth, json={"body_md": f"note {k}"}
                        ).status_code
                    )
                    answers.append(client.get("/api/v1/me", headers=other.auth).status_code)
            assert set(answers) == {200, 201}, answers
        finally:
            for sock in socks:
                sock.close()
        # both streams end — cut (their clients stalled past STREAM_SEND_TIMEOUT) or ended by the clients'
        # leaving (the front watches for http.disconnect) — and give their slots back
        export = f"{server.url}/api/v1/memories/{owner.store}/export"

        def a_slot_is_free() -> bool:  # a GET (a HEAD takes no slot); left at once, its own slot comes back
            with httpx.stream("GET", export, headers=owner.auth, timeout=15) as response:
                return response.status_code == 200

        harness.wait_until(a_slot_is_free, 20, what="free slots")
        with httpx.stream(
            "GET", f"{server.url}/api/v1/memories/{owner.store}/export", headers=owner.auth, timeout=60
        ) as response:
            assert response.status_code == 200
            assert json.loads([line for line in response.iter_lines() if line][-1])["type"] == "end"
        assert [row for row in backends(cluster) if row[1] != "idle"] == []


def test_an_http10_keep_alive_export_is_not_followed_by_the_next_response(cluster, owners):
    """An HTTP/1.0 client asking for keep-alive: the streamed export has no Content-Length and cannot be
    chunked, so its end is the end of the connection (RFC 9112 §6.3). The server must close after it.
    Observed: the server keeps the connection (it sends no `Connection: keep-alive`, so the client reads to
    EOF) and answers the next request on it: that response's status line, headers and JSON are read as
    the tail of the export (after its end line); with nothing pipelined the client waits GUNICORN_KEEPALIVE
    (5 s) for an EOF. Before streaming, the export always had a Content-Length."""
    owner = owners[0]
    fill(cluster, owner.store, 2_000)
    with Server(cluster, workers=1) as server:
        sock = request_export(server.port, owner, version="1.0", extra="Connection: keep-alive\r\n")
        sock.sendall(
            f"GET /api/v1/me HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {owner.secret}\r\n\r\n".encode()
        )
        raw = read_all(sock, 15)
        sock.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200")
        assert b"\r\nconnection: close" in head.lower(), head  # said, so the client need not wait for EOF
        last = body.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        assert json.loads(last).get("type") == "end", f"the body goes on after the end line: {body[-400:]!r}"
        # a complete answer: gunicorn logged an ERROR per HTTP/1.0 export when the end was left unsent
        assert UNFINISHED not in server.log()


def test_an_http10_export_without_keep_alive_is_complete_and_logs_no_error(cluster, owners):
    """A plain HTTP/1.0 export (curl --http1.0): the whole store, the connection closed after it, and no
    ERROR in the server's log (observed before: one "returned without completing the response" each)."""
    owner = owners[0]
    fill(cluster, owner.store, 2_000)
    with Server(cluster, workers=1) as server:
        raw = read_all(request_export(server.port, owner, version="1.0"), 15)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200")
        lines = body.rstrip(b"\n").split(b"\n")
        assert json.loads(lines[-1])["type"] == "end"
        assert sum(json.loads(line)["type"] == "entry" for line in lines) == 2_000
        assert UNFINISHED not in server.log()
        assert "[ERROR]" not in server.log()


def test_a_partial_request_pipelined_behind_an_export_gets_its_408(cluster, owners):
    """Headers that never end, sent right behind an export on the same connection: once the export is out
    the connection is a new request's, so HEADER_TIMEOUT answers it 408 (found by a breaker: gunicorn's
    keep-alive timer closed it at 5 s without a word, since the header timer was armed only between
    requests)."""
    owner = owners[0]
    fill(cluster, owner.store, 2_000)
    with Server(cluster, workers=1, env={"HEADER_TIMEOUT": "2"}) as server:
        sock = request_export(server.port, owner)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        raw = read_all(sock, 15)
        sock.close()
    assert raw.startswith(b"HTTP/1.1 200")
    assert b"HTTP/1.1 408" in raw, raw[-600:]


@pytest.mark.serial  # timed
def test_a_head_of_the_export_does_not_stream_the_store(cluster, owners):
    """HEAD has no body, yet the front streams the whole export into gunicorn, which drops every block
    (one WARNING 'ASGI app sent body bytes on a no-body response' per HEAD) and holds the head back until
    the answer ends: the HEAD reads the whole store at database speed with no client back-pressure, holds a
    stream slot and a thread all along, and its head arrives only at the end (1.2 s here, as long as the
    GET; a HEAD whose stream is cut gets no answer at all). With STREAM_THREADS 1 a GET during a HEAD is
    refused. Expected: a HEAD is answered with the head at once and frees the slot."""
    owner = owners[0]
    fill(cluster, owner.store, 150_000)  # ~35 MB: the whole export takes over a second
    with Server(cluster, workers=1, env={"WEB_THREADS": "2", "STREAM_THREADS": "1"}) as server:
        path = f"{server.url}/api/v1/memories/{owner.store}/export"
        head: dict = {}

        def do_head():
            started = time.monotonic()
            head["status"] = httpx.head(path, headers=owner.auth, timeout=30).status_code
            head["took"] = time.monotonic() - started

        thread = threading.Thread(target=do_head)
        thread.start()
        time.sleep(0.4)
        with httpx.stream("GET", path, headers=owner.auth, timeout=30) as response:
            status = response.status_code
            response.read()
        thread.join(30)
        assert head["status"] == 200
        assert status == 200, "the GET was refused: the HEAD still held the only stream slot"
        assert head["took"] < 0.4, f"the HEAD took {head['took']:.2f} s"
        assert "sent body bytes on a no-body response" not in server.log()


def test_one_users_stalled_exports_leave_other_users_a_stream(cluster, owners):
    """A user opened exports and never read them: they took every stream slot of the worker, and every other
    user's export was a 503 until they were cut (a breaker). One user holds STREAM_THREADS_PER_USER (1) at once;
    a second is a 429 naming the limit, and another user's export streams."""
    owner, other = owners[0], owners[1]
    fill(cluster, owner.store, 40_000)
    env = {"WEB_THREADS": "4", "STREAM_SEND_TIMEOUT": "20"}  # STREAM_THREADS 2, one per user
    with Server(cluster, workers=1, env=env) as server:
        stalled = request_export(server.port, owner, rcvbuf=4096)
        try:
            stalled.settimeout(15)
            assert stalled.recv(12)[-3:] == b"200"
            second = httpx.get(f"{server.url}/api/v1/memories/{owner.store}/export", headers=owner.auth, timeout=15)
            assert second.status_code == 429 and second.headers["retry-after"], second.text
            error = second.json()["error"]
            assert error["type"] == "rate_limit_error" and "the most one user may have at once" in error["message"]
            with httpx.stream(
                "GET", f"{server.url}/api/v1/memories/{other.store}/export", headers=other.auth, timeout=60
            ) as response:
                assert response.status_code == 200
                assert json.loads([line for line in response.iter_lines() if line][-1])["type"] == "end"
        finally:
            stalled.close()
        assert "already has 1 streamed answers in progress (STREAM_THREADS_PER_USER)" in server.log()
