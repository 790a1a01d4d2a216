"""The API runs without the back office's middleware (config.asgi `_PathDispatch`, issue 17)."""

from __future__ import annotations

import concurrent.futures
from urllib.parse import unquote_to_bytes

import pytest
from django.conf import settings
from django.db import connections

import config.asgi as front
from tests.factories import StoreFactory
from tests.foundation.test_faults import http_scope, run_asgi

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Run the front's Django calls on one thread of our own, whose database connection is closed after."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(front, "_pool", pool)
    yield
    pool.submit(connections.close_all).result()
    pool.shutdown()


def _loaded(handler) -> list[str]:
    """The middleware classes a Django handler actually runs, outermost first."""
    names, current = [], handler._middleware_chain
    while current is not None:
        inner = getattr(current, "__wrapped__", None) or current
        target = getattr(inner, "get_response", None)
        if target is None:
            break
        names.append(f"{type(inner).__module__}.{type(inner).__name__}")
        current = target
    return names


def test_the_api_handler_leaves_out_exactly_the_back_office_middleware():
    api, full = _loaded(front.django_application.api), _loaded(front.django_application.full)
    assert api == settings.API_MIDDLEWARE and full == settings.MIDDLEWARE
    assert set(full) - set(api) == set(settings.BACK_OFFICE_ONLY_MIDDLEWARE)
    for kept in ("RequestIdMiddleware", "HostileInputMiddleware", "SecurityMiddleware", "XFrameOptionsMiddleware"):
        assert any(name.endswith(kept) for name in api)


def test_an_api_request_through_the_front_keeps_its_headers_and_sets_no_cookie(make_client, owner):
    store = StoreFactory(owner=owner)
    secret = make_client(owner).secret
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {secret}".encode()), (b"cookie", b"a=b")]
    start, body = run_asgi(http_scope("GET", f"/api/v1/memories/{store.pk}", headers))
    assert start["status"] == 200, body
    sent = dict(start["headers"])
    assert sent[b"request-id"].startswith(b"req_")
    assert sent[b"x-frame-options"] == b"DENY" and sent[b"x-content-type-options"] == b"nosniff"
    assert b"set-cookie" not in sent and b"cookie" not in sent.get(b"vary", b"").lower()


def test_the_back_office_through_the_front_still_gets_sessions_and_csrf():
    start, _body = run_asgi(http_scope("GET", "/backoffice/login/"))
    assert start["status"] == 200
    cookies = b" ".join(value for name, value in start["headers"] if name == b"set-cookie")
    assert b"csrftoken=" in cookies


