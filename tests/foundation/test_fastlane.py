"""Fast lanes (config/fastlane.py, issue 17): the plain note is answered without Django's resolver and DRF's
dispatch, exactly as the view answers it; everything else reaches the view unchanged, nothing written.

Every comparison sends the same request through the front twice — lanes on, and lanes off
(``API_FAST_LANES = []``, the plain DRF view) — and compares status, headers and body; only the request id
(and, for two appends, the new entry's seq and time) may differ.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import uuid
from datetime import timedelta

import httpx
import pytest
from django.db import OperationalError, connections
from django.db.models.functions import Now

import config.asgi as front
from accounts import services as account_services
from accounts.models import TokenScope
from config import fastlane
from memories import services as memory_services
from memories.api.views import NOTE_LANE, RECALL_LANE, WAKE_LANE, ZOOM_LANE, NoteView
from memories.models import Entry
from sessions.models import Work
from stores.services import archive_store
from tests.agent.conftest import environment, make_session, run_session  # noqa: F401 (fixtures used below)
from tests.factories import ReaderGrantFactory, StoreFactory, UserFactory
from tests.foundation.test_api_stack import one_thread  # noqa: F401 (autouse: the front on one thread of ours)
from tests.foundation.test_faults import http_scope, run_asgi
from versions.api.views import MEMORY_CREATE_LANE, MEMORY_UPDATE_LANE
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def django_calls(monkeypatch):
    """The paths of the requests that reached Django's API handler (no lane answered them)."""
    calls: list[str] = []
    api = front.django_application.api

    def counting(environ, start_response):
        calls.append(environ["PATH_INFO"])
        return api(environ, start_response)

    monkeypatch.setattr(front.django_application, "api", counting)
    return calls


@pytest.fixture
def world(owner, make_client):
    """The cast: the owner's store and token, and every kind of caller and store a note can meet."""
    store = StoreFactory(owner=owner)
    reader = UserFactory(handle="reader")
    shared = StoreFactory(owner=UserFactory(handle="sharer"))
    ReaderGrantFactory(store=shared, user=reader)
    archived = StoreFactory(owner=owner, canonical=False)
    archive_store(store=archived)
    revoked = account_services.issue_token(user=owner)
    account_services.revoke_token(token=revoked.token)
    return {
        "store": store,
        "secret": make_client(owner).secret,
        "read_only": make_client(owner, scopes=[TokenScope.AGENT_READ.value]).secret,
        "reader": make_client(reader).secret,
        "stranger_store": StoreFactory(owner=UserFactory(handle="stranger")),
        "shared": shared,
        "archived": archived,
        "revoked": revoked.secret,
    }


