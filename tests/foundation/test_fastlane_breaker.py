"""Breaking the fast lanes (config/fastlane.py): requests whose answer with lanes on differs from the view's.

Each test sends the same request through the real ASGI front (`config.asgi.application`) with the lanes on
and with them off (``API_FAST_LANES = []``), as tests/foundation/test_fastlane.py does, and states what the
contract of config/fastlane.py promises: the same status, headers and body, and nothing written by a request
the view refuses. Every test here fails against the lanes as committed; each docstring says what happens.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from memories.models import Entry
from tests.foundation import test_fastlane as lanes_tests
from tests.foundation.test_fastlane import bearer, create, memories_path, note_path, without_request_id
from tests.foundation.test_faults import http_scope, run_asgi
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db(transaction=True)

# The harness's fixtures (the front on one thread of its own, the cast, the Django-call counter, gunicorn).
one_thread, world, django_calls, served = (
    lanes_tests.one_thread,
    lanes_tests.world,
    lanes_tests.django_calls,
    lanes_tests.served,
)


def raw_send(path: str, raw: bytes, head: list[tuple[bytes, bytes]], *, root_path: str = ""):
    """POST `raw` with exactly the header list `head` (duplicates, empty values and odd bytes kept as given);
    returns (status, headers without Request-Id, body, request id)."""
    scope = http_scope("POST", path, head)
    scope["root_path"] = root_path
    start, message = run_asgi(scope, [{"type": "http.request", "body": raw}])
    sent = dict(start["headers"])
    request_id = sent.pop(b"request-id", b"").decode()
    return start["status"], sent, message["body"], request_id


def raw_both(settings, *args, **kwargs):
    """`raw_send` with the lanes on, then off."""
    on, lanes = raw_send(*args, **kwargs), settings.API_FAST_LANES
    settings.API_FAST_LANES = []
    try:
        off = raw_send(*args, **kwargs)
    finally:
        settings.API_FAST_LANES = lanes
    return on, off


def plain_head(secret: str, raw: bytes, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [
        (b"host", b"testserver"),
        (b"content-length", str(len(raw)).encode()),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {secret}".encode()),
        *extra,
    ]


def assert_same(on, off):
    (s1, h1, b1, r1), (s2, h2, b2, r2) = on, off
    assert s1 == s2, (s1, b1, s2, b2)
    assert list(h1.items()) == list(h2.items())
    assert without_request_id(b1, r1) == without_request_id(b2, r2)


def _file_state():
    return sorted(Memory.objects.values_list("path", "content_sha256", "current_version_id")), Version.objects.count()


# --- 1. `Accept:` with an empty value -------------------------------------------------------------------


@pytest.mark.parametrize("route", ["note", "create", "update"])
def test_an_empty_accept_header_is_the_views_406_and_the_lane_writes_nothing(settings, world, django_calls, route):
    """`_plain` lets ``Accept:`` with an empty value through (``""`` is in ACCEPTED), but DRF's content
    negotiation reads the empty header as a media range matching no renderer: the view answers 406
    "Could not satisfy the request Accept header." before any write. With the lanes on the request is
    answered 200/201 and written (an entry appended, a memory created, a version added)."""
    if route == "note":
        path, body = note_path(world["store"]), {"body_md": "hello"}
    elif route == "create":
        path, body = memories_path(world["store"]), {"path": "/new.md", "content": "fresh"}
    else:
        made = create(world)
        path, body = f"{memories_path(world['store'])}/{made['id']}", {"content": "changed"}
    entries, files = Entry.objects.count(), _file_state()
    raw = json.dumps(body).encode()
    on, off = raw_both(settings, path, raw, plain_head(world["secret"], raw, (b"accept", b"")))
    assert off[0] == 406  # the view's answer
    assert (Entry.objects.count(), _file_state()) == (entries, files), "the lane wrote what the view refuses"
    assert_same(on, off)
    assert len(django_calls) == 2


def test_an_empty_accept_header_over_real_http_is_not_written(served, world):
    """The same through gunicorn as bin/serve runs it (lanes on by default): gunicorn passes ``Accept:``
    with an empty value on to the application, and the note is appended (201) where the view says 406."""
    path = note_path(world["store"])
    with httpx.Client(base_url=served.url, headers=bearer(world["secret"]), timeout=30) as http:
        response = http.post(path, json={"body_md": "hello"}, headers={"Accept": ""})
    assert response.status_code == 406, response.text
    assert Entry.objects.count() == 0


# --- 2. a middleware's request side refusing with an exception ------------------------------------------


def test_a_user_agent_refused_by_common_middleware_is_the_views_403_not_a_500(settings, world, django_calls):
    """With ``DISALLOWED_USER_AGENTS`` set, CommonMiddleware.process_request *raises* PermissionDenied. The
    lane only turns DisallowedHost into a decline; PermissionDenied escapes `fastlane.answer` and the front
    answers 500 api_error (logged as "the WSGI application failed"). Without lanes Django's handler renders
    it as handler403: 403 permission_error. The contract: a middleware refusing -> Django answers."""
    settings.DISALLOWED_USER_AGENTS = [re.compile(r"badbot")]
    raw = json.dumps({"body_md": "hello"}).encode()
    head = plain_head(world["secret"], raw, (b"user-agent", b"badbot/1.0"))
    on, off = raw_both(settings, note_path(world["store"]), raw, head)
    assert off[0] == 403
    assert_same(on, off)
    assert Entry.objects.count() == 0


# --- 3. a Content-Length of non-ASCII digits ------------------------------------------------------------


def test_a_content_length_of_non_ascii_digits_is_the_views_400_not_a_500(settings, world, django_calls):
    """``Content-Length: \\xb2`` (latin-1 SUPERSCRIPT TWO): `_plain` checks ``str.isdigit()``, which is true
    for "²", then ``int("²")`` in `answer` raises ValueError outside any try — the front answers 500.
    Without lanes HostileInputMiddleware answers 400 "Bad Content-Length.". (gunicorn 27 refuses this header
    itself, so this reaches the lanes only through `config.asgi.application` under another ASGI server;
    `answer` documents that it raises only what rendering a success raises.)"""
    raw = b"{}"
    head = plain_head(world["secret"], raw)
    head[1] = (b"content-length", b"\xb2")
    on, off = raw_both(settings, note_path(world["store"]), raw, head)
    assert off[0] == 400
    assert_same(on, off)


# --- 4. a declined request must reach Django with its environ unchanged ---------------------------------


def test_a_declined_request_under_a_non_ascii_root_path_gets_the_views_answer(settings, world, django_calls):
    """Under a mount prefix that is not ASCII (gunicorn ``--root-path /é`` behind a proxy that strips it)
    every request the lane declines becomes a 500: the lane's own ``WSGIRequest(environ)`` rewrites
    ``environ["SCRIPT_NAME"]`` in place (WSGIRequest stores the UTF-8-decoded script name into META, which
    *is* the environ), so Django's handler then decodes an already-decoded value and raises
    UnicodeDecodeError. Without lanes the same request is the view's answer (here: 406 for an Accept it cannot
    satisfy, which the lane declines). The contract: "Django then answers from the environ as it came"."""
    raw = json.dumps({"body_md": "hello"}).encode()
    path = note_path(world["store"])
    head = [*plain_head(world["secret"], raw), (b"accept", b"text/html")]  # declined: the view's 406
    on, off = raw_both(settings, path, raw, head, root_path="/\u00e9")
    assert off[0] == 406
    assert_same(on, off)
    assert len(django_calls) == 2


def test_a_declined_request_leaves_the_environ_as_it_came(world):
    """The same at the unit: `fastlane.answer` returning None (declined) must leave every key of the environ
    but ``wsgi.input`` as it was; SCRIPT_NAME comes back changed."""
    import io

    from config import fastlane
    from config.asgi import _environ

    raw = json.dumps({"body_md": "hello"}).encode()
    head = [*plain_head(world["secret"], raw), (b"accept", b"text/html")]
    scope = http_scope("POST", note_path(world["store"]), head)
    scope["root_path"] = "/\u00e9"
    environ = _environ(scope, raw)
    before = {k: v for k, v in environ.items() if k != "wsgi.input"}
    assert fastlane.answer(environ) is None  # an Accept the lane leaves to the view: declined
    environ["wsgi.input"] = io.BytesIO()
    after = {k: v for k, v in environ.items() if k != "wsgi.input"}
    assert after == before
