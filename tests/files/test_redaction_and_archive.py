"""Redaction rules and what an archived store still allows (SPEC §3, §5; MEMORY_STORES_API §8)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.files.conftest import memories_url, versions_url
from versions.models import Memory, Version


def redact(client, store, version_id):
    return client.post(versions_url(store, str(version_id), "redact"))


# --- redaction ----------------------------------------------------------------------------------------


def test_redaction_nulls_content_path_digest_and_size_and_keeps_the_row(owner_client, private_store, seed):
    memory = seed("/secret.md", "api key 123")
    old_head = memory.current_version_id
    owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "clean"})
    response = redact(owner_client, private_store, old_head)
    assert response.status_code == 200
    body = response.json()
    assert (body["content"], body["path"], body["content_sha256"], body["content_size_bytes"]) == (None,) * 4
    assert body["redacted_by"] == {"type": "api_actor", "api_key_id": str(owner_client.token.pk)}
    assert body["created_by"] == {"type": "api_actor", "api_key_id": str(owner_client.token.pk)}
    assert (body["id"], body["operation"], body["memory_id"]) == (str(old_head), "created", str(memory.pk))
    row = Version.objects.get(pk=old_head)
    assert (row.content, row.path, row.content_sha256, row.content_size_bytes) == (None,) * 4
    assert row.redacted_at is not None


def test_a_redacted_version_reads_back_with_nulls_even_in_full_view(owner_client, private_store, seed):
    memory = seed("/secret.md", "api key 123")
    old_head = memory.current_version_id
    owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "clean"})
    redact(owner_client, private_store, old_head)
    got = owner_client.get(versions_url(private_store, str(old_head))).json()
    assert got["content"] is None and got["path"] is None and got["redacted_at"] is not None
    listed = owner_client.get(versions_url(private_store), {"view": "full"}).json()["data"]
    assert [(v["operation"], v["content"]) for v in listed] == [("modified", "clean"), ("created", None)]


def test_redacting_again_keeps_the_first_redaction(owner_client, make_client, owner, private_store, seed):
    memory = seed("/a.md", "one")
    old_head = memory.current_version_id
    owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "two"})
    first = redact(owner_client, private_store, old_head).json()
    again = redact(make_client(owner), private_store, old_head)
    assert again.status_code == 200 and again.json() == first


def test_the_head_of_a_live_memory_cannot_be_redacted(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    response = redact(owner_client, private_store, memory.current_version_id)
    assert response.status_code == 409
    assert response["x-should-retry"] == "false"
    assert response.json()["error"]["details"]["reason"] == "version_is_current"
    assert Version.objects.get(pk=memory.current_version_id).content == "one"


def test_after_delete_the_old_head_and_the_deleted_version_can_be_redacted(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    old_head = memory.current_version_id
    owner_client.delete(memories_url(private_store, str(memory.pk)))
    deleted = Version.objects.get(memory_id=memory.pk, operation="deleted")
    assert redact(owner_client, private_store, old_head).status_code == 200
    response = redact(owner_client, private_store, deleted.pk)
    assert response.status_code == 200 and response.json()["path"] is None
    assert Version.objects.filter(memory_id=memory.pk).count() == 2


def test_redacting_an_unknown_or_foreign_version_is_not_found(owner_client, private_store, public_store, seed):
    foreign = seed("/a.md", store=public_store)
    assert redact(owner_client, private_store, foreign.current_version_id).status_code == 404
    assert redact(owner_client, private_store, "nope").status_code == 404


def test_a_reader_cannot_redact(make_client, reader, private_store, seed, owner_client):
    from tests.factories import ReaderGrantFactory

    ReaderGrantFactory(store=private_store, user=reader)
    memory = seed("/a.md", "one")
    old_head = memory.current_version_id
    owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "two"})
    response = redact(make_client(reader), private_store, old_head)
    assert response.status_code == 403
    assert Version.objects.get(pk=old_head).redacted_at is None


# --- archive ------------------------------------------------------------------------------------------


@pytest.fixture
def archived(owner_client, private_store, seed):
    """The private store holding /a.md (modified once) and /b.md, then archived. Returns the two memories."""
    a = seed("/a.md", "one")
    b = seed("/b.md", "bee")
    owner_client.post(memories_url(private_store, str(a.pk)), {"content": "two"})
    assert owner_client.post(f"/api/v1/memory_stores/{private_store.pk}/archive").status_code == 200
    a.refresh_from_db()
    return a, b


def assert_store_archived(response):
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "conflict_error"
    assert response.json()["error"]["details"]["reason"] == "store_archived"
    assert response["x-should-retry"] == "false"


def test_an_archived_store_refuses_memory_create(owner_client, private_store, archived):
    assert_store_archived(owner_client.post(memories_url(private_store), {"path": "/c.md", "content": "x"}))
    assert not Memory.objects.filter(path="/c.md").exists()


def test_an_archived_store_refuses_memory_update_and_rename(owner_client, private_store, archived):
    a, _ = archived
    assert_store_archived(owner_client.post(memories_url(private_store, str(a.pk)), {"content": "three"}))
    assert_store_archived(owner_client.post(memories_url(private_store, str(a.pk)), {"path": "/z.md"}))
    assert Memory.objects.get(pk=a.pk).content == "two"


def test_an_archived_store_refuses_store_update(owner_client, private_store, archived):
    assert_store_archived(owner_client.post(f"/api/v1/memory_stores/{private_store.pk}", {"name": "Renamed"}))


def test_an_archived_store_still_serves_every_read(owner_client, private_store, archived):
    a, _ = archived
    base = f"/api/v1/memory_stores/{private_store.pk}"
    assert owner_client.get(base).json()["archived_at"] is not None
    assert len(owner_client.get(memories_url(private_store)).json()["data"]) == 2
    assert owner_client.get(memories_url(private_store, str(a.pk))).json()["content"] == "two"
    assert len(owner_client.get(versions_url(private_store)).json()["data"]) == 3
    assert owner_client.get(versions_url(private_store, str(a.current_version_id))).status_code == 200


def test_an_archived_store_allows_memory_delete(owner_client, private_store, archived):
    _, b = archived
    assert owner_client.delete(memories_url(private_store, str(b.pk))).status_code == 200
    private_store.refresh_from_db()
    assert private_store.memory_count == 1


def test_an_archived_store_allows_redaction(owner_client, private_store, archived):
    a, _ = archived
    old = Version.objects.get(memory_id=a.pk, operation="created")
    assert redact(owner_client, private_store, old.pk).status_code == 200


def test_an_archived_store_can_be_deleted_with_its_memories_and_versions(owner_client, private_store, archived):
    response = owner_client.delete(f"/api/v1/memory_stores/{private_store.pk}")
    assert response.json() == {"id": str(private_store.pk), "type": "memory_store_deleted"}
    assert not Memory.objects.exists() and not Version.objects.exists()


def test_archiving_twice_returns_the_same_archived_at(owner_client, private_store, archived):
    first = owner_client.get(f"/api/v1/memory_stores/{private_store.pk}").json()
    again = owner_client.post(f"/api/v1/memory_stores/{private_store.pk}/archive")
    assert again.status_code == 200 and again.json() == first
    assert private_store.__class__.objects.get(pk=private_store.pk).archived_at < timezone.now()
