"""SPEC §3's access table, cell by cell, through HTTP.

Every principal × visibility × right: read = GET /api/v1/memories/{id}; write = POST /api/v1/memories
(ensure on the subject) and POST /api/v1/memories/{id}/note; owner = PATCH.
Expected values are written out from the SPEC's table, not computed from the implementation.
404 bodies for unreadable stores must equal those for stores that do not exist (apart from request_id).
"""

from __future__ import annotations

import uuid

import pytest

from stores.models import Store
from tests.stores.helpers import assert_error, without_request_id

pytestmark = pytest.mark.django_db

Y, N = True, False
ANON = None  # anonymous callers: reads as listed; writes are 401 before any store check (SPEC §2)


def both(read, write, owner):
    return {"public": (read, write, owner), "private": (read, write, owner)}


def public_only(write_when_public=N):
    """Readable only while public; never owner; may write when public (open boards)."""
    return {"public": (Y, write_when_public, N), "private": (N, N, N)}


# (store, principal) -> {visibility: (read, write, owner)}
TABLE = {
    # user store: owner; active explicit readers; anyone if public / owner only / the user
    ("user", "owner"): both(Y, Y, Y),
    ("user", "reader"): both(Y, N, N),
    ("user", "revoked_reader"): public_only(),
    ("user", "stranger"): public_only(),
    ("user", "staff"): public_only(),
    ("user", "anonymous"): public_only(),
    # project store: public project or owners + active members / owners + active members / owners
    ("project", "project_owner"): both(Y, Y, Y),
    ("project", "project_member"): both(Y, Y, N),
    ("project", "project_inactive_member"): public_only(),
    ("project", "project_inactive_owner"): public_only(),
    ("project", "stranger"): public_only(),
    ("project", "staff"): public_only(),
    ("project", "anonymous"): public_only(),
    # board store (members-only posting): public section or active members / active posting members / owners
    ("board", "section_owner"): both(Y, Y, Y),
    ("board", "section_poster"): both(Y, Y, N),
    ("board", "section_non_poster"): both(Y, N, N),
    ("board", "section_inactive_member"): public_only(),
    ("board", "stranger"): public_only(),
    ("board", "staff"): public_only(),
    ("board", "anonymous"): public_only(),
    # board store on a section open to all posters: every active user writes (reading it first)
    ("open_board", "stranger"): public_only(write_when_public=Y),
    ("open_board", "staff"): public_only(write_when_public=Y),
    ("open_board", "anonymous"): public_only(),
}

CELLS = [
    pytest.param(store, principal, visibility, id=f"{store}-{principal}-{visibility}")
    for (store, principal), by_visibility in TABLE.items()
    for visibility in by_visibility
]


def subject_of(world, store_key: str) -> dict:
    store = world.stores[store_key]
    if store.scope == "user":
        return {"scope": "user", "subject": store.owner.handle.upper()}  # handles match case-insensitively
    if store.scope == "project":
        return {"scope": "project", "subject": store.project.slug.lower()}
    return {"scope": "board", "subject": store.section.slug.swapcase()}


@pytest.fixture
def setup(make_world, make_client):
    def build(store_key, principal, visibility):
        world = make_world(visibility)
        client = make_client(None if principal == "anonymous" else world.users[principal])
        return world, world.stores[store_key], client

    return build


@pytest.mark.parametrize(("store_key", "principal", "visibility"), CELLS)
def test_read_right_matches_the_table(setup, store_key, principal, visibility):
    _world, store, client = setup(store_key, principal, visibility)
    can_read, can_write, is_owner = TABLE[(store_key, principal)][visibility]
    response = client.get(f"/api/v1/memories/{store.pk}")
    if can_read:
        assert response.status_code == 200, response.content
        assert response.json()["data"]["permissions"] == {"read": True, "write": can_write, "owner": is_owner}
    else:
        assert_error(response, 404, "not_found_error")
        missing = client.get(f"/api/v1/memories/{uuid.uuid4()}")
        assert without_request_id(response) == without_request_id(missing)


