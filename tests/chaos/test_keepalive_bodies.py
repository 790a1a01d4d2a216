"""Requests over 64 KiB, one after another on one keep-alive connection, through the real server: each is
answered (config/server.py `Protocol._hold_next_request`).

Found by a breaker: 30 % of 100 KB POSTs on one connection got no answer and no `Connection: close`. A
keep-alive client sends its next request as soon as it has read an answer; under uvloop those bytes reached
gunicorn's protocol before its connection loop had reset the parser, gunicorn_h1c keeps only 64 KiB after a
finished message, and gunicorn closed a connection whose kept tail had been cut.
"""

from __future__ import annotations

import json
import socket

from tests.chaos.harness import Server


def read_one(reader) -> tuple[int, dict[str, str], bytes] | None:
    """One Content-Length framed response from `reader` (a socket's buffered reader: several pipelined
    answers may come in one read, and none of them may be dropped), or None when the server closed first."""
    status_line = reader.readline()
    if not status_line:
        return None
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if not line:
        return None
    length = int(headers.get("content-length", "0"))
    body = reader.read(length)
    if len(body) < length:
        return None
    return int(status_line.split()[1]), headers, body


def send_many(port: int, method: str, path: str, body: bytes, count: int, auth: str = "") -> list:
    """`count` requests in turn on one connection (a new one only after an announced close)."""
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    answers = []
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    reader = sock.makefile("rb")
    try:
        for _ in range(count):
            sock.sendall(request)
            answer = read_one(reader)
            answers.append(answer)
            if answer is None or answer[1].get("connection", "").lower() == "close":
                reader.close()
                sock.close()
                sock = socket.create_connection(("127.0.0.1", port), timeout=15)
                reader = sock.makefile("rb")
    finally:
        reader.close()
        sock.close()
    return answers


def test_large_bodies_on_one_keep_alive_connection_are_all_answered(cluster, owners):
    owner = owners[0]
    auth = f"Authorization: Bearer {owner.secret}\r\n"
    with Server(cluster, workers=1) as server:
        refused = b'{"body_md": "' + b"x" * 100_000 + b'"}'  # over the 1,024-byte entry limit: 400
        answers = send_many(server.port, "POST", f"/api/v1/memories/{owner.store}/note", refused, 60, auth)
        assert answers.count(None) == 0, f"{answers.count(None)} of 60 requests got no answer"
        assert {status for status, _, _ in answers} == {400}
        assert all(json.loads(body)["error"]["type"] == "invalid_request_error" for _, _, body in answers)
        missing = send_many(server.port, "POST", "/api/v1/nowhere", b'{"x": "' + b"y" * 300_000 + b'"}', 30, auth)
        assert missing.count(None) == 0 and {status for status, _, _ in missing} == {404}


def test_a_probe_sent_a_body_it_does_not_read_says_it_closes(cluster):
    """/healthz answers without reading a body; gunicorn then closes the connection if the body had not all
    arrived: the answer announces it (`Connection: close`), so no client waits for a reply on a closed line."""
    with Server(cluster, workers=1) as server:
        answers = send_many(server.port, "GET", "/healthz", b"x" * 1_000_000, 20)
        assert answers.count(None) == 0
        assert all(status == 200 and headers["connection"] == "close" for status, headers, _ in answers)
        quiet = send_many(server.port, "GET", "/healthz", b"", 5)
        assert all(answer is not None and "connection" not in answer[1] for answer in quiet)


def read_all_answers(sock: socket.socket, expected: int) -> tuple[list[tuple[int, dict[str, str], bytes]], bool]:
    """Up to `expected` answers from `sock`, and whether the server then closed the connection."""
    answers = []
    with sock.makefile("rb") as reader:
        while len(answers) < expected:
            answer = read_one(reader)
            if answer is None:
                return answers, True
            answers.append(answer)
        sock.settimeout(1.5)
        try:
            return answers, reader.read(1) == b""
        except TimeoutError:
            return answers, False


def test_pipelined_requests_past_64_kib_are_all_answered(cluster, owners):
    """1,200 small requests sent at once (72 KB): one read carried a finished request and over 64 KiB of the
    next ones, which the parser cut (found by a breaker: 1 of 1,200 answered)."""
    owner = owners[0]
    request = f"GET /api/v1/memories/{owner.store}/wake HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    with Server(cluster, workers=1) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        try:
            sock.sendall(request * 1200)
            answers, closed = read_all_answers(sock, 1200)
        finally:
            sock.close()
    # 1,198 once in a loaded CI run: this test's reader dropped answers that came in one read with another
    # (then the server closed the idle connection); it reads through a buffer since.
    assert len(answers) == 1200 and not closed, f"{len(answers)} of 1,200 answered"
    assert {status for status, _, _ in answers} == {404}  # anonymous: a private store is not found


def test_an_answer_that_says_close_ends_the_connection(cluster, owners):
    """`Connection: close` on an answer that leaves a body unread used to be a header only: gunicorn kept the
    connection and ran the next request, which a client honouring `close` believes unsent and sends again
    (a note stored twice). Now the server ends the connection: the pipelined note is never run."""
    owner = owners[0]
    note = json.dumps({"body_md": "pipelined behind a close"}).encode()
    post = (
        f"POST /api/v1/memories/{owner.store}/note HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
        f"{owner.secret}\r\nContent-Type: application/json\r\nContent-Length: {len(note)}\r\n\r\n"
    ).encode() + note
    chunk = b"10000\r\n" + b"z" * 65536 + b"\r\n"
    too_big = (
        (
            f"POST /api/v1/memories/{owner.store}/note HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            f"{owner.secret}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        + chunk * 20
        + b"0\r\n\r\n"
    )
    with Server(cluster, workers=1) as server:
        for first, status in [(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello", 200)]:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=15)
            try:
                sock.sendall(first + post)
                answers, closed = read_all_answers(sock, 2)
            finally:
                sock.close()
            assert [a[0] for a in answers] == [status] and answers[0][1]["connection"] == "close" and closed
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=15)
        try:
            sock.sendall(too_big + post)  # over MAX_REQUEST_BYTES (1 MiB) in chunks: 413, and the line ends
            answers, closed = read_all_answers(sock, 2)
        finally:
            sock.close()
        assert [a[0] for a in answers] == [413] and answers[0][1]["connection"] == "close" and closed
        with cluster.connect() as conn:
            stored = conn.execute("SELECT count(*) FROM memories_entry WHERE body_md = %s", [note.decode()[13:-2]])
            assert stored.fetchone()[0] == 0


def test_head_probes_log_no_warning(cluster):
    """gunicorn logged "ASGI app sent body bytes on a no-body response" for every HEAD /healthz."""
    heads = []
    with Server(cluster, workers=1) as server:
        for path in ("/healthz", "/readyz", "/mcp"):
            with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
                sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                head = b""
                while b"\r\n\r\n" not in head:
                    head += sock.recv(65536)
                heads.append(int(head.split(b" ", 2)[1]))
        log = server.log()
    assert heads[:2] == [200, 200] and heads[2] in (401, 405)
    assert "no-body response" not in log
