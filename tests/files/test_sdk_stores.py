"""The official anthropic SDK drives the six store operations against a live server (SPEC §5)."""

from __future__ import annotations

import re

import anthropic
import httpx
import pytest
from anthropic import Anthropic

from accounts import services as account_services
from stores.models import Store
from tests.factories import ReaderGrantFactory, StoreFactory

pytestmark = pytest.mark.django_db(transaction=True)

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")


def test_create_returns_the_memory_store_object_field_by_field(sdk, owner):
    raw = sdk.beta.memory_stores.with_raw_response.create(
        name="Prefs", description="What the user likes.", metadata={"team": "core"}
    )
    body = raw.http_response.json()
    store = raw.parse()
    row = Store.objects.get(pk=store.id)
    assert set(body) == {"id", "type", "name", "description", "metadata", "created_at", "updated_at", "archived_at"}
    assert store.type == "memory_store"
    assert (store.name, store.description, store.metadata) == ("Prefs", "What the user likes.", {"team": "core"})
    assert store.created_at == row.created_at and store.updated_at == row.updated_at
    assert store.archived_at is None and body["archived_at"] is None
    assert RFC3339_UTC.match(body["created_at"]) and RFC3339_UTC.match(body["updated_at"])
    assert (row.owner, row.scope, row.visibility, row.canonical) == (owner, "user", "private", False)


def test_create_defaults_description_to_empty_and_metadata_to_empty_object(sdk):
    store = sdk.beta.memory_stores.create(name="Bare")
    assert (store.description, store.metadata) == ("", {})


def test_retrieve_returns_the_same_object_as_create(sdk):
    created = sdk.beta.memory_stores.create(name="Prefs", metadata={"a": "1"})
    assert sdk.beta.memory_stores.retrieve(created.id) == created


def test_update_changes_name_clears_description_and_patches_metadata(sdk):
    created = sdk.beta.memory_stores.create(name="Old", description="d", metadata={"keep": "1", "drop": "2"})
    updated = sdk.beta.memory_stores.update(created.id, name="New", description="", metadata={"drop": None, "add": "3"})
    assert (updated.name, updated.description, updated.metadata) == ("New", "", {"keep": "1", "add": "3"})
    assert updated.updated_at > created.updated_at and updated.created_at == created.created_at


def test_update_with_nothing_to_change_keeps_updated_at(sdk):
    created = sdk.beta.memory_stores.create(name="Same")
    assert sdk.beta.memory_stores.update(created.id, name="Same").updated_at == created.updated_at


def test_update_with_bad_metadata_is_a_bad_request_with_invalid_metadata_code(sdk):
    created = sdk.beta.memory_stores.create(name="Prefs")
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.memory_stores.update(created.id, metadata={f"k{i}": "v" for i in range(17)})
    assert caught.value.error_code == "invalid_metadata"
    assert sdk.beta.memory_stores.retrieve(created.id).metadata == {}


@pytest.mark.parametrize("metadata", [5, "k=v", ["k", "v"], True])
def test_metadata_of_another_json_type_is_an_invalid_metadata_error(sdk, metadata):
    """A type check in front of the metadata validator must keep its `invalid_metadata` code, which the SDK
    maps (`error_code`; `BetaInvalidMetadataError` in its error union)."""
    created = sdk.beta.memory_stores.create(name="Prefs", metadata={"keep": "1"})
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.memory_stores.create(name="Other", metadata=metadata)
    assert caught.value.error_code == "invalid_metadata"
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.memory_stores.update(created.id, metadata=metadata)
    assert caught.value.error_code == "invalid_metadata"
    error = caught.value.body["error"]
    assert error["details"]["fields"] == {"metadata": error["message"].removeprefix("metadata: ")}
    assert error["message"].startswith("metadata: Must be an object or null, not ")
    assert [store.name for store in sdk.beta.memory_stores.list()] == ["Prefs"]
    assert sdk.beta.memory_stores.retrieve(created.id).metadata == {"keep": "1"}


def test_archive_sets_archived_at_once_and_is_idempotent(sdk):
    created = sdk.beta.memory_stores.create(name="Prefs")
    archived = sdk.beta.memory_stores.archive(created.id)
    assert archived.archived_at is not None and archived.updated_at == archived.archived_at
    assert sdk.beta.memory_stores.archive(created.id) == archived


def test_update_of_an_archived_store_is_a_conflict(sdk):
    created = sdk.beta.memory_stores.create(name="Prefs")
    sdk.beta.memory_stores.archive(created.id)
    with pytest.raises(anthropic.ConflictError) as caught:
        sdk.beta.memory_stores.update(created.id, name="Renamed")
    assert caught.value.body["error"]["details"]["reason"] == "store_archived"
    assert caught.value.response.headers["x-should-retry"] == "false"


