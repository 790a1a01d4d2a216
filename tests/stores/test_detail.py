"""GET, PATCH and DELETE /api/v1/memories/{id} (SPEC §3, §4)."""

from __future__ import annotations

import uuid

import pytest

from accounts.models import Visibility
from memories.models import Entry, Summary
from stores.models import ReaderGrant, Store
from stores.services import archive_store
from tests.factories import ReaderGrantFactory, project_store
from tests.stores.helpers import assert_error, without_request_id

pytestmark = pytest.mark.django_db


def add_entries(store: Store, count: int, body: str = "note") -> None:
    Entry.objects.bulk_create(
        Entry(store=store, seq=seq, author=store.owner, body_md=body, size_bytes=len(body)) for seq in range(count)
    )
    Store.objects.filter(pk=store.pk).update(entry_count=count)
    store.refresh_from_db()


# --- get --------------------------------------------------------------------------------------------


def test_get_returns_counters_and_permissions(owner_client, private_store):
    add_entries(private_store, 3)
    data = owner_client.get(f"/api/v1/memories/{private_store.pk}").json()["data"]
    assert (data["entry_count"], data["generation"], data["memory_count"]) == (3, 1, 0)
    assert data["permissions"] == {"read": True, "write": True, "owner": True}


def test_permissions_say_what_this_token_can_do(make_client, owner, private_store):
    """A read-only token of the owner was told `write: true` while every write with it is 403 (a breaker):
    on every surface that shows `permissions` — the store, the list, search — `write` needs the scope."""
    private_store.name = "Findable notes"
    private_store.save()
    reading = make_client(owner, scopes=["agent:read"])
    seen = [
        reading.get(f"/api/v1/memories/{private_store.pk}").json()["data"],
        reading.get("/api/v1/memories").json()["data"][0],
        reading.get("/api/v1/search", {"q": "findable", "kinds": "memories"}).json()["data"][0]["store"],
    ]
    assert [data["permissions"] for data in seen] == [{"read": True, "write": False, "owner": True}] * 3
    assert reading.post(f"/api/v1/memories/{private_store.pk}/note", {"body_md": "x"}).status_code == 403
    writing = make_client(owner).get(f"/api/v1/memories/{private_store.pk}").json()["data"]["permissions"]
    assert writing == {"read": True, "write": True, "owner": True}
    archive_store(store=private_store)  # every write is 409 store_archived now (a second breaker)
    archived = make_client(owner).get(f"/api/v1/memories/{private_store.pk}").json()["data"]["permissions"]
    assert archived == {"read": True, "write": False, "owner": True}


def test_get_never_includes_entry_text(owner_client, private_store):
    add_entries(private_store, 2, body="zebra-secret")
    assert b"zebra-secret" not in owner_client.get(f"/api/v1/memories/{private_store.pk}").content


@pytest.mark.parametrize("pk", ["not-a-uuid", "123", "%20", "00000000-0000-0000-0000-00000000000g"])
def test_malformed_ids_are_the_same_404_as_missing_ones(owner_client, pk):
    response = owner_client.get(f"/api/v1/memories/{pk}")
    missing = owner_client.get(f"/api/v1/memories/{uuid.uuid4()}")
    assert_error(response, 404, "not_found_error")
    assert without_request_id(response) == without_request_id(missing)


# --- patch ------------------------------------------------------------------------------------------


def test_owner_updates_name_description_and_visibility(owner_client, private_store):
    response = owner_client.patch(
        f"/api/v1/memories/{private_store.pk}",
        {"name": "Renamed", "description_md": "## Scope\n\n- a", "visibility": "public"},
    )
    assert response.status_code == 200, response.content
    data = response.json()["data"]
    assert (data["name"], data["description_md"], data["visibility"]) == ("Renamed", "## Scope\n\n- a", "public")
    private_store.refresh_from_db()
    assert (private_store.name, private_store.visibility) == ("Renamed", "public")


def test_patch_with_no_change_keeps_updated_at(owner_client, private_store):
    before = private_store.updated_at
    response = owner_client.patch(f"/api/v1/memories/{private_store.pk}", {"name": private_store.name})
    assert response.status_code == 200
    private_store.refresh_from_db()
    assert private_store.updated_at == before


def test_visibility_cannot_be_set_on_project_stores(make_client, cast):
    store = project_store(cast.project)
    response = make_client(cast.project_owner).patch(f"/api/v1/memories/{store.pk}", {"visibility": "public"})
    body = assert_error(response, 400, "invalid_request_error")
    assert "visibility" in body["error"]["details"]["fields"]
    assert "rog projects edit" in body["error"]["message"]  # where it is changed (a tester)
    store.refresh_from_db()
    assert store.visibility is None


def test_project_owner_renames_the_project_store(make_client, cast):
    store = project_store(cast.project)
    response = make_client(cast.project_owner).patch(f"/api/v1/memories/{store.pk}", {"name": "Apollo log"})
    assert response.json()["data"]["name"] == "Apollo log"