def send(path: str, body, headers: dict[str, str] | None = None, *, content_type="application/json", query=b""):
    """POST through the ASGI front; returns (status, headers without Request-Id, body bytes, request id)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = [(b"host", b"testserver"), (b"content-length", str(len(raw)).encode())]
    if content_type is not None:
        head.append((b"content-type", content_type.encode()))
    head += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    start, message = run_asgi(http_scope("POST", path, head, query), [{"type": "http.request", "body": raw}])
    sent = dict(start["headers"])
    request_id = sent.pop(b"request-id").decode()
    return start["status"], sent, message["body"], request_id


def both(settings, *args, **kwargs):
    """`send` with the lanes on, then off: (answer on, answer off)."""
    on, lanes = send(*args, **kwargs), settings.API_FAST_LANES
    settings.API_FAST_LANES = []
    try:
        off = send(*args, **kwargs)
    finally:
        settings.API_FAST_LANES = lanes
    return on, off


def without_request_id(body: bytes, request_id: str):
    data = json.loads(body)
    if "error" in data:
        assert data["error"].pop("request_id", request_id) == request_id
        data.pop("request_id", None)
    return data


def note_path(store) -> str:
    return f"/api/v1/memories/{store.pk}/note"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_the_lanes_are_on():
    assert fastlane.active() == (NOTE_LANE, WAKE_LANE, ZOOM_LANE, RECALL_LANE, MEMORY_CREATE_LANE, MEMORY_UPDATE_LANE)


def test_a_plain_note_is_answered_by_the_lane_exactly_as_the_view_answers(settings, world, django_calls):
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(
        settings, note_path(world["store"]), {"body_md": "hello"}, bearer(world["secret"])
    )
    assert django_calls == [note_path(world["store"])]  # only the lanes-off run reached Django
    assert (s1, s2) == (201, 201)
    assert list(h1.items()) == list(h2.items())  # same headers, same order, same values
    assert r1 != r2 and r1.startswith("req_")
    one, two = json.loads(b1), json.loads(b2)
    assert (one["data"]["seq"], two["data"]["seq"]) == (0, 1)
    for data in (one, two):
        data["data"].pop("seq"), data["data"].pop("created_at")
    assert one == two
    assert list(json.loads(b1)["data"]) == list(json.loads(b2)["data"])  # key order too
    assert [e.body_md for e in Entry.objects.filter(store=world["store"]).order_by("seq")] == ["hello", "hello"]


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_the_lane_takes_the_idempotency_key_and_answers_a_replay_as_the_view(
    settings, world, django_calls, content_type
):
    path, key = note_path(world["store"]), {**bearer(world["secret"]), "Idempotency-Key": "k-1"}
    status, _headers, body, _rid = send(path, {"body_md": "once"}, key, content_type=content_type)
    assert status == 201 and json.loads(body)["data"]["client_nonce"] == "k-1"
    (s1, h1, b1, _), (s2, h2, b2, _) = both(settings, path, {"body_md": "once"}, key, content_type=content_type)
    assert django_calls == [path]
    assert (s1, s2) == (200, 200) and h1 == h2 and b1 == b2  # the replay is the original entry, byte for byte
    assert json.loads(b1)["meta"] == {"replayed": True}
    assert Entry.objects.filter(store=world["store"]).count() == 1


def _long():
    return {"body_md": "x" * 1025}


# (name, path of `world`, body, headers of `world`, send keywords): every one is the view's to answer.
DECLINED = [
    ("unknown field", "store", {"body_md": "a", "extra": 1}, "secret", {}),
    ("empty body_md", "store", {"body_md": ""}, "secret", {}),
    ("1,025 bytes", "store", _long(), "secret", {}),
    ("NUL", "store", {"body_md": "a\u0000b"}, "secret", {}),
    ("lone surrogate", "store", b'{"body_md": "\\ud800"}', "secret", {}),
    ("not JSON", "store", b'{"body_md": ', "secret", {}),
    ("bad UTF-8", "store", b'{"body_md": "\xff"}', "secret", {}),
    ("key twice", "store", b'{"body_md": "a", "body_md": "b"}', "secret", {}),
    ("a list", "store", b"[1]", "secret", {}),
    ("wrong type", "store", {"body_md": 5}, "secret", {}),
    ("no token", "store", {"body_md": "a"}, None, {}),
    ("malformed header", "store", {"body_md": "a"}, "Token abc", {}),
    ("unknown token", "store", {"body_md": "a"}, "Bearer mem_unknown", {}),
    ("revoked token", "store", {"body_md": "a"}, "revoked", {}),
    ("read-only token", "store", {"body_md": "a"}, "read_only", {}),
    ("environment key", "store", {"body_md": "a"}, "Bearer menv_unknown", {}),
    ("unreadable store", "stranger_store", {"body_md": "a"}, "secret", {}),
    ("missing store", "missing", {"body_md": "a"}, "secret", {}),
    ("read grant only", "shared", {"body_md": "a"}, "reader", {}),
    ("archived store", "archived", {"body_md": "a"}, "secret", {}),
    ("key and nonce differ", "store", {"body_md": "a", "client_nonce": "n"}, "secret+key", {}),
    ("text/plain", "store", {"body_md": "a"}, "secret", {"content_type": "text/plain"}),
    ("no content type", "store", {"body_md": "a"}, "secret", {"content_type": None}),
    ("accept html", "store", {"body_md": "a"}, "secret+html", {}),
    ("foreign host", "store", {"body_md": "a"}, "secret+host", {}),
]


NOT_PLAIN = {"no token", "text/plain", "no content type", "accept html", "foreign host"}


def _headers(world, which):
    if which is None:
        return {}
    if which.startswith(("Bearer ", "Token ")):
        return {"Authorization": which}
    secret, _, extra = which.partition("+")
    headers = bearer(world[secret])
    headers.update(
        {"key": {"Idempotency-Key": "other"}, "html": {"Accept": "text/html"}, "host": {"Host": "evil.example"}}.get(
            extra, {}
        )
    )
    return headers


@pytest.mark.parametrize(("name", "where", "body", "who", "extra"), DECLINED, ids=[c[0] for c in DECLINED])
def test_every_refusal_is_the_views_answer_and_writes_nothing(
    settings, world, django_calls, name, where, body, who, extra
):
    path = f"/api/v1/memories/{uuid.uuid4()}/note" if where == "missing" else note_path(world[where])
    headers = _headers(world, who)  # a second Host header makes the host "testserver,evil.example": refused
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(settings, path, body, headers, **extra)
    # Not the plain case: Django answers (both runs). Otherwise the lane answers with the view's handle_exception.
    assert len(django_calls) == (2 if name in NOT_PLAIN else 1)
    assert s1 == s2 and s1 >= 400, (s1, b1)
    assert h1 == h2
    assert without_request_id(b1, r1) == without_request_id(b2, r2)
    assert Entry.objects.count() == 0


def test_a_query_string_is_the_views_to_answer(settings, world, django_calls):
    """The lane declines a query string; the view refuses the unknown parameter (400 naming it), the same
    answer with lanes on and off, and nothing is written."""
    path, headers = note_path(world["store"]), bearer(world["secret"])
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(settings, path, {"body_md": "a"}, headers, query=b"x=1")
    assert (s1, s2) == (400, 400) and h1 == h2 and len(django_calls) == 2
    assert without_request_id(b1, r1) == without_request_id(b2, r2)
    assert not Entry.objects.exists()


def test_a_nonce_conflict_is_answered_as_the_view_answers_it(settings, world, django_calls):
    path, headers = note_path(world["store"]), bearer(world["secret"])
    assert send(path, {"body_md": "first", "client_nonce": "n1"}, headers)[0] == 201
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(settings, path, {"body_md": "second", "client_nonce": "n1"}, headers)
    assert (s1, s2) == (409, 409) and h1 == h2 and without_request_id(b1, r1) == without_request_id(b2, r2)
    assert len(django_calls) == 1  # the lanes-off run; the lane answered its 409 itself
    assert list(Entry.objects.values_list("body_md", flat=True)) == ["first"]


def test_a_database_fault_in_the_lane_is_the_views_503_and_is_not_run_twice(settings, world, django_calls, monkeypatch):
    attempts = []

    def failing(**kwargs):
        attempts.append(kwargs)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(memory_services, "append_entry", failing)
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(
        settings, note_path(world["store"]), {"body_md": "a"}, bearer(world["secret"])
    )
    assert (s1, s2) == (503, 503) and h1 == h2 and h1[b"retry-after"]
    assert without_request_id(b1, r1) == without_request_id(b2, r2)
    assert len(attempts) == 2 and len(django_calls) == 1  # one attempt by the lane, one by the view: never both


def test_a_failure_after_the_append_is_a_500_and_never_a_second_append(world, django_calls, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(fastlane.JSONRenderer, "render", broken)
    status, _headers, body, _rid = send(note_path(world["store"]), {"body_md": "once"}, bearer(world["secret"]))
    assert status == 500 and json.loads(body)["error"]["type"] == "api_error"
    assert django_calls == []
    assert list(Entry.objects.values_list("body_md", flat=True)) == ["once"]


def test_a_lane_whose_route_is_another_views_turns_the_lanes_off(settings, world, django_calls, caplog):
    settings.API_FAST_LANES = ["tests.foundation.test_fastlane.WRONG_LANE"]
    with caplog.at_level(logging.WARNING, logger="memories.fastlane"):
        assert fastlane.active() == ()
    assert "does not resolve to NoteView" in caplog.text
    assert send(note_path(world["store"]), {"body_md": "a"}, bearer(world["secret"]))[0] == 201
    assert len(django_calls) == 1


def test_an_api_middleware_the_lanes_cannot_run_turns_them_off(settings, caplog):
    settings.API_MIDDLEWARE = [*settings.API_MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    with caplog.at_level(logging.WARNING, logger="memories.fastlane"):
        assert fastlane.active() == ()
    assert "CsrfViewMiddleware does more than" in caplog.text


WRONG_LANE = fastlane.Lane(
    method="POST",
    pattern=rf"/api/v1/memories/(?P<pk>{fastlane.UUID_GROUP})/wake",
    view=NoteView,
    example={"pk": "00000000-0000-4000-8000-000000000000"},
)


def test_parallel_notes_through_the_lane_get_every_seq_once(world, django_calls, monkeypatch):
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="django")
    monkeypatch.setattr(front, "_pool", pool)
    clients, each, start = 8, 25, threading.Barrier(8)
    path, headers = note_path(world["store"]), bearer(world["secret"])

    def client(c: int) -> list[int]:
        start.wait()
        seqs = []
        for i in range(each):
            status, _h, body, _r = send(path, {"body_md": f"{c}-{i}", "client_nonce": f"{c}-{i}"}, headers)
            assert status == 201, body
            seqs.append(json.loads(body)["data"]["seq"])
        return seqs

    try:
        with concurrent.futures.ThreadPoolExecutor(clients) as callers:
            seqs = [s for part in callers.map(client, range(clients)) for s in part]
    finally:  # one closing task per pool thread: each waits until all eight run
        gate = threading.Barrier(8)
        for _ in range(8):
            pool.submit(lambda: (gate.wait(timeout=10), connections.close_all()))
        pool.shutdown()
    assert sorted(seqs) == list(range(clients * each)) and django_calls == []
    world["store"].refresh_from_db()
    assert world["store"].entry_count == clients * each == Entry.objects.filter(store=world["store"]).count()


@pytest.fixture(scope="module")
def served(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn as `bin/serve` runs it (tests/mcp/conftest.py), against the test database."""
    from tests.mcp.conftest import gunicorn

    with gunicorn(tmp_path_factory.mktemp("fastlane")) as server:
        yield server