@pytest.mark.parametrize(
    ("method", "path", "query", "headers"),
    [
        ("GET", "/api/v1/memories", b"q=%00", []),  # NUL in the query
        ("GET", "/api/v1/memories/\xff", b"", []),  # bad UTF-8 in the path (decoded as latin-1, as servers do)
        ("GET", "/backoffice/login/", b"next=%00", []),  # the full stack too
        ("POST", "/api/v1/memories", b"", [(b"content-type", b"application/json; charset=nope")]),
    ],
    ids=["nul-query", "bad-utf8-path", "back-office", "bad-charset"],
)
def test_a_refused_request_carries_the_security_headers(method, path, query, headers):
    """The hostile-input screening's refusals are answered inside SecurityMiddleware, like every response."""
    scope = http_scope(method, path, [(b"host", b"testserver"), *headers], query)
    scope["raw_path"] = path.encode("latin-1")  # the bytes a client sent (\xff: not UTF-8)
    start, body = run_asgi(scope)
    assert start["status"] == 400, body
    sent = dict(start["headers"])
    if path.startswith("/backoffice/"):  # people read it: the back office's page, naming the problem
        assert sent[b"content-type"].startswith(b"text/html") and b"Query string" in body["body"]
    else:
        assert b'"invalid_request_error"' in body["body"]
    assert sent[b"x-content-type-options"] == b"nosniff"
    assert sent[b"referrer-policy"] == b"same-origin"
    assert sent[b"request-id"].startswith(b"req_")


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/api/v1/memories", [(b"content-length", b"999999999")], 413),  # refused before reading
        ("GET", "/healthz", [], 200),
    ],
    ids=["413-declared", "healthz"],
)
def test_what_the_front_answers_itself_carries_the_security_headers(method, path, headers, status):
    """Answers written before Django runs (config.asgi) carry what Django's middleware would add."""
    start, body = run_asgi(http_scope(method, path, [(b"host", b"testserver"), *headers]))
    assert start["status"] == status, body
    sent = dict(start["headers"])
    assert sent[b"x-content-type-options"] == b"nosniff"
    assert sent[b"referrer-policy"] == b"same-origin"
    assert sent[b"cross-origin-opener-policy"] == b"same-origin"
    assert sent[b"x-frame-options"] == b"DENY"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"http://127.0.0.1:8000/healthz", "/healthz"),
        (b"HTTPS://example.test/healthz", "/healthz"),
        (b"http://example.test", "/"),
        (b"/healthz", "/healthz"),  # the origin form, untouched
        (b"/http://x/healthz", "/http://x/healthz"),
        (b"http://h#frag/healthz", "#frag/healthz"),  # not a way around the origin form's answer (404)
        (b"http://h\\/healthz", "\\/healthz"),
    ],
)
def test_an_absolute_form_target_is_reduced_to_its_path(target, expected):
    """RFC 9112 §3.2.2: servers MUST accept `GET http://host/path`; gunicorn passed it on whole and every
    route answered 404 (a breaker)."""
    scope = http_scope("GET", target.decode("latin-1"), [(b"host", b"testserver")])
    scope["raw_path"] = target
    assert front.origin_form(scope)["path"] == expected
    assert front.origin_form(scope)["raw_path"] == expected.encode()


@pytest.mark.parametrize(
    ("target", "status"),
    [
        (b"http://127.0.0.1:8000/healthz", 200),
        (b"http://testserver/api/v1/me", 401),
        (b"http://evil.example/api/v1/me", 400),  # the target's host is the one judged, not Host (RFC 9112)
    ],
)
def test_an_absolute_form_request_reaches_its_route(target, status):
    scope = http_scope("GET", target.decode(), [(b"host", b"testserver")])
    scope["raw_path"] = target
    start, body = run_asgi(scope)
    assert start["status"] == status, body


@pytest.mark.parametrize(
    "target",
    [b"/backoffice%2Flogin/", b"/api/v1%2fme", b"/api/v1/memories/%2F", b"/api%2Fv1/me?x=%2F"],
)
def test_an_encoded_slash_in_the_path_is_refused_not_routed(target):
    """`%2F` was a `/` to the router: `/backoffice%2Flogin/` reached the back office's login past a proxy rule
    that matches the raw path (docs/decisions.md). A 400 naming it, before any view."""
    scope = http_scope("GET", unquote_to_bytes(target.partition(b"?")[0]).decode(), [(b"host", b"testserver")])
    scope["raw_path"] = target.partition(b"?")[0]
    scope["query_string"] = target.partition(b"?")[2]
    start, body = run_asgi(scope)
    assert start["status"] == 400, body
    assert b"encoded" in body["body"] and b"%2F" in body["body"]
    fine = http_scope("GET", "/api/v1/me", [(b"host", b"testserver")])
    fine["query_string"] = b"x=%2F"  # in the query, a slash is only a character
    assert run_asgi(fine)[0]["status"] == 401


@pytest.mark.parametrize("path", ["/healthz", "/api/v1/me", "/mcp", "/backoffice/login/"])
def test_an_http_1_1_request_without_host_is_a_400(path):
    """RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host; gunicorn served it (a
    breaker). HTTP/1.0 needs none."""
    scope = {**http_scope("GET", path), "headers": []}
    start, body = run_asgi(scope)
    assert start["status"] == 400, body
    assert b"Host header" in body["body"]
    start, _body = run_asgi({**scope, "http_version": "1.0"})
    assert start["status"] != 400
