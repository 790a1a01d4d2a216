"""A streamed answer (the export) whose database read fails after the view returned is a 503, not a 500.

The ASGI front joins a streamed body on the request's thread, after Django's error handling: a database
fault there — the request deadline cutting a long export (found by a breaker: 6 of 8 parallel exports of a
200,000-entry store answered 500 after 8.4 s), a restart — must be SPEC §2's fault answer.
"""

from __future__ import annotations

import json

from django.db import OperationalError

from config import asgi


def streaming_app(failure: Exception | None):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/x-ndjson")])

        def body():
            yield b'{"type": "header"}\n'
            if failure is not None:
                raise failure
            yield b'{"type": "end"}\n'

        return body()

    return app


def environ() -> dict:
    return {"REQUEST_METHOD": "GET", "PATH_INFO": "/api/v1/memories/x/export", "QUERY_STRING": ""}


def test_a_database_fault_in_a_streamed_body_is_a_503_with_retry_after(monkeypatch, caplog):
    monkeypatch.setattr(asgi, "django_application", streaming_app(OperationalError("server closed the connection")))
    status, head, body = asgi._call_django(environ())
    headers = {name.decode(): value.decode() for name, value in head}
    payload = json.loads(body)
    assert status == 503
    assert payload["error"]["type"] == "overloaded_error"
    assert headers["retry-after"] and headers["request-id"] == payload["request_id"]
    assert headers["content-type"].startswith("application/json")
    assert any("streamed answer failed" in record.getMessage() for record in caplog.records)
    assert all(record.exc_info is None for record in caplog.records)  # one WARNING line, no traceback


def test_a_complete_streamed_body_is_answered_whole(monkeypatch):
    monkeypatch.setattr(asgi, "django_application", streaming_app(None))
    status, head, body = asgi._call_django(environ())
    assert status == 200 and body == b'{"type": "header"}\n{"type": "end"}\n'
    assert (b"content-length", str(len(body)).encode()) in head
