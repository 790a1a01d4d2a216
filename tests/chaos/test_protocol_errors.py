"""Requests that never reach Django still get SPEC §2's error object and a Request-Id (issue 16)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.chaos.harness import exchange, wait_until

pytestmark = pytest.mark.timeout(120)

HOST = b"Host: 127.0.0.1\r\n"
CASES = {
    "request line over 8 KiB": (b"GET /healthz?" + b"a" * 8300 + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414),
    "120 headers": (
        b"GET /healthz HTTP/1.1\r\n" + HOST + b"".join(b"X-H%d: v\r\n" % i for i in range(120)) + b"\r\n",
        431,
    ),
    "one header over 8 KiB": (b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 8300 + b"\r\n\r\n", 431),
    "garbage request line": (b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n", 400),
    "non-numeric Content-Length": (b"POST /api/v1/memories HTTP/1.1\r\n" + HOST + b"Content-Length: abc\r\n\r\n", 400),
    "bad HTTP version": (b"GET /healthz HTTP/9.9\r\n" + HOST + b"\r\n", 400),
}


def test_protocol_errors_are_the_json_error_object_with_a_request_id(server):
    for name, (payload, expected) in CASES.items():
        status, headers, body = exchange(server.port, payload)
        assert status == expected, name
        assert headers["content-type"] == "application/json", name
        rid = headers["request-id"]
        assert rid.startswith("req_"), name
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "same-origin", name
        doc = json.loads(body)
        assert doc["type"] == "error", name
        assert doc["error"]["type"] == "invalid_request_error", name
        assert doc["error"]["message"], name
        assert doc["request_id"] == rid, name
    # …and the server still serves normally afterwards.
    status, headers, body = exchange(server.port, b"GET /healthz HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers["request-id"].startswith("req_")


def test_a_declared_body_over_the_limit_is_refused_at_once_without_reading_it(server):
    """A Content-Length over MAX_REQUEST_BYTES is a 413 before any of the body is read — not a 408 after the
    body timeout while the server waits for bytes that will never come."""
    from django.conf import settings

    declared = settings.MAX_REQUEST_BYTES + 1
    head = (
        b"POST /api/v1/memories HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
        b'Content-Length: %d\r\n\r\n{"name": ' % declared
    )
    started = time.monotonic()
    status, headers, body = exchange(server.port, head, timeout=8)
    assert time.monotonic() - started < 5  # the body timeout is 10 s: this answer did not wait for it
    assert status == 413 and headers["request-id"].startswith("req_")
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert json.loads(body)["error"]["type"] == "request_too_large"


def test_a_client_that_leaves_mid_body_is_not_logged_as_a_server_error(server):
    """The client sends 15 of 100 declared bytes and closes: nobody can read an answer, and it is no fault of
    ours, so no 500 is logged — and the server goes on serving."""
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /api/v1/memories HTTP/1.1\r\n" + HOST + b'Content-Length: 100\r\n\r\n{"name": "abc')
    wait_until(lambda: "client closed the connection" in server.log(), 10, 0.2, "the disconnect in the log")
    status, _, _ = exchange(server.port, b"GET /healthz HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
    assert status == 200
    assert " 500 " not in server.log() and "500 req_" not in server.log(), server.log()[-2000:]


@pytest.mark.parametrize(
    ("coding", "status"),
    [
        (b"Transfer-Encoding: gzip, chunked\r\n", 400),
        (b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 400),
        (b"Transfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n", 415),
    ],
)
def test_a_body_in_a_coding_we_do_not_decode_is_refused_through_the_server(server, coding, status):
    """gunicorn reads `gzip, chunked` as chunked and hands the body on still coded; a plain body labelled so was
    stored as it came (a breaker). The screening refuses it before any view runs; the connection goes on."""
    body = b'{"name": "coded"}'
    request = (
        b"POST /api/v1/memories HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n" + coding + b"\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    answer, headers, text = exchange(server.port, request)
    assert answer == status, text
    assert json.loads(text)["error"]["type"] == "invalid_request_error"
    assert headers["request-id"].startswith("req_")


def test_a_host_outside_allowed_hosts_is_one_warning_line_in_the_log(server):
    """Django logs the refusal as an ERROR with a fifteen-line traceback, which any client could flood the log
    with (a breaker): one WARNING line naming the host."""
    for _ in range(2):
        request = b"GET /api/v1/me HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        status, _, body = exchange(server.port, request)
        assert status == 400 and "ALLOWED_HOSTS" in json.loads(body)["error"]["message"]
    wait_until(lambda: server.log().count("Invalid HTTP_HOST header: 'evil.example'") == 2, 10, 0.2, "the two lines")
    lines = [line for line in server.log().splitlines() if "evil.example" in line]
    assert len(lines) == 2, lines
    assert "Traceback" not in server.log() and "DisallowedHost" not in server.log(), server.log()[-3000:]