def test_sixteen_clients_over_real_http_append_without_gap_or_duplicate(served, world):
    path, headers = note_path(world["store"]), bearer(world["secret"])
    clients, each, start = 16, 25, threading.Barrier(16)

    def client(c: int) -> list[int]:
        with httpx.Client(base_url=served.url, headers=headers, timeout=30) as http:
            start.wait()
            out = []
            for i in range(each):
                response = http.post(path, json={"body_md": f"{c}/{i}"})
                assert response.status_code == 201, response.text
                assert response.headers["request-id"].startswith("req_")
                out.append(response.json()["data"]["seq"])
            replay = http.post(path, json={"body_md": "r", "client_nonce": f"r{c}"})
            again = http.post(path, json={"body_md": "r", "client_nonce": f"r{c}"})
            assert (replay.status_code, again.status_code) == (201, 200)
            assert again.json()["data"] == replay.json()["data"]
            return [*out, replay.json()["data"]["seq"]]

    with concurrent.futures.ThreadPoolExecutor(clients) as callers:
        seqs = [s for part in callers.map(client, range(clients)) for s in part]
    assert sorted(seqs) == list(range(clients * (each + 1)))
    assert Entry.objects.filter(store=world["store"]).count() == clients * (each + 1)


# --- file memories: create and update (MEMORY_CREATE_LANE, MEMORY_UPDATE_LANE) ----------------------------


