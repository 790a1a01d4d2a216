"""A Content-Type header Django's request cannot take is a 400 naming the header, never a 500 (SPEC §2).

Django's `WSGIRequest()` parses the header when it is built: an RFC 2231 parameter with an unknown charset
(``a*=bogus''%41``) makes it raise, and a charset naming a codec that is no character set (``rot13``,
``idna``) makes the query or the form body fail to decode. `config.middleware.ScreenedRequest` never
raises on the header and `HostileInputMiddleware` refuses it (and an empty or unknown charset), so every
request the front hands to Django — the fast lanes, the API handler, the back office's full stack,
``/mcp`` — gets the same SPEC §2 error object with a `Request-Id`, writes nothing, and Django's
``request_started`` and ``request_finished`` stay paired. Every case runs with the lanes on and off.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.sessions.models import Session
from django.core import signals

from accounts.models import ApiToken
from config import fastlane
from memories.models import Entry
from stores.models import Store
from tests.factories import StoreFactory, UserFactory
from tests.foundation.test_api_stack import one_thread  # noqa: F401 (autouse: the front on one thread of ours)
from tests.foundation.test_faults import http_scope, run_asgi

pytestmark = pytest.mark.django_db(transaction=True)

RFC_2231_UNKNOWN_CHARSET = "application/json; a*=bogus''%41"

# name -> (Content-Type, the end of the 400's message)
BAD = {
    "the breaker's": ("text/plain; a*=bogus''%41", "is malformed."),  # Django's parser raises
    "rfc2231 unknown charset": (RFC_2231_UNKNOWN_CHARSET, "is malformed."),
    "rfc2231 charset with unknown charset": ("application/json; charset*=bogus''%41", "is malformed."),
    "rfc2231 continuations": ("application/json; a*0*=nope''%41; a*1*=%42", "is malformed."),
    "rot13": ("application/json; charset=rot13", "names a codec that is not a character set."),
    "hex": ("application/json; charset=hex", "names a codec that is not a character set."),
    "idna": ("application/json; charset=idna", "names a codec that is not a character set."),
    "undefined": ("application/json; charset=undefined", "names a codec that is not a character set."),
    "unknown charset": ("application/json; charset=bogus", "names an unknown charset."),
    "empty charset": ("application/json; charset=", "has an empty charset."),
    "quoted empty charset": ('application/json; charset=""', "has an empty charset."),
    "non-latin-1 once decoded": ("application/json; charset*=utf-8''%E2%82%AC", "names an unknown charset."),
    "latin-1 byte": ("application/json; charset=\u00fctf-8", "names an unknown charset."),
    "400 parameters, the last bad": (
        "application/json; " + "; ".join(f"p{i}=v" for i in range(400)) + "; z*=nope''%41",
        "is malformed.",
    ),
}


@pytest.fixture(params=["lanes on", "lanes off"])
def lanes(request, settings):
    """Each test twice: with the fast lanes, and without them (``FAST_LANES=false``)."""
    if request.param == "lanes off":
        settings.API_FAST_LANES = []
    return request.param


@pytest.fixture
def django_signals():
    """Count Django's request_started and request_finished, whichever thread sends them."""
    sent = {"started": 0, "finished": 0}

    def started(**kwargs):
        sent["started"] += 1

    def finished(**kwargs):
        sent["finished"] += 1

    signals.request_started.connect(started, weak=False, dispatch_uid="test_bad_content_type.started")
    signals.request_finished.connect(finished, weak=False, dispatch_uid="test_bad_content_type.finished")
    yield sent
    signals.request_started.disconnect(dispatch_uid="test_bad_content_type.started")
    signals.request_finished.disconnect(dispatch_uid="test_bad_content_type.finished")


@pytest.fixture
def cast(make_client):
    """A store with a token of its owner, and a user with a token but no store yet (ensure would create it)."""
    owner = UserFactory(handle="owner")
    store = StoreFactory(owner=owner)
    fresh = UserFactory(handle="fresh")
    return {"store": store, "secret": make_client(owner).secret, "fresh": make_client(fresh).secret}