@pytest.mark.parametrize(("store_key", "principal", "visibility"), CELLS)
def test_store_level_write_right_matches_the_table(setup, store_key, principal, visibility):
    _world, store, client = setup(store_key, principal, visibility)
    can_read, can_write, _ = TABLE[(store_key, principal)][visibility]
    response = client.post(f"/api/v1/memories/{store.pk}/note", {"body_md": f"{principal} was here"})
    if principal == "anonymous":
        assert_error(response, 401, "authentication_error")
    elif can_write:
        assert response.status_code == 201, response.content
    elif can_read:
        assert_error(response, 403, "permission_error")
    else:
        assert_error(response, 404, "not_found_error")
        missing = client.post(f"/api/v1/memories/{uuid.uuid4()}/note", {"body_md": "x"})
        assert without_request_id(response) == without_request_id(missing)
    store.refresh_from_db()
    assert store.entry_count == (1 if can_write and principal != "anonymous" else 0)


@pytest.mark.parametrize(("store_key", "principal", "visibility"), CELLS)
def test_ensure_on_the_subject_follows_the_write_right(setup, store_key, principal, visibility):
    world, store, client = setup(store_key, principal, visibility)
    can_read, can_write, _ = TABLE[(store_key, principal)][visibility]
    response = client.post("/api/v1/memories", subject_of(world, store_key))
    if principal == "anonymous":
        assert_error(response, 401, "authentication_error")
    elif can_write:
        assert response.status_code == 200, response.content
        assert response.json()["data"]["id"] == str(store.pk)
    elif can_read or store.scope == "user":
        # someone else's user store is 403 whether or not it exists or is readable (docs/access.md)
        assert_error(response, 403, "permission_error")
    else:
        body = assert_error(response, 404, "not_found_error")
        asked = subject_of(world, store_key)
        missing = client.post("/api/v1/memories", {**asked, "subject": "no-such-subject"})
        expected = without_request_id(missing)
        assert without_request_id(response) == _replace(expected, "no-such-subject", asked["subject"])
        assert asked["subject"] in body["error"]["message"]
    assert Store.objects.count() == 4  # ensure never creates a second store for an existing subject


def _replace(value, old: str, new: str):
    if isinstance(value, dict):
        return {key: _replace(item, old, new) for key, item in value.items()}
    return value.replace(old, new) if isinstance(value, str) else value


@pytest.mark.parametrize(("store_key", "principal", "visibility"), CELLS)
def test_owner_right_matches_the_table(setup, store_key, principal, visibility):
    _world, store, client = setup(store_key, principal, visibility)
    can_read, _, is_owner = TABLE[(store_key, principal)][visibility]
    response = client.patch(f"/api/v1/memories/{store.pk}", {"description_md": "edited"})
    store.refresh_from_db()
    if principal == "anonymous":
        assert_error(response, 401, "authentication_error")
    elif is_owner:
        assert response.status_code == 200, response.content
        assert store.description == "edited"
        return
    elif can_read:
        assert_error(response, 403, "permission_error")
    else:
        assert_error(response, 404, "not_found_error")
        missing = client.patch(f"/api/v1/memories/{uuid.uuid4()}", {"description_md": "edited"})
        assert without_request_id(response) == without_request_id(missing)
    assert store.description == ""


@pytest.mark.parametrize(("store_key", "principal", "visibility"), CELLS)
def test_list_shows_exactly_the_readable_stores(setup, store_key, principal, visibility):
    _world, store, client = setup(store_key, principal, visibility)
    can_read = TABLE[(store_key, principal)][visibility][0]
    listed = {item["id"] for item in client.get("/api/v1/memories?limit=100").json()["data"]}
    assert (str(store.pk) in listed) == can_read