def memories_path(store) -> str:
    return f"/api/v1/memory_stores/{store.pk}/memories"


def create(world, path="/notes/a.md", content="alpha"):
    status, _h, body, _r = send(
        memories_path(world["store"]), {"path": path, "content": content}, bearer(world["secret"])
    )
    assert status == 200, body
    return json.loads(body)


def _same_shape(one: bytes, two: bytes, *varying: str) -> None:
    a, b = json.loads(one), json.loads(two)
    assert list(a) == list(b)
    assert {k: v for k, v in a.items() if k not in varying} == {k: v for k, v in b.items() if k not in varying}


def test_a_plain_create_and_update_are_answered_by_the_lanes_exactly_as_the_views(settings, world, django_calls):
    url, headers = memories_path(world["store"]), bearer(world["secret"])
    on = send(url, {"path": "/a.md", "content": "same"}, headers)
    settings.API_FAST_LANES = []
    off = send(url, {"path": "/b.md", "content": "same"}, headers)
    assert django_calls == [url]
    assert on[0] == off[0] == 200 and on[1] == off[1]
    _same_shape(on[2], off[2], "id", "path", "memory_version_id", "created_at", "updated_at")
    settings.API_FAST_LANES = [NOTE_LANE_PATH, *FILE_LANES]
    first, second = json.loads(on[2]), json.loads(off[2])
    sha = first["content_sha256"]
    up = send(
        f"{url}/{first['id']}",
        {"content": "new", "precondition": {"type": "content_sha256", "content_sha256": sha}},
        headers,
    )
    settings.API_FAST_LANES = []
    up_off = send(
        f"{url}/{second['id']}",
        {"content": "new", "precondition": {"type": "content_sha256", "content_sha256": sha}},
        headers,
    )
    assert len(django_calls) == 2
    assert up[0] == up_off[0] == 200 and up[1] == up_off[1]
    _same_shape(up[2], up_off[2], "id", "path", "memory_version_id", "created_at", "updated_at")
    assert json.loads(up[2])["content_sha256"] != sha
    assert Memory.objects.filter(store=world["store"]).count() == 2