def call(method: str, path: str, content_type: str | None, body: bytes = b"", *, secret=None, query=b""):
    """One request through the ASGI front; returns (status, headers dict, body bytes)."""
    head = [(b"host", b"testserver")]
    if content_type is not None:
        head.append((b"content-type", content_type.encode("latin-1")))  # as the server decoded the bytes
    if body:
        head.append((b"content-length", str(len(body)).encode()))
    if secret:
        head.append((b"authorization", f"Bearer {secret}".encode()))
    start, message = run_asgi(http_scope(method, path, head, query), [{"type": "http.request", "body": body}])
    return start["status"], dict(start["headers"]), message["body"]


ROUTES = [
    "wake (GET lane)",
    "wake with a query (GET lane)",
    "note (POST lane)",
    "list (GET, no lane)",
    "ensure (POST, no lane)",
    "back office login page (GET)",
    "back office login (POST)",
    "mcp (POST, full stack)",
]


def routes(cast) -> dict[str, tuple]:
    """`ROUTES` -> (method, path, body, secret, query): each kind of route the front hands to Django."""
    store, secret = cast["store"], cast["secret"]
    note = json.dumps({"body_md": "should never be written"}).encode()
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    return {
        "wake (GET lane)": ("GET", f"/api/v1/memories/{store.pk}/wake", b"", secret, b""),
        "wake with a query (GET lane)": ("GET", f"/api/v1/memories/{store.pk}/wake", b"", secret, b"a=1"),
        "note (POST lane)": ("POST", f"/api/v1/memories/{store.pk}/note", note, secret, b""),
        "list (GET, no lane)": ("GET", "/api/v1/memories", b"", secret, b"limit=5"),
        "ensure (POST, no lane)": ("POST", "/api/v1/memories", b"{}", cast["fresh"], b""),
        "back office login page (GET)": ("GET", "/backoffice/login/", b"", None, b"next=/backoffice/"),
        "back office login (POST)": ("POST", "/backoffice/login/", b"username=owner&password=x", None, b""),
        "mcp (POST, full stack)": ("POST", "/mcp", ping, secret, b""),
    }


def written() -> tuple:
    """What a request could write: entries, stores, sessions, and every token's last use."""
    uses = tuple(ApiToken.objects.order_by("pk").values_list("pk", "last_used_at"))
    return Entry.objects.count(), Store.objects.count(), Session.objects.count(), uses


def assert_refused(status, headers, body, ending, route=""):
    assert status == 400, body
    request_id = headers[b"request-id"].decode()
    assert request_id.startswith("req_")
    if route.startswith("back office"):  # people read it: the back office's page, naming the header
        assert headers[b"content-type"] == b"text/html; charset=utf-8"
        page = body.decode()
        assert f"Content-Type header {ending}" in page.replace("&#x27;", "'") and request_id in page
        return
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(body) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": f"Content-Type header {ending}"},
        "request_id": request_id,
    }


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("content_type", "ending"),
    [BAD["rfc2231 unknown charset"], BAD["rot13"]],
    ids=["rfc2231 unknown charset", "rot13"],
)
def test_every_route_refuses_a_content_type_django_cannot_take(
    lanes, cast, django_signals, route, content_type, ending
):
    method, path, body, secret, query = routes(cast)[route]
    before = written()
    status, headers, answer = call(method, path, content_type, body, secret=secret, query=query)
    assert django_signals["started"] == django_signals["finished"] >= 1, django_signals  # housekeeping ran
    assert_refused(status, headers, answer, ending, route)
    assert written() == before


