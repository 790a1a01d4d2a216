"""Assertions shared by the stores tests."""

from __future__ import annotations


def assert_error(response, status: int, error_type: str, reason: str | None = None) -> dict:
    """Assert SPEC §2's error shape; return the body."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["error"]["message"]
    assert body["request_id"].startswith("req_")
    assert response["Request-Id"] == body["request_id"]
    if reason is not None:
        assert body["error"]["details"]["reason"] == reason
    return body


def without_request_id(response) -> dict:
    """The error body without its request id (a copy: the test client caches `response.json()`)."""
    body = dict(response.json())
    assert body.pop("request_id").startswith("req_")
    return body