NOTE_LANE_PATH = "memories.api.views.NOTE_LANE"
FILE_LANES = ["versions.api.views.MEMORY_CREATE_LANE", "versions.api.views.MEMORY_UPDATE_LANE"]


def test_retries_that_write_nothing_are_answered_by_the_lanes_as_the_views(settings, world, django_calls):
    made = create(world)
    url, headers = memories_path(world["store"]), bearer(world["secret"])
    retry = both(settings, url, {"path": "/notes/a.md", "content": "alpha"}, headers)
    noop = both(
        settings,
        f"{url}/{made['id']}",
        {"content": "alpha", "precondition": {"type": "content_sha256", "content_sha256": "0" * 64}},
        headers,
    )
    for (s1, h1, b1, _), (s2, h2, b2, _) in (retry, noop):
        assert (s1, s2) == (200, 200) and h1 == h2 and b1 == b2
    assert len(django_calls) == 2  # the lanes-off runs only
    assert Memory.objects.count() == 1


FILE_DECLINED = [
    ("path taken", "create", {"path": "/notes/a.md", "content": "other"}, "secret"),
    ("ancestor is a memory", "create", {"path": "/notes/a.md/b", "content": "x"}, "secret"),
    ("relative path", "create", {"path": "notes/b.md", "content": "x"}, "secret"),
    ("dot segment", "create", {"path": "/notes/../b.md", "content": "x"}, "secret"),
    ("content too big", "create", {"path": "/big.md", "content": "x" * 102_401}, "secret"),
    ("NUL in path", "create", {"path": "/a\u0000.md", "content": "x"}, "secret"),
    ("unknown field", "create", {"path": "/c.md", "content": "x", "mode": 1}, "secret"),
    ("read-only token", "create", {"path": "/c.md", "content": "x"}, "read_only"),
    (
        "stale precondition",
        "update",
        {"content": "beta", "precondition": {"type": "content_sha256", "content_sha256": "0" * 64}},
        "secret",
    ),
    ("rename onto a taken path", "update", {"path": "/notes/b.md"}, "secret"),
    ("wrong type", "update", {"content": 5}, "secret"),
    ("missing memory", "missing memory", {"content": "beta"}, "secret"),
    ("unreadable store", "stranger", {"path": "/c.md", "content": "x"}, "secret"),
    ("archived store", "archived", {"path": "/c.md", "content": "x"}, "secret"),
]


@pytest.mark.parametrize(("name", "where", "body", "who"), FILE_DECLINED, ids=[c[0] for c in FILE_DECLINED])
def test_every_refused_file_write_is_the_views_answer_and_writes_nothing(
    settings, world, django_calls, name, where, body, who
):
    made = create(world)
    create(world, "/notes/b.md", "bravo")
    versions_before = list(Memory.objects.order_by("path").values_list("path", "content_sha256", "current_version_id"))
    base = memories_path(world["store"])
    path = {
        "create": base,
        "update": f"{base}/{made['id']}",
        "missing memory": f"{base}/{uuid.uuid4()}",
        "stranger": memories_path(world["stranger_store"]),
        "archived": memories_path(world["archived"]),
    }[where]
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(settings, path, body, bearer(world[who]))
    assert len(django_calls) == 1  # the lanes-off run; the lane answered through the view's handle_exception
    assert s1 == s2 and s1 >= 400, (s1, b1)
    assert h1 == h2 and without_request_id(b1, r1) == without_request_id(b2, r2)
    after = list(Memory.objects.order_by("path").values_list("path", "content_sha256", "current_version_id"))
    assert after == versions_before


def test_a_view_query_is_the_views_to_answer(settings, world, django_calls):
    url, headers = memories_path(world["store"]), bearer(world["secret"])
    status, _h, body, _r = send(url, {"path": "/q.md", "content": "full"}, headers, query=b"view=full")
    assert status == 200 and json.loads(body)["content"] == "full" and len(django_calls) == 1


# --- a session's per-work credential through the lanes (the view's own authenticators and fence) -------


