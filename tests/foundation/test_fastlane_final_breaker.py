# ruff: noqa: F811 (pytest fixtures imported by name and taken as arguments)
"""Final fast-lane breaker: renames with preconditions, big numbers, uppercase/braced UUIDs, nonce + key,
per-work credentials on the lanes (GET lanes, read-only attachments). Each compares lanes on and off."""

from __future__ import annotations

import json

import pytest

from memories.models import Entry
from tests.agent.conftest import environment, make_session, run_session  # noqa: F401 (fixtures)
from tests.factories import StoreFactory
from tests.foundation.test_api_stack import one_thread  # noqa: F401 (autouse)
from tests.foundation.test_fastlane import (
    bearer,
    both,
    create,
    get_both,
    logged,  # noqa: F401 (fixture)
    memories_path,
    note_path,
    send,
    without_request_id,
    world,  # noqa: F401 (fixture)
)
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db(transaction=True)


def _same(on, off):
    (s1, h1, b1, r1), (s2, h2, b2, r2) = on, off
    assert s1 == s2, (s1, b1, s2, b2)
    assert h1 == h2
    if s1 >= 400:
        assert without_request_id(b1, r1) == without_request_id(b2, r2)
    return json.loads(b1), json.loads(b2)


def _state():
    return list(Memory.objects.order_by("path").values_list("path", "content_sha256", "current_version_id"))


UPDATES = [
    (
        "rename, stale precondition",
        lambda sha: {"path": "/r.md", "precondition": {"type": "content_sha256", "content_sha256": "0" * 64}},
    ),
    (
        "rename, good precondition",
        lambda sha: {"path": "/r.md", "precondition": {"type": "content_sha256", "content_sha256": sha}},
    ),
    (
        "rename+content, stale",
        lambda sha: {
            "path": "/r.md",
            "content": "z",
            "precondition": {"type": "content_sha256", "content_sha256": "0" * 64},
        },
    ),
    ("rename to same path", lambda sha: {"path": "/notes/a.md"}),
    ("rename to own ancestor", lambda sha: {"path": "/notes"}),
    ("rename to taken ancestor child", lambda sha: {"path": "/notes/b.md/c"}),
    ("empty body object", lambda sha: {}),
    ("null precondition", lambda sha: {"content": "q", "precondition": None}),
    ("precondition wrong type", lambda sha: {"content": "q", "precondition": {"type": "etag", "content_sha256": sha}}),
    (
        "precondition uppercase sha",
        lambda sha: {"content": "q", "precondition": {"type": "content_sha256", "content_sha256": sha.upper()}},
    ),
]


@pytest.mark.parametrize(("name", "make"), UPDATES, ids=[u[0] for u in UPDATES])
def test_an_update_with_renames_and_preconditions_is_the_views_answer(settings, world, name, make):
    """Lanes on against one memory, lanes off against an identical twin in a second store."""
    other = StoreFactory(owner=world["store"].owner, canonical=False)
    twin_world = {**world, "store": other}
    made, twin = create(world), create(twin_world)
    create(world, "/notes/b.md", "bravo"), create(twin_world, "/notes/b.md", "bravo")
    body = make(made["content_sha256"])
    on = send(f"{memories_path(world['store'])}/{made['id']}", body, bearer(world["secret"]))
    settings.API_FAST_LANES = []
    off = send(f"{memories_path(other)}/{twin['id']}", body, bearer(world["secret"]))
    (s1, _h1, b1, r1), (s2, _h2, b2, r2) = on, off
    assert s1 == s2, (b1, b2)
    assert on[1] == off[1]
    one, two = json.loads(b1), json.loads(b2)
    if s1 >= 400:
        e1, e2 = without_request_id(b1, r1), without_request_id(b2, r2)
        e1["error"].pop("conflicting_memory_id", None), e2["error"].pop("conflicting_memory_id", None)
        assert e1 == e2
    else:
        varying = {"id", "memory_version_id", "created_at", "updated_at", "memory_store_id"}
        assert {k: v for k, v in one.items() if k not in varying} == {k: v for k, v in two.items() if k not in varying}
    mine = Version.objects.filter(store=world["store"]).count()
    theirs = Version.objects.filter(store=other).count()
    assert mine == theirs


BIG = [
    ("float overflow in content", b'{"path": "/n.md", "content": 1e400}'),
    ("float overflow in unknown field", b'{"path": "/n.md", "content": "x", "n": 1e400}'),
    ("100 digit int", b'{"path": "/n.md", "content": ' + b"9" * 100 + b"}"),
    ("101 digit int", b'{"path": "/n.md", "content": ' + b"9" * 101 + b"}"),
    ("huge exponent", b'{"path": "/n.md", "content": 1e99999999999}'),
    ("tiny float", b'{"path": "/n.md", "content": 1e-400}'),
    ("negative zero", b'{"path": "/n.md", "content": -0.0}'),
    ("bool content", b'{"path": "/n.md", "content": true}'),
    ("array body", b"[1, 2]"),
    ("string body", b'"x"'),
    ("null body", b"null"),
    ("whitespace body", b"   "),
]


@pytest.mark.parametrize(("name", "raw"), BIG, ids=[b[0] for b in BIG])
def test_odd_json_in_a_file_create_is_the_views_answer(settings, world, name, raw):
    _same(*both(settings, memories_path(world["store"]), raw, bearer(world["secret"])))
    assert Memory.objects.count() <= 1