@pytest.mark.parametrize(("content_type", "ending"), BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("route", ["wake (GET lane)", "note (POST lane)", "back office login (POST)"])
def test_every_kind_of_bad_content_type_is_a_400_naming_the_header(
    lanes, cast, django_signals, route, content_type, ending
):
    method, path, body, secret, query = routes(cast)[route]
    before = written()
    status, headers, answer = call(method, path, content_type, body, secret=secret, query=query)
    assert_refused(status, headers, answer, ending, route)
    assert written() == before
    assert django_signals["started"] == django_signals["finished"]


def test_a_request_a_lane_cannot_build_still_finishes(cast, django_signals, monkeypatch):
    """Whatever the request's constructor raises inside a lane, Django's request_finished follows its start."""

    def broken(environ):
        raise RuntimeError("cannot build this request")

    monkeypatch.setattr(fastlane, "ScreenedRequest", broken)
    method, path, body, secret, query = routes(cast)["wake (GET lane)"]
    status, _headers, _answer = call(method, path, "application/json", body, secret=secret, query=query)
    assert status == 500  # the front's answer to an exception out of the WSGI application
    assert django_signals["started"] == django_signals["finished"] >= 1, django_signals


@pytest.mark.parametrize("route", ["wake (GET lane)", "back office login page (GET)"])
def test_the_refusal_has_the_headers_of_the_screenings_other_400s(lanes, cast, route):
    method, path, body, secret, _query = routes(cast)[route]
    status, refused, _ = call(method, path, RFC_2231_UNKNOWN_CHARSET, body, secret=secret)
    assert status == 400
    status, hostile_query, answer = call(method, path, None, body, secret=secret, query=b"a=%00")
    assert status == 400 and b"Query string" in answer
    for headers in (refused, hostile_query):
        headers.pop(b"request-id"), headers.pop(b"content-length")
    assert refused == hostile_query


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/json; charset=UTF-8",
        'application/json; charset="utf-8"',
        "application/json; charset*=utf-8''utf-8",
        "application/json; charset=latin-1",  # a known charset (the JSON parser reads UTF-8 regardless)
    ],
)
def test_a_content_type_django_can_take_still_writes(lanes, cast, django_signals, content_type):
    method, path, body, secret, query = routes(cast)["note (POST lane)"]
    status, _headers, answer = call(method, path, content_type, body, secret=secret, query=query)
    assert status == 201, answer
    assert Entry.objects.filter(store=cast["store"]).count() == 1
    assert django_signals["started"] == django_signals["finished"] >= 1


def test_many_harmless_parameters_are_drfs_415_not_a_500(lanes, cast, django_signals):
    method, path, body, secret, query = routes(cast)["note (POST lane)"]
    content_type = "application/json; " + "; ".join(f"p{i}=v" for i in range(400))
    status, headers, answer = call(method, path, content_type, body, secret=secret, query=query)
    assert status == 415 and json.loads(answer)["error"]["type"] == "invalid_request_error"
    assert headers[b"request-id"].startswith(b"req_")
    assert not Entry.objects.exists()
    assert django_signals["started"] == django_signals["finished"] >= 1


def test_a_plain_get_with_a_harmless_content_type_is_answered(lanes, cast):
    method, path, body, secret, query = routes(cast)["wake (GET lane)"]
    for content_type in (None, "application/json", "text/plain; charset=utf-8"):
        status, _headers, answer = call(method, path, content_type, body, secret=secret, query=query)
        assert status == 200, (content_type, answer)


def test_ensure_with_a_good_content_type_writes(lanes, cast):
    """The control of the ensure case: the same request with a good header creates the store."""
    method, path, body, secret, query = routes(cast)["ensure (POST, no lane)"]
    before = Store.objects.count()
    status, _headers, answer = call(method, path, "application/json", body, secret=secret, query=query)
    assert status == 201, answer
    assert Store.objects.count() == before + 1


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", None),
        ("application/json", None),
        ("application/json; charset=utf-8", None),
        ("multipart/form-data; boundary=xyz", None),
        ("text/plain; a*=bogus''%41", "is malformed"),
        ("text/plain; charset=rot13", "names a codec that is not a character set"),
        ("text/plain; charset=nope", "names an unknown charset"),
        ("text/plain; charset=", "has an empty charset"),
        ("text/plain; charset=utf\x00-8", "names an unknown charset"),
    ],
)
def test_content_type_problem(value, problem):
    from config.middleware import content_type_problem

    assert content_type_problem(value) == problem