def test_a_per_work_credential_writes_through_the_lane_and_a_lapsed_one_gets_the_views_409(
    settings,
    run_session,  # noqa: F811 (the fixture imported above)
    owner,
    django_calls,
):
    notes = StoreFactory(owner=owner, canonical=False, name="Team Notes")
    running = run_session(notes)
    agent = {"Authorization": f"Bearer {running.token}"}
    (s1, h1, b1, _), (s2, h2, b2, _) = both(settings, memories_path(notes), {"path": "/w.md", "content": "w"}, agent)
    assert (s1, s2) == (200, 200) and h1 == h2 and b1 == b2  # the second is the idempotent retry of the first
    assert len(django_calls) == 1
    made = json.loads(b1)
    version = Version.objects.get(pk=made["memory_version_id"])
    assert version.session_id == running.session.pk  # written as the session's actor, through the lane
    Work.objects.filter(pk=running.work.pk).update(lease_expires_at=Now() - timedelta(milliseconds=1))
    (s1, h1, b1, r1), (s2, h2, b2, r2) = both(settings, memories_path(notes), {"path": "/x.md", "content": "x"}, agent)
    assert (s1, s2) == (409, 409) and h1 == h2 and without_request_id(b1, r1) == without_request_id(b2, r2)
    assert json.loads(b1)["error"]["details"]["reason"] == "lease_expired"
    assert len(django_calls) == 2 and not Memory.objects.filter(path="/x.md").exists()


class _OwnInitial(NoteView):
    def initial(self, request, *args, **kwargs):  # e.g. a check of its own: a lane would skip it
        super().initial(request, *args, **kwargs)


OWN_INITIAL_LANE = fastlane.Lane(
    method="POST",
    pattern=NOTE_LANE.pattern,
    view=_OwnInitial,
    example={"pk": "00000000-0000-4000-8000-000000000000"},
)


def test_a_view_overriding_drfs_dispatch_machinery_turns_the_lanes_off(settings, caplog):
    settings.API_FAST_LANES = ["tests.foundation.test_fastlane.OWN_INITIAL_LANE"]
    with caplog.at_level(logging.WARNING, logger="memories.fastlane"):
        assert fastlane.active() == ()
    assert "_OwnInitial overrides initial" in caplog.text


@pytest.mark.parametrize("refused", [False, True])
def test_request_started_and_finished_stay_paired(world, refused):  # refused: declined by the host check
    from django.core import signals

    seen = []

    def started(**kwargs):
        seen.append("started")

    def finished(**kwargs):
        seen.append("finished")

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        headers = {**bearer(world["secret"]), **({"Host": "evil.example"} if refused else {})}
        send(note_path(world["store"]), {"body_md": "a"}, headers)  # the host check refuses: lane, then Django
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert seen == ["started", "finished"] * (2 if refused else 1)


def test_the_official_sdk_creates_and_updates_file_memories_through_the_lanes(world, django_calls):
    """The `anthropic` SDK's own requests (its headers, its JSON) are the plain case; its 409 is the view's own
    (handle_exception), rendered without Django's dispatch."""
    import asyncio

    import httpx2  # the SDK's own HTTP client package (a dependency of the pinned anthropic)
    from anthropic import AsyncAnthropic, ConflictError

    store_id = str(world["store"].pk)

    async def run():
        transport = httpx2.ASGITransport(app=front.application)
        async with httpx2.AsyncClient(transport=transport, base_url="http://testserver") as http:
            sdk = AsyncAnthropic(
                base_url="http://testserver/api", auth_token=world["secret"], http_client=http, max_retries=0
            )
            made = await sdk.beta.memory_stores.memories.create(store_id, path="/sdk.md", content="one")
            updated = await sdk.beta.memory_stores.memories.update(
                made.id,
                memory_store_id=store_id,
                content="two",
                precondition={"type": "content_sha256", "content_sha256": made.content_sha256},
            )
            lanes_only = list(django_calls)
            with pytest.raises(ConflictError):
                await sdk.beta.memory_stores.memories.create(store_id, path="/sdk.md", content="other")
            return made, updated, lanes_only

    made, updated, lanes_only = asyncio.run(run())
    assert lanes_only == [] and django_calls == []  # all three, the 409 included, answered by the lanes
    assert updated.id == made.id and updated.memory_version_id != made.memory_version_id
    assert Memory.objects.get(pk=made.id).content == "two"


