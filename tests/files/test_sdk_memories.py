"""The official anthropic SDK drives the five memory operations against a live server (SPEC §5)."""

from __future__ import annotations

import hashlib

import anthropic
import pytest

from tests.factories import ReaderGrantFactory, StoreFactory
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db(transaction=True)

MEMORY_KEYS = {
    "id",
    "type",
    "memory_store_id",
    "path",
    "content",
    "content_sha256",
    "content_size_bytes",
    "memory_version_id",
    "created_at",
    "updated_at",
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def store(sdk):
    return sdk.beta.memory_stores.create(name="Notes")


def test_create_returns_the_memory_object_field_by_field_with_basic_view(sdk, store):
    raw = sdk.beta.memory_stores.memories.with_raw_response.create(store.id, path="/notes/todo.md", content="héllo")
    body = raw.http_response.json()
    memory = raw.parse()
    row = Memory.objects.get(pk=memory.id)
    assert set(body) == MEMORY_KEYS and body["content"] is None
    assert memory.type == "memory" and memory.memory_store_id == store.id
    assert (memory.path, memory.content) == ("/notes/todo.md", None)
    assert (memory.content_sha256, memory.content_size_bytes) == (sha("héllo"), 6)
    assert memory.memory_version_id == str(row.current_version_id)
    assert memory.created_at == row.created_at == memory.updated_at


def test_create_with_view_full_returns_the_content(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="body", view="full")
    assert memory.content == "body"


def test_create_records_a_created_version_by_the_api_actor(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="body")
    version = sdk.beta.memory_stores.memory_versions.retrieve(memory.memory_version_id, memory_store_id=store.id)
    assert (version.operation, version.memory_id, version.path, version.content) == (
        "created",
        memory.id,
        "/a.md",
        "body",
    )
    assert version.created_by.type == "api_actor" and version.created_by.api_key_id == str(sdk.token.pk)


def test_retrieve_defaults_to_the_full_view(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="body")
    got = sdk.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id)
    assert got.content == "body" and got.model_copy(update={"content": None}) == memory
    basic = sdk.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id, view="basic")
    assert basic.content is None and basic.content_sha256 == sha("body")


def test_update_changes_content_and_appends_a_modified_version(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="one")
    updated = sdk.beta.memory_stores.memories.update(
        memory.id,
        memory_store_id=store.id,
        content="two",
        precondition={"type": "content_sha256", "content_sha256": memory.content_sha256},
    )
    assert updated.id == memory.id and updated.content is None
    assert updated.content_sha256 == sha("two") and updated.memory_version_id != memory.memory_version_id
    assert updated.updated_at > memory.updated_at and updated.created_at == memory.created_at
    ops = [v.operation for v in sdk.beta.memory_stores.memory_versions.list(store.id, memory_id=memory.id)]
    assert ops == ["modified", "created"]


def test_update_with_a_stale_precondition_raises_conflict_with_the_precondition_type(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="one")
    with pytest.raises(anthropic.ConflictError) as caught:
        sdk.beta.memory_stores.memories.update(
            memory.id,
            memory_store_id=store.id,
            content="two",
            precondition={"type": "content_sha256", "content_sha256": sha("something else")},
        )
    assert caught.value.type == "memory_precondition_failed_error"
    assert caught.value.body["error"]["type"] == "memory_precondition_failed_error"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert Memory.objects.get(pk=memory.id).content == "one"


def test_create_on_an_occupied_path_raises_a_path_conflict_naming_the_memory(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="one")
    with pytest.raises(anthropic.ConflictError) as caught:
        sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="two")
    error = caught.value.body["error"]
    assert caught.value.type == "memory_path_conflict_error"
    assert (error["conflicting_memory_id"], error["conflicting_path"]) == (memory.id, "/a.md")