def test_list_is_newest_first_and_leaves_out_archived_stores_by_default(sdk):
    first = sdk.beta.memory_stores.create(name="first")
    second = sdk.beta.memory_stores.create(name="second")
    third = sdk.beta.memory_stores.create(name="third")
    sdk.beta.memory_stores.archive(second.id)
    assert [s.id for s in sdk.beta.memory_stores.list()] == [third.id, first.id]
    assert [s.id for s in sdk.beta.memory_stores.list(include_archived=True)] == [third.id, second.id, first.id]


def test_list_pages_with_next_page_until_null(sdk):
    created = [sdk.beta.memory_stores.create(name=f"s{i}").id for i in range(5)]
    page = sdk.beta.memory_stores.list(limit=2)
    assert len(page.data) == 2 and page.next_page
    assert [s.id for s in page] == created[::-1]  # auto-pagination follows next_page to the end
    last = sdk.beta.memory_stores.list(limit=5)
    assert last.next_page is None


def test_list_filters_by_inclusive_created_at_bounds(sdk):
    stores = [sdk.beta.memory_stores.create(name=f"s{i}") for i in range(3)]
    middle = stores[1].created_at
    listed = sdk.beta.memory_stores.list(created_at_gte=middle, created_at_lte=middle)
    assert [s.id for s in listed] == [stores[1].id]
    assert [s.id for s in sdk.beta.memory_stores.list(created_at_gte=middle)] == [stores[2].id, stores[1].id]


def test_list_shows_only_stores_the_caller_can_read(sdk_for, owner, reader, stranger):
    mine = StoreFactory(owner=owner, canonical=False)
    shared = StoreFactory(owner=stranger, canonical=False)
    StoreFactory(owner=stranger, canonical=False)  # private to the stranger
    ReaderGrantFactory(store=shared, user=owner)
    listed = {s.id for s in sdk_for(owner).beta.memory_stores.list()}
    assert listed == {str(mine.pk), str(shared.pk)}


def test_delete_returns_the_deleted_marker_and_the_store_is_gone(sdk):
    created = sdk.beta.memory_stores.create(name="Prefs")
    sdk.beta.memory_stores.memories.create(created.id, path="/a.md", content="x")
    deleted = sdk.beta.memory_stores.delete(created.id)
    assert (deleted.id, deleted.type) == (created.id, "memory_store_deleted")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.memory_stores.retrieve(created.id)


def test_retrieve_of_an_unreadable_store_is_not_found(sdk_for, owner, stranger):
    private = StoreFactory(owner=owner, canonical=False)
    with pytest.raises(anthropic.NotFoundError) as caught:
        sdk_for(stranger).beta.memory_stores.retrieve(str(private.pk))
    assert caught.value.type == "not_found_error"


def test_update_archive_and_delete_by_a_reader_are_permission_errors(sdk_for, owner, reader):
    store = StoreFactory(owner=owner, canonical=False)
    ReaderGrantFactory(store=store, user=reader)
    client = sdk_for(reader)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.beta.memory_stores.update(str(store.pk), name="x")
    with pytest.raises(anthropic.PermissionDeniedError):
        client.beta.memory_stores.archive(str(store.pk))
    with pytest.raises(anthropic.PermissionDeniedError):
        client.beta.memory_stores.delete(str(store.pk))
    assert Store.objects.filter(pk=store.pk, archived_at=None).exists()


def test_create_with_an_empty_name_is_a_bad_request(sdk):
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.memory_stores.create(name="")
    assert caught.value.type == "invalid_request_error"
    assert not Store.objects.exists()


def test_a_token_sent_as_x_api_key_is_a_401_that_says_how_to_send_it(live_server, owner, public_store):
    """X-Api-Key (how Anthropic's own API takes its key) was read as no credential at all: a private store was a
    404 and a public one was served anonymously. It is a 401 naming the Authorization header now; beside an
    Authorization header it is ignored. The SDK sends `api_key=` as a bearer token, so it works either way."""
    secret = account_services.issue_token(user=owner).secret
    url = f"{live_server.url}/api/v1"
    with httpx.Client(base_url=url) as http:
        for path in ("/memory_stores", f"/memories/{public_store.pk}"):  # the second: not an anonymous read
            response = http.get(path, headers={"X-Api-Key": secret})
            assert response.status_code == 401, response.text
            error = response.json()["error"]
            assert error["type"] == "authentication_error"
            assert error["message"] == "Send your token as 'Authorization: Bearer <token>', not as X-Api-Key."
        both = http.get("/memory_stores", headers={"X-Api-Key": "sk-ant-other", "Authorization": f"Bearer {secret}"})
        assert both.status_code == 200 and [row["id"] for row in both.json()["data"]] == [str(public_store.pk)]
    with Anthropic(base_url=f"{live_server.url}/api", api_key=secret, max_retries=0) as sdk:
        assert [store.id for store in sdk.beta.memory_stores.list()] == [str(public_store.pk)]