def test_the_lanes_run_the_hostile_input_screening_itself(world, django_calls, monkeypatch):
    """A refusal the screening adds later (here: every request) reaches the lanes without a change to them."""
    from config.errors import error_response
    from config.middleware import HostileInputMiddleware

    def refuse_all(self, request):
        return error_response(request, status=400, type="invalid_request_error", message="Screened.")

    with monkeypatch.context() as patch:
        patch.setattr(HostileInputMiddleware, "screen", refuse_all)
        fastlane._load.cache_clear()
        try:
            status, _h, body, _r = send(note_path(world["store"]), {"body_md": "a"}, bearer(world["secret"]))
        finally:
            fastlane._load.cache_clear()
    assert status == 400 and json.loads(body)["error"]["message"] == "Screened."
    assert len(django_calls) == 1 and Entry.objects.count() == 0


# --- wake, zoom and recall (GET lanes) ------------------------------------------------------------------


def get(path: str, query: bytes = b"", headers: dict[str, str] | None = None, body: bytes | None = None):
    """GET through the ASGI front; returns (status, headers without Request-Id, body bytes, request id)."""
    head = [(b"host", b"testserver")] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    messages = None
    if body is not None:
        head.append((b"content-length", str(len(body)).encode()))
        messages = [{"type": "http.request", "body": body}]
    start, message = run_asgi(http_scope("GET", path, head, query), messages)
    sent = dict(start["headers"])
    return start["status"], sent, message["body"], sent.pop(b"request-id").decode()


def get_both(settings, *args, **kwargs):
    on, lanes = get(*args, **kwargs), settings.API_FAST_LANES
    settings.API_FAST_LANES = []
    try:
        off = get(*args, **kwargs)
    finally:
        settings.API_FAST_LANES = lanes
    return on, off


@pytest.fixture
def logged(world):
    """The owner's store with five entries (seq 0–4), one of them naming CVE-2024-1234."""
    for i in range(5):
        text = "patched CVE-2024-1234 today" if i == 2 else f"entry {i}"
        memory_services.append_entry(store=world["store"], author=world["store"].owner, body_md=text)
    return world


GETS_SERVED = [
    ("wake", b""),
    ("wake", b"budget=64"),
    ("zoom", b"range=2"),
    ("zoom", b"range=0-1"),
    ("recall", b"pattern=cve-%5Cd%2B"),
    ("recall", b"pattern=entry&limit=2"),
    ("recall", b"pattern=entry&case_sensitive=true"),
]


@pytest.mark.parametrize(("what", "query"), GETS_SERVED, ids=[f"{w}?{q.decode()}" for w, q in GETS_SERVED])
def test_a_plain_read_is_answered_by_the_lane_exactly_as_the_view_answers(settings, logged, django_calls, what, query):
    path = f"/api/v1/memories/{logged['store'].pk}/{what}"
    (s1, h1, b1, _), (s2, h2, b2, _) = get_both(settings, path, query, bearer(logged["secret"]))
    assert django_calls == [path]
    assert (s1, s2) == (200, 200) and list(h1.items()) == list(h2.items())
    if what == "recall":  # the cursor is signed afresh per call; everything else is the same bytes
        one, two = json.loads(b1), json.loads(b2)
        assert (one["meta"].pop("next_cursor") is None) == (two["meta"].pop("next_cursor") is None)
        assert one == two
    else:
        assert b1 == b2


def quote(text: str) -> bytes:
    from urllib.parse import quote as percent

    return percent(text, safe="").encode()


def test_a_recall_cursor_from_the_lane_pages_on_through_the_view_and_back(settings, logged, django_calls):
    path, auth = f"/api/v1/memories/{logged['store'].pk}/recall", bearer(logged["secret"])
    first = json.loads(get(path, b"pattern=entry&limit=1", auth)[2])
    settings.API_FAST_LANES = []
    second = json.loads(get(path, b"pattern=entry&limit=1&cursor=" + quote(first["meta"]["next_cursor"]), auth)[2])
    settings.API_FAST_LANES = ["memories.api.views.RECALL_LANE"]
    third = json.loads(get(path, b"pattern=entry&limit=1&cursor=" + quote(second["meta"]["next_cursor"]), auth)[2])
    seqs = [m["seq"] for page in (first, second, third) for m in page["data"]]
    assert seqs == [4, 3, 1] and third["meta"]["next_cursor"] is not None
    assert len(django_calls) == 1


