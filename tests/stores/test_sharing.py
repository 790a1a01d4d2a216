"""Readers and share (SPEC §3, §4): explicit grants on user stores; membership governs the others."""

from __future__ import annotations

import pytest

from stores.models import ReaderGrant
from stores.services import archive_store
from tests.factories import ReaderGrantFactory, StoreFactory, UserFactory, board_store, project_store
from tests.stores.helpers import assert_error

pytestmark = pytest.mark.django_db


def share(client, store, handle, active=True):
    return client.post(f"/api/v1/memories/{store.pk}/share", {"handle": handle, "active": active})


def test_owner_grants_and_the_reader_can_read(owner_client, make_client, reader, private_store):
    reader_client = make_client(reader)
    assert reader_client.get(f"/api/v1/memories/{private_store.pk}").status_code == 404
    response = share(owner_client, private_store, "READER")
    assert response.status_code == 200, response.content
    assert response.json()["data"]["handle"] == "reader"
    assert response.json()["data"]["active"] is True
    assert response.json()["data"]["granted_by"] == "owner"
    assert reader_client.get(f"/api/v1/memories/{private_store.pk}").status_code == 200


def test_revoking_hides_a_private_store_at_once(owner_client, make_client, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    reader_client = make_client(reader)
    assert reader_client.get(f"/api/v1/memories/{private_store.pk}").status_code == 200
    assert share(owner_client, private_store, "reader", active=False).json()["data"]["active"] is False
    assert reader_client.get(f"/api/v1/memories/{private_store.pk}").status_code == 404


def test_revoking_a_reader_of_a_public_store_leaves_it_readable(owner_client, make_client, reader, public_store):
    ReaderGrantFactory(store=public_store, user=reader)
    reader_client = make_client(reader)
    share(owner_client, public_store, "reader", active=False)
    assert reader_client.get(f"/api/v1/memories/{public_store.pk}").status_code == 200


def test_making_a_public_store_private_hides_it_at_once(owner_client, make_client, stranger, public_store):
    stranger_client = make_client(stranger)
    assert stranger_client.get(f"/api/v1/memories/{public_store.pk}").status_code == 200
    owner_client.patch(f"/api/v1/memories/{public_store.pk}", {"visibility": "private"})
    assert stranger_client.get(f"/api/v1/memories/{public_store.pk}").status_code == 404
    assert str(public_store.pk) not in stranger_client.get("/api/v1/memories").content.decode()


def test_share_is_idempotent(owner_client, reader, private_store):
    share(owner_client, private_store, "reader")
    share(owner_client, private_store, "reader")
    assert ReaderGrant.objects.filter(store=private_store).count() == 1


def test_active_defaults_to_true(owner_client, reader, private_store):
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/share", {"handle": "reader"})
    assert response.json()["data"]["active"] is True


def test_unknown_handle_is_404_naming_it(owner_client, private_store):
    body = assert_error(share(owner_client, private_store, "ghost"), 404, "not_found_error")
    # the words and details of every handle lookup (accounts.selectors.user_by_handle: members, re-activation)
    assert body["error"] == {
        "type": "not_found_error",
        "message": 'No user with handle "ghost".',
        "details": {"handle": "ghost"},
    }
    assert not ReaderGrant.objects.exists()


def test_inactive_user_cannot_be_granted(owner_client, private_store):
    UserFactory(handle="left", is_active=False)
    body = assert_error(share(owner_client, private_store, "left"), 404, "not_found_error")
    assert body["error"]["message"] == 'No user with handle "left".'


def test_owner_cannot_share_with_themselves(owner_client, private_store):
    assert_error(share(owner_client, private_store, "owner"), 400, "invalid_request_error")


def test_share_on_a_project_store_is_membership_governed(make_client, cast, reader):
    store = project_store(cast.project)
    response = share(make_client(cast.project_owner), store, "reader")
    assert_error(response, 409, "conflict_error", reason="membership_governed")
    assert not ReaderGrant.objects.exists()


def test_readers_of_a_board_store_are_membership_governed(make_client, cast):
    store = board_store(cast.section)
    response = make_client(cast.section_owner).get(f"/api/v1/memories/{store.pk}/readers")
    assert_error(response, 409, "conflict_error", reason="membership_governed")


def test_share_on_an_archived_store_is_a_conflict(owner_client, reader, private_store):
    archive_store(store=private_store)
    assert_error(share(owner_client, private_store, "reader"), 409, "conflict_error", reason="store_archived")
    assert not ReaderGrant.objects.exists()


def test_a_reader_of_an_archived_store_can_still_be_cut_off(owner_client, make_client, reader, private_store):
    """Archiving is one-way: a refused revocation left a reader reading for good (a breaker's reader held a
    live session on the store, so the owner could not delete it either). Granting stays refused."""
    ReaderGrantFactory(store=private_store, user=reader)
    archive_store(store=private_store)
    assert make_client(reader).get(f"/api/v1/memories/{private_store.pk}/wake").status_code == 200

    assert share(owner_client, private_store, "reader", active=False).status_code == 200

    assert make_client(reader).get(f"/api/v1/memories/{private_store.pk}/wake").status_code == 404
    assert not ReaderGrant.objects.get(store=private_store, user=reader).active
    assert_error(share(owner_client, private_store, "reader"), 409, "conflict_error", reason="store_archived")


def test_only_the_owner_shares(make_client, reader, stranger, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    assert_error(share(make_client(reader), private_store, "stranger"), 403, "permission_error")
    assert_error(share(make_client(stranger), private_store, "reader"), 404, "not_found_error")
    assert ReaderGrant.objects.count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"handle": 5},
        {"handle": ["reader"]},
        {"handle": ""},
        {"handle": "has space"},
        {"handle": "x" * 65},
        {"handle": "reader", "active": "false"},
        {"handle": "reader", "active": 0},
        {"handle": "reader", "active": None},
        {"handle": "reader", "role": "admin"},
    ],
)
def test_bad_share_bodies_are_400_and_grant_nothing(owner_client, reader, private_store, body):
    response = owner_client.post(f"/api/v1/memories/{private_store.pk}/share", body)
    assert_error(response, 400, "invalid_request_error")
    assert not ReaderGrant.objects.exists()