def test_list_returns_memories_and_prefixes_as_their_own_types(sdk, store):
    for path in ["/b.md", "/a/x.md", "/a/y.md", "/c/d/e.md"]:
        sdk.beta.memory_stores.memories.create(store.id, path=path, content=path)
    page = sdk.beta.memory_stores.memories.list(store.id, depth=1)
    assert [(item.type, item.path) for item in page.data] == [
        ("memory_prefix", "/a/"),
        ("memory", "/b.md"),
        ("memory_prefix", "/c/"),
    ]
    assert page.next_page is None
    nested = sdk.beta.memory_stores.memories.list(store.id, path_prefix="/a/", view="full")
    assert [(m.path, m.content) for m in nested] == [("/a/x.md", "/a/x.md"), ("/a/y.md", "/a/y.md")]


def test_list_auto_paginates_through_every_memory(sdk, store):
    paths = sorted(f"/n{i:02}.md" for i in range(9))
    for path in paths:
        sdk.beta.memory_stores.memories.create(store.id, path=path, content="")
    assert [m.path for m in sdk.beta.memory_stores.memories.list(store.id, limit=4)] == paths


def test_delete_returns_the_marker_and_the_memory_is_not_found_afterwards(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="one")
    deleted = sdk.beta.memory_stores.memories.delete(
        memory.id, memory_store_id=store.id, expected_content_sha256=memory.content_sha256
    )
    assert (deleted.id, deleted.type) == (memory.id, "memory_deleted")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id)


def test_delete_with_a_wrong_expected_hash_is_a_precondition_conflict_and_keeps_the_memory(sdk, store):
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="one")
    with pytest.raises(anthropic.ConflictError) as caught:
        sdk.beta.memory_stores.memories.delete(memory.id, memory_store_id=store.id, expected_content_sha256=sha("x"))
    assert caught.value.type == "memory_precondition_failed_error"
    assert Memory.objects.filter(pk=memory.id).exists()
    assert Version.objects.filter(memory_id=memory.id).count() == 1


def test_oversized_content_is_a_bad_request(sdk, store):
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.beta.memory_stores.memories.create(store.id, path="/big.md", content="x" * 102_401)
    assert caught.value.type == "invalid_request_error"
    assert not Memory.objects.exists()


def test_an_invalid_path_is_a_bad_request(sdk, store):
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.memory_stores.memories.create(store.id, path="/a/../b.md", content="x")


def test_a_reader_cannot_write_but_can_read(sdk_for, owner, reader):
    store = StoreFactory(owner=owner, canonical=False)
    ReaderGrantFactory(store=store, user=reader)
    memory = sdk_for(owner).beta.memory_stores.memories.create(str(store.pk), path="/a.md", content="x")
    client = sdk_for(reader)
    assert client.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=str(store.pk)).content == "x"
    with pytest.raises(anthropic.PermissionDeniedError):
        client.beta.memory_stores.memories.create(str(store.pk), path="/b.md", content="x")
    with pytest.raises(anthropic.PermissionDeniedError):
        client.beta.memory_stores.memories.delete(memory.id, memory_store_id=str(store.pk))


def test_a_nonreader_gets_not_found_for_the_memory_and_its_store(sdk_for, owner, stranger):
    store = StoreFactory(owner=owner, canonical=False)
    memory = sdk_for(owner).beta.memory_stores.memories.create(str(store.pk), path="/a.md", content="secret")
    client = sdk_for(stranger)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=str(store.pk))
    with pytest.raises(anthropic.NotFoundError):
        client.beta.memory_stores.memories.list(str(store.pk))
    with pytest.raises(anthropic.NotFoundError):
        client.beta.memory_stores.memories.update(memory.id, memory_store_id=str(store.pk), content="mine")


def test_the_readme_example_runs_against_the_server(sdk, live_server, monkeypatch):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## File Memory Stores", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("ROG_API_URL", live_server.url)  # the README's walk exports both
    monkeypatch.setenv("ROG_TOKEN", sdk.auth_token)
    namespace = {"print": lambda *args: None}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    namespace["client"].close()
    assert Memory.objects.get().content == "Vim, 2 spaces."