@pytest.mark.parametrize("raw", [b'{"body_md": "x", "client_nonce": 1e400}', b'{"body_md": 1e400}', b"null", b"[]"])
def test_odd_json_in_a_note_is_the_views_answer(settings, world, raw):
    _same(*both(settings, note_path(world["store"]), raw, bearer(world["secret"])))


def _spellings(store):
    text = str(store.pk)
    return {"upper": text.upper(), "braced": "{" + text + "}", "urn": "urn:uuid:" + text, "hex": store.pk.hex}


@pytest.mark.parametrize("spelling", ["upper", "braced", "urn", "hex"])
def test_a_non_canonical_store_id_on_note_and_file_create_is_the_views_answer(settings, world, spelling):
    sid = _spellings(world["store"])[spelling]
    headers = bearer(world["secret"])
    _same(*both(settings, f"/api/v1/memories/{sid}/note", {"body_md": "u"}, headers))
    _same(
        *both(settings, f"/api/v1/memory_stores/{sid}/memories", {"path": f"/{spelling}.md", "content": "u"}, headers)
    )


@pytest.mark.parametrize("spelling", ["upper", "braced"])
def test_a_non_canonical_memory_id_on_update_is_the_views_answer(settings, world, spelling):
    made = create(world)
    import uuid

    mid = str(uuid.UUID(made["id"]))
    mid = mid.upper() if spelling == "upper" else "{" + mid + "}"
    _same(*both(settings, f"{memories_path(world['store'])}/{mid}", {"content": "q"}, bearer(world["secret"])))


@pytest.mark.parametrize("what", ["wake", "zoom", "recall"])
def test_a_non_canonical_store_id_on_reads_is_the_views_answer(settings, logged, what):
    sid = str(logged["store"].pk).upper()
    query = {"wake": b"", "zoom": b"range=0-1", "recall": b"pattern=entry"}[what]
    on, off = get_both(settings, f"/api/v1/memories/{sid}/{what}", query, bearer(logged["secret"]))
    a, b = _same(on, off)
    if on[0] < 400:
        a["meta"].pop("next_cursor", None), b["meta"].pop("next_cursor", None)
        assert a == b


NONCES = [
    ("key only", {"body_md": "k"}, {"Idempotency-Key": "k1"}),
    ("key and same nonce", {"body_md": "k", "client_nonce": "k1"}, {"Idempotency-Key": "k1"}),
    ("key and other nonce", {"body_md": "k", "client_nonce": "k2"}, {"Idempotency-Key": "k1"}),
    ("empty key", {"body_md": "k"}, {"Idempotency-Key": ""}),
    ("long key", {"body_md": "k"}, {"Idempotency-Key": "k" * 129}),
    ("key, null nonce", {"body_md": "k", "client_nonce": None}, {"Idempotency-Key": "k1"}),
    ("key, numeric nonce", {"body_md": "k", "client_nonce": 1}, {"Idempotency-Key": "1"}),
]


@pytest.mark.parametrize(("name", "body", "extra"), NONCES, ids=[n[0] for n in NONCES])
def test_idempotency_key_and_nonce_through_the_lane_then_the_view(settings, world, name, body, extra):
    """The lane first, the view second: the second is a replay (or the same refusal), one entry at most."""
    headers = {**bearer(world["secret"]), **extra}
    on, off = both(settings, note_path(world["store"]), body, headers)
    assert on[0] == off[0] or (on[0], off[0]) == (201, 200), (on, off)
    if on[0] >= 400:
        assert without_request_id(on[2], on[3]) == without_request_id(off[2], off[3])
    assert Entry.objects.filter(store=world["store"]).count() <= 1


@pytest.mark.parametrize("what", ["wake", "zoom", "recall"])
def test_a_per_work_credential_on_a_read_lane_is_the_views_answer(settings, run_session, owner, what):
    store = StoreFactory(owner=owner, canonical=False, name="Team Notes")
    running = run_session(store)
    query = {"wake": b"", "zoom": b"range=0", "recall": b"pattern=x"}[what]
    on, off = get_both(
        settings, f"/api/v1/memories/{store.pk}/{what}", query, {"Authorization": f"Bearer {running.token}"}
    )
    a, b = _same(on, off)
    if on[0] < 400:
        a["meta"].pop("next_cursor", None), b["meta"].pop("next_cursor", None)
        assert a == b


@pytest.mark.parametrize("access", ["read_only", "read_write"])
def test_a_per_work_credential_on_note_and_file_writes_is_the_views_answer(settings, run_session, owner, access):
    store = StoreFactory(owner=owner, canonical=False, name="Team Notes")
    other = StoreFactory(owner=owner, canonical=False, name="Elsewhere")
    running = run_session((store, access))
    agent = {"Authorization": f"Bearer {running.token}"}
    _same(*both(settings, note_path(store), {"body_md": "n", "client_nonce": "n1"}, agent))
    _same(*both(settings, memories_path(store), {"path": "/w.md", "content": "w"}, agent))
    _same(*both(settings, memories_path(other), {"path": "/w.md", "content": "w"}, agent))  # not attached
    assert Entry.objects.filter(store=store).count() <= 1
    assert Memory.objects.filter(store=other).count() == 0