def test_patch_of_an_archived_store_is_a_conflict(owner_client, private_store):
    archive_store(store=private_store)
    response = owner_client.patch(f"/api/v1/memories/{private_store.pk}", {"name": "late"})
    assert_error(response, 409, "conflict_error", reason="store_archived")
    assert response["x-should-retry"] == "false"
    private_store.refresh_from_db()
    assert private_store.name == "Owner notes"


@pytest.mark.parametrize(
    "body",
    [
        {"name": ""},
        {"name": "x" * 256},
        {"name": "tab\there"},
        {"name": 12},
        {"name": None},
        {"description_md": "x" * 1025},
        {"description_md": False},
        {"visibility": "hidden"},
        {"visibility": True},
        {"metadata": {"a": "b"}},
        {"scope": "project"},
    ],
)
def test_bad_patches_are_400_and_change_nothing(owner_client, private_store, body):
    before = Store.objects.filter(pk=private_store.pk).values().get()
    assert_error(owner_client.patch(f"/api/v1/memories/{private_store.pk}", body), 400, "invalid_request_error")
    assert Store.objects.filter(pk=private_store.pk).values().get() == before


def test_name_of_exactly_255_characters_is_accepted(owner_client, private_store):
    response = owner_client.patch(f"/api/v1/memories/{private_store.pk}", {"name": "é" * 255})
    assert response.status_code == 200


# --- delete -----------------------------------------------------------------------------------------


def test_owner_deletes_the_store_with_its_entries_summaries_and_grants(owner_client, owner, private_store, reader):
    add_entries(private_store, 2)
    Summary.objects.create(
        store=private_store,
        start=0,
        end=1,
        level=1,
        summary_md="s",
        size_bytes=1,
        model="m",
        author=owner,
        source_digest="d",
        generation=1,
    )
    ReaderGrantFactory(store=private_store, user=reader)
    response = owner_client.delete(f"/api/v1/memories/{private_store.pk}?expected_entry_count=2&generation=1")
    assert response.status_code == 200, response.content
    assert response.json()["data"] == {"id": str(private_store.pk), "deleted": True}
    assert not Store.objects.exists()
    assert not Entry.objects.exists()
    assert not Summary.objects.exists()
    assert not ReaderGrant.objects.exists()


@pytest.mark.parametrize("query", ["expected_entry_count=3&generation=1", "expected_entry_count=2&generation=2"])
def test_stale_confirmation_deletes_nothing(owner_client, private_store, query):
    add_entries(private_store, 2)
    response = owner_client.delete(f"/api/v1/memories/{private_store.pk}?{query}")
    body = assert_error(response, 409, "conflict_error", reason="stale_confirmation")
    assert body["error"]["details"]["entry_count"] == 2
    assert Store.objects.filter(pk=private_store.pk).exists()
    assert Entry.objects.count() == 2


@pytest.mark.parametrize(
    "query",
    [
        "",
        "expected_entry_count=0",
        "generation=1",
        "expected_entry_count=-1&generation=1",
        "expected_entry_count=0&generation=0",
        "expected_entry_count=abc&generation=1",
        "expected_entry_count=0&generation=1.0",
        "expected_entry_count=0&generation=99999999999999999999999",
        "expected_entry_count=0&generation=1&force=true",
    ],
)
def test_delete_needs_both_confirmations_as_integers(owner_client, private_store, query):
    assert_error(owner_client.delete(f"/api/v1/memories/{private_store.pk}?{query}"), 400, "invalid_request_error")
    assert Store.objects.filter(pk=private_store.pk).exists()


def test_archived_stores_can_be_deleted(owner_client, private_store):
    archive_store(store=private_store)
    response = owner_client.delete(f"/api/v1/memories/{private_store.pk}?expected_entry_count=0&generation=1")
    assert response.status_code == 200
    assert not Store.objects.exists()


def test_readers_cannot_delete(make_client, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    response = make_client(reader).delete(f"/api/v1/memories/{private_store.pk}?expected_entry_count=0&generation=1")
    assert_error(response, 403, "permission_error")
    assert Store.objects.exists()


def test_delete_of_an_unreadable_store_is_the_missing_404(stranger_client, private_store):
    response = stranger_client.delete(f"/api/v1/memories/{private_store.pk}?expected_entry_count=0&generation=1")
    missing = stranger_client.delete(f"/api/v1/memories/{uuid.uuid4()}?expected_entry_count=0&generation=1")
    assert_error(response, 404, "not_found_error")
    assert without_request_id(response) == without_request_id(missing)
    assert Store.objects.exists()


def test_public_store_visibility_is_reported(owner_client, owner):
    from tests.factories import StoreFactory

    store = StoreFactory(owner=owner, visibility=Visibility.PUBLIC)
    assert owner_client.get(f"/api/v1/memories/{store.pk}").json()["data"]["visibility"] == "public"
