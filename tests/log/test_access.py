"""Access on every log endpoint (SPEC §2/§3): unreadable = missing, anonymous reads of public stores only."""

from __future__ import annotations

import pytest

from stores import services as store_services
from tests.factories import ProjectFactory, SectionFactory, board_store, project_store
from tests.log.conftest import compact_all, fill, url

pytestmark = pytest.mark.django_db

MISSING = "00000000-0000-0000-0000-000000000000"
ENDPOINTS = [
    ("get", "wake", {}),
    ("get", "nap", {}),
    ("get", "zoom", {"range": "0"}),
    ("get", "recall", {"pattern": "entry"}),
    ("post", "note", {"body_md": "x"}),
    ("post", "compact", {"range": "0-1", "generation": 1, "source_digest": "a" * 64, "summary_md": "s", "model": "m"}),
    ("post", "forget", {"range": "0-1", "generation": 1}),
]


def call(client, method, store, action, payload):
    return getattr(client, method)(url(store, action), payload)


@pytest.mark.parametrize(("method", "action", "payload"), ENDPOINTS)
def test_a_private_store_is_identical_to_a_missing_one_for_a_stranger(
    stranger_client, filled_store, method, action, payload
):
    hidden = call(stranger_client, method, filled_store, action, payload)
    missing = call(stranger_client, method, MISSING, action, payload)
    assert hidden.status_code == missing.status_code == 404
    assert (
        hidden.json()["error"] == missing.json()["error"] == {"type": "not_found_error", "message": "Store not found."}
    )
    filled_store.refresh_from_db()
    assert (filled_store.entry_count, filled_store.generation, filled_store.summary_count) == (8, 1, 0)


@pytest.mark.parametrize(("method", "action", "payload"), ENDPOINTS)
@pytest.mark.parametrize("bad_id", ["not-a-uuid", "1", "0000000000000000000000000000000000000000000"])
def test_a_malformed_store_id_is_404(owner_client, method, action, payload, bad_id):
    assert call(owner_client, method, bad_id, action, payload).status_code == 404


@pytest.mark.parametrize(("method", "action", "payload"), ENDPOINTS)
@pytest.mark.parametrize("suffix", ["%0A", "%0D%0A"])
def test_a_real_store_id_with_a_trailing_newline_is_404(owner_client, filled_store, method, action, payload, suffix):
    """`$` in the id pattern matched before a final newline: a real store's id + "\\n" reached uuid.UUID (500)."""
    response = call(owner_client, method, f"{filled_store.pk}{suffix}", action, payload)
    assert response.status_code == 404 and response.json()["error"]["message"] == "Store not found."
    filled_store.refresh_from_db()
    assert filled_store.entry_count == 8


def test_a_resolve_ref_with_a_trailing_newline_is_a_400_naming_it(owner_client, filled_store):
    response = owner_client.get(f"/api/v1/memories/resolve?ref=%5E{filled_store.pk}%0A")
    assert response.status_code == 400 and "ref" in response.json()["error"]["message"]


@pytest.mark.parametrize(("method", "action", "payload"), [e for e in ENDPOINTS if e[0] == "get"])
def test_anonymous_reads_of_a_private_store_are_404(anon_client, filled_store, method, action, payload):
    assert call(anon_client, method, filled_store, action, payload).status_code == 404


@pytest.mark.parametrize(("method", "action", "payload"), [e for e in ENDPOINTS if e[0] == "post"])
def test_anonymous_writes_are_401(anon_client, public_store, method, action, payload):
    assert call(anon_client, method, public_store, action, payload).status_code == 401


@pytest.mark.parametrize(("method", "action", "payload"), ENDPOINTS)
def test_a_staff_user_gets_no_access_to_private_history(make_client, staff, filled_store, method, action, payload):
    assert call(make_client(staff), method, filled_store, action, payload).status_code == 404


def test_project_members_write_and_outsiders_see_404(make_client, stranger):
    from tests.factories import ProjectMembershipFactory

    project = ProjectFactory()
    member = ProjectMembershipFactory(project=project).user
    store = project_store(project)
    assert make_client(member).post(url(store, "note"), {"body_md": "hi"}).status_code == 201
    assert make_client(stranger).get(url(store, "wake")).status_code == 404


def test_a_public_board_store_is_readable_by_anyone_and_writable_by_posters_only(make_client, stranger, anon_client):
    section = SectionFactory(visibility="public", posting="members")
    store = fill(board_store(section), 2, author=stranger)
    assert anon_client.get(url(store, "wake")).status_code == 200
    assert make_client(stranger).post(url(store, "note"), {"body_md": "hi"}).status_code == 403


def test_an_archived_store_stays_readable(owner_client, filled_store):
    compact_all(owner_client, filled_store)
    store_services.archive_store(store=filled_store)
    assert owner_client.get(url(filled_store, "wake")).status_code == 200
    assert owner_client.get(url(filled_store, "zoom"), {"range": "0-7"}).status_code == 200
    assert owner_client.get(url(filled_store, "recall"), {"pattern": "entry"}).status_code == 200
    nap = owner_client.get(url(filled_store, "nap"))  # it hands out compaction work: none in a read-only store
    assert nap.status_code == 409 and nap.json()["error"]["details"]["reason"] == "store_archived"
