"""Requests that never reach Django still get SPEC §2's error object and a Request-Id (issue 16)."""

from __future__ import annotations

import json

import pytest

from tests.chaos.harness import exchange

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
        doc = json.loads(body)
        assert doc["type"] == "error", name
        assert doc["error"]["type"] == "invalid_request_error", name
        assert doc["error"]["message"], name
        assert doc["request_id"] == rid, name
    # …and the server still serves normally afterwards.
    status, headers, body = exchange(server.port, b"GET /healthz HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers["request-id"].startswith("req_")