GETS_REFUSED = [
    ("recall", b"pattern=(", "secret"),  # not RE2
    ("recall", b"pattern=a%00b", "secret"),  # NUL: the hostile-input screening
    ("recall", b"pattern=%ff", "secret"),  # bad UTF-8: the screening
    ("recall", b"pattern=a&cursor=tampered", "secret"),
    ("recall", b"pattern=a&limit=0", "secret"),
    ("recall", b"", "secret"),  # no pattern
    ("recall", b"pattern=a&extra=1", "secret"),  # unknown parameter
    ("recall", b"pattern=a", "Bearer mem_unknown"),
    ("recall", b"pattern=a", "revoked"),
    ("wake", b"budget=8", "secret"),
    ("wake", b"", "Token abc"),
    ("wake", b"snapshot=bogus", "secret"),
    ("zoom", b"range=1-2", "secret"),  # not aligned
    ("zoom", b"range=99", "secret"),  # past the end
    ("zoom", b"", "secret"),
    ("wake", b"", "reader"),  # a stranger to the owner's store: 404
]


@pytest.mark.parametrize(("what", "query", "who"), GETS_REFUSED, ids=[f"{w}?{q!r}-{c}" for w, q, c in GETS_REFUSED])
def test_every_refused_read_is_the_views_answer(settings, logged, django_calls, what, query, who):
    path = f"/api/v1/memories/{logged['store'].pk}/{what}"
    (s1, h1, b1, r1), (s2, h2, b2, r2) = get_both(settings, path, query, _headers(logged, who))
    screened = b"%00" in query or b"%ff" in query  # the hostile-input screening refuses: Django answers both
    assert len(django_calls) == (2 if screened else 1)
    assert s1 == s2 and s1 >= 400, (s1, b1)
    assert h1 == h2 and without_request_id(b1, r1) == without_request_id(b2, r2)


def test_a_get_or_head_with_a_body_is_refused_before_any_view(settings, logged, django_calls):
    """A GET's body was read by nobody: `{"block_ms": 900}` on a poll was ignored where an unknown parameter is
    a 400 (helper-97). The screening refuses it, lanes on and off, sent whole or chunked; an empty body passes."""
    path, auth = f"/api/v1/memories/{logged['store'].pk}/wake", bearer(logged["secret"])
    for status, _headers, body, _rid in get_both(settings, path, b"", auth, body=b'{"budget": 64}'):
        assert status == 400, body
        message = json.loads(body)["error"]["message"]
        assert message == "A GET request takes no body; send its parameters in the query string."
    assert get(path, b"", auth, body=b"")[0] == 200
    chunked = [(b"host", b"testserver"), (b"transfer-encoding", b"chunked")]
    chunked += [(k.lower().encode(), v.encode()) for k, v in auth.items()]
    for body, status in ((b"{}", 400), (b"", 200)):
        start, _message = run_asgi(http_scope("GET", path, chunked), [{"type": "http.request", "body": body}])
        assert start["status"] == status, body
    head = [(b"host", b"testserver"), (b"content-length", b"2"), *chunked[2:]]
    start, _message = run_asgi(http_scope("HEAD", path, head), [{"type": "http.request", "body": b"{}"}])
    assert start["status"] == 400
    poll = f"/api/v1/environments/{uuid.uuid4()}/work/poll"  # before any lookup: nothing to find or claim
    assert get(poll, b"", auth, body=b'{"block_ms": 900}')[0] == 400
    # a route that takes no GET keeps its 405 (schemathesis), an unknown path its 404
    assert get(note_path(logged["store"]), b"", auth, body=b'{"body_md": "x"}')[0] == 405
    assert get("/api/v1/no-such-route", b"", auth, body=b"{}")[0] == 404
    assert get("/mcp", b"", auth, body=b"x")[0] == 405  # a function view answers for itself (helper-100)
    assert get("/api/v1/records", b"", auth, body=b"x")[0] == 410


def test_a_get_with_a_body_or_without_a_credential_is_the_views(settings, logged, django_calls):
    path, auth = f"/api/v1/memories/{logged['store'].pk}/wake", bearer(logged["secret"])
    with_body = get_both(settings, path, b"", auth, body=b"{}")
    anonymous = get_both(settings, path, b"", {})
    assert len(django_calls) == 4
    for (s1, h1, b1, r1), (s2, h2, b2, r2) in (with_body, anonymous):
        assert s1 == s2 and h1 == h2 and without_request_id(b1, r1) == without_request_id(b2, r2)
