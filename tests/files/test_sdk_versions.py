"""The official anthropic SDK drives the three version operations against a live server (SPEC §5)."""

from __future__ import annotations

import hashlib
import uuid

import anthropic
import pytest

from versions.models import Version

pytestmark = pytest.mark.django_db(transaction=True)

VERSION_KEYS = {
    "id",
    "type",
    "memory_id",
    "memory_store_id",
    "operation",
    "path",
    "content",
    "content_sha256",
    "content_size_bytes",
    "created_at",
    "created_by",
    "redacted_at",
    "redacted_by",
}


@pytest.fixture
def store(sdk):
    return sdk.beta.memory_stores.create(name="Notes")


@pytest.fixture
def history(sdk, store):
    """A memory created, modified (content), renamed, then deleted: four versions, newest first."""
    memories = sdk.beta.memory_stores.memories
    memory = memories.create(store.id, path="/a.md", content="one")
    memories.update(memory.id, memory_store_id=store.id, content="two")
    memories.update(memory.id, memory_store_id=store.id, path="/b.md")
    memories.delete(memory.id, memory_store_id=store.id)
    return memory


def test_list_returns_the_lineage_newest_first_with_basic_view(sdk, store, history):
    raw = sdk.beta.memory_stores.memory_versions.with_raw_response.list(store.id, memory_id=history.id)
    body = raw.http_response.json()
    assert set(body) == {"data", "next_page"} and body["next_page"] is None
    assert all(set(item) == VERSION_KEYS for item in body["data"])
    versions = raw.parse().data
    assert [(v.operation, v.path, v.content) for v in versions] == [
        ("deleted", "/b.md", None),
        ("modified", "/b.md", None),
        ("modified", "/a.md", None),
        ("created", "/a.md", None),
    ]
    assert [v.content_sha256 for v in versions] == [
        None,
        hashlib.sha256(b"two").hexdigest(),
        hashlib.sha256(b"two").hexdigest(),
        hashlib.sha256(b"one").hexdigest(),
    ]
    assert [v.content_size_bytes for v in versions] == [None, 3, 3, 3]
    assert all(v.memory_store_id == store.id and v.type == "memory_version" for v in versions)
    assert all(v.redacted_at is None and v.redacted_by is None for v in versions)


def test_retrieve_defaults_to_full_view_and_keeps_working_after_the_memory_is_deleted(sdk, store, history):
    created = sdk.beta.memory_stores.memory_versions.list(store.id, operation="created").data[0]
    got = sdk.beta.memory_stores.memory_versions.retrieve(created.id, memory_store_id=store.id)
    assert got.content == "one" and got.model_copy(update={"content": None}) == created
    assert got.created_by.type == "api_actor" and got.created_by.api_key_id == str(sdk.token.pk)


def test_redact_nulls_content_path_digest_and_size_and_records_who(sdk, store, history):
    created = sdk.beta.memory_stores.memory_versions.list(store.id, operation="created").data[0]
    redacted = sdk.beta.memory_stores.memory_versions.redact(created.id, memory_store_id=store.id)
    assert (redacted.content, redacted.path, redacted.content_sha256, redacted.content_size_bytes) == (
        None,
        None,
        None,
        None,
    )
    assert redacted.redacted_at is not None
    assert redacted.redacted_by.type == "api_actor" and redacted.redacted_by.api_key_id == str(sdk.token.pk)
    assert (redacted.id, redacted.operation, redacted.created_at, redacted.created_by) == (
        created.id,
        "created",
        created.created_at,
        created.created_by,
    )
    assert Version.objects.filter(pk=created.id).exists()


def test_redacting_again_returns_the_version_unchanged(sdk, store, history):
    created = sdk.beta.memory_stores.memory_versions.list(store.id, operation="created").data[0]
    first = sdk.beta.memory_stores.memory_versions.redact(created.id, memory_store_id=store.id)
    assert sdk.beta.memory_stores.memory_versions.redact(created.id, memory_store_id=store.id) == first


def test_redacting_the_head_of_a_live_memory_is_a_conflict(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="x")
    with pytest.raises(anthropic.ConflictError) as caught:
        sdk.beta.memory_stores.memory_versions.redact(memory.memory_version_id, memory_store_id=store.id)
    assert caught.value.type == "conflict_error"
    assert caught.value.body["error"]["details"]["reason"] == "version_is_current"
    assert Version.objects.get(pk=memory.memory_version_id).redacted_at is None


def test_list_filters_by_operation_and_api_key(sdk_for, sdk, owner, store):
    other = sdk_for(owner)
    first = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="x")
    other.beta.memory_stores.memories.update(first.id, memory_store_id=store.id, content="y")
    mine = sdk.beta.memory_stores.memory_versions.list(store.id, api_key_id=str(sdk.token.pk))
    theirs = sdk.beta.memory_stores.memory_versions.list(store.id, api_key_id=str(other.token.pk))
    assert [v.operation for v in mine] == ["created"] and [v.operation for v in theirs] == ["modified"]
    assert [v.operation for v in sdk.beta.memory_stores.memory_versions.list(store.id, operation="modified")] == [
        "modified"
    ]


def test_list_with_view_full_returns_content(sdk, store, history):
    versions = sdk.beta.memory_stores.memory_versions.list(store.id, view="full").data
    assert [v.content for v in versions] == [None, "two", "two", "one"]


def test_retrieve_of_an_unknown_version_is_not_found(sdk, store):
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.memory_stores.memory_versions.retrieve(str(uuid.uuid4()), memory_store_id=store.id)