def test_readers_lists_active_and_revoked_grants(owner_client, reader, stranger, private_store):
    share(owner_client, private_store, "reader")
    share(owner_client, private_store, "stranger")
    share(owner_client, private_store, "stranger", active=False)
    data = owner_client.get(f"/api/v1/memories/{private_store.pk}/readers").json()["data"]
    assert {(item["handle"], item["active"]) for item in data} == {("reader", True), ("stranger", False)}


def test_readers_is_owner_only(make_client, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    assert_error(make_client(reader).get(f"/api/v1/memories/{private_store.pk}/readers"), 403, "permission_error")


def test_readers_pages_with_a_cursor(owner_client, private_store):
    for _ in range(5):
        ReaderGrantFactory(store=private_store)
    seen, cursor = [], None
    for _ in range(20):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        response = owner_client.get(f"/api/v1/memories/{private_store.pk}/readers", params)
        seen += [item["handle"] for item in response.json()["data"]]
        cursor = response.json()["meta"]["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 5


def test_a_readers_cursor_carries_no_serial_row_id(owner_client, private_store):
    from django.core import signing

    grants = [ReaderGrantFactory(store=private_store) for _ in range(2)]
    page = owner_client.get(f"/api/v1/memories/{private_store.pk}/readers", {"limit": 1}).json()
    keys = signing.loads(page["meta"]["next_cursor"], salt="memories.cursor.readers")["k"]
    assert keys[1] in {str(grant.user_id) for grant in grants} and not any(isinstance(key, int) for key in keys)


def test_a_readers_cursor_does_not_work_on_another_store(owner_client, owner, private_store, public_store):
    for _ in range(3):
        ReaderGrantFactory(store=private_store)
    cursor = owner_client.get(f"/api/v1/memories/{private_store.pk}/readers", {"limit": 1}).json()["meta"][
        "next_cursor"
    ]
    response = owner_client.get(f"/api/v1/memories/{public_store.pk}/readers", {"cursor": cursor})
    assert_error(response, 400, "invalid_request_error")


@pytest.mark.parametrize("count", [5, 200])
def test_readers_runs_a_constant_number_of_queries(owner_client, owner, count, django_assert_max_num_queries):
    store = StoreFactory(owner=owner, canonical=False)
    for _ in range(count):
        ReaderGrantFactory(store=store, granted_by=owner)
    owner_client.get("/api/v1/me")
    with django_assert_max_num_queries(3):  # the token, the store with permissions, the page
        response = owner_client.get(f"/api/v1/memories/{store.pk}/readers", {"limit": 100})
    assert len(response.json()["data"]) == min(count, 100)


def test_revoking_someone_who_was_never_a_reader_stores_nothing(owner_client, reader, private_store):
    response = share(owner_client, private_store, "reader", active=False)
    assert response.status_code == 200
    assert response.json()["data"]["active"] is False
    assert not ReaderGrant.objects.exists()


def test_a_deactivated_users_grant_can_still_be_revoked(owner_client, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    reader.is_active = False
    reader.save()
    assert share(owner_client, private_store, "reader", active=False).status_code == 200
    assert ReaderGrant.objects.get().active is False
    assert_error(share(owner_client, private_store, "reader", active=True), 404, "not_found_error")
