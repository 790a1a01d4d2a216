"""File writes are one statement each (issue 17), and that statement never decides on a stale snapshot.

The counts are of a request outside any test transaction (as in production, autocommit): the token with
the store and the caller's access (one statement, `accounts.authentication`), then ONE statement for
create, update (with or without a precondition, rename, no-op) and delete, and for a refusal. The race
tests hold the store lock in another connection while a write waits for it, then commit a clashing
write: the waiting statement's snapshot predates that commit, so it must notice, write nothing and
decide again under the lock (`versions.services._write`).
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from django.db import connections, transaction

from stores.models import Store
from stores.services import lock_store
from tests.files.conftest import memories_url
from versions import services
from versions.errors import MemoryLimitReached, MemoryNotFound, MemoryPathConflict, MemoryPreconditionFailed
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db(transaction=True)

WRITE = 2  # the token with the store (access) in one statement, the write


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def client(owner_client, private_store):
    """`owner_client` after one request (a token's first use also records `last_used_at`)."""
    assert owner_client.get(memories_url(private_store)).status_code == 200
    return owner_client


def test_a_create_is_one_statement(client, private_store, django_assert_num_queries):
    with django_assert_num_queries(WRITE):
        response = client.post(memories_url(private_store), {"path": "/a.md", "content": "one"}, format="json")
    assert response.status_code == 200
    private_store.refresh_from_db()
    assert private_store.memory_count == 1


@pytest.mark.parametrize(
    "body",
    [
        {"content": "two"},
        {"content": "two", "precondition": {"type": "content_sha256", "content_sha256": sha("one")}},
        {"path": "/b.md"},
        {"content": "one"},  # no-op
    ],
)
def test_an_update_is_one_statement(client, private_store, seed, body, django_assert_num_queries):
    memory = seed("/a.md", "one")
    with django_assert_num_queries(WRITE):
        response = client.post(memories_url(private_store, str(memory.pk)), body, format="json")
    assert response.status_code == 200


@pytest.mark.parametrize("query", ["", f"?expected_content_sha256={sha('one')}"])
def test_a_delete_is_one_statement(client, private_store, seed, query, django_assert_num_queries):
    memory = seed("/a.md", "one")
    with django_assert_num_queries(WRITE):
        response = client.delete(memories_url(private_store, str(memory.pk)) + query)
    assert response.json() == {"id": str(memory.pk), "type": "memory_deleted"}
    version = Version.objects.get(operation="deleted")
    assert (version.path, version.content, version.content_sha256, version.content_size_bytes) == (
        "/a.md",
        None,
        None,
        None,
    )
    assert version.created_by == {"type": "api_actor", "api_key_id": str(client.token.pk)}
    assert Store.objects.get(pk=private_store.pk).memory_count == 0
    assert not Memory.objects.exists()


def test_refusals_are_one_statement_and_write_nothing(client, private_store, seed, django_assert_num_queries):
    memory = seed("/a/b.md", "one")
    stale = {"content": "two", "precondition": {"type": "content_sha256", "content_sha256": sha("other")}}
    for url, body, kind in [
        (memories_url(private_store), {"path": "/a/b.md", "content": "other"}, "memory_path_conflict_error"),
        (memories_url(private_store), {"path": "/a", "content": "x"}, "memory_path_conflict_error"),
        (memories_url(private_store, str(memory.pk)), stale, "memory_precondition_failed_error"),
    ]:
        with django_assert_num_queries(WRITE):
            response = client.post(url, body, format="json")
        assert response.status_code == 409
        assert response.json()["error"]["type"] == kind
    assert Version.objects.count() == 1
    private_store.refresh_from_db()
    assert private_store.memory_count == 1


def _hold_lock_then(store: Store, write, holding: threading.Event, release_after: float = 0.5):
    """In another connection: lock `store`, run `write()` in that transaction, commit after a pause."""

    def run():
        try:
            with transaction.atomic():
                lock_store(store)
                write()
                holding.set()
                time.sleep(release_after)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    assert holding.wait(10)
    return thread


def test_a_create_that_waited_for_the_lock_sees_the_descendant_created_meanwhile(private_store, owner_actor):
    holding = threading.Event()
    other = _hold_lock_then(
        private_store,
        lambda: services.create_memory(store=private_store, path="/a/b.md", content="x", actor=owner_actor),
        holding,
    )
    with pytest.raises(MemoryPathConflict) as caught:
        services.create_memory(store=private_store, path="/a", content="y", actor=owner_actor)
    other.join()
    assert caught.value.extra["conflicting_path"] == "/a/b.md"
    assert list(Memory.objects.values_list("path", flat=True)) == ["/a/b.md"]
    assert Store.objects.get(pk=private_store.pk).memory_count == 1


def test_a_create_that_waited_sees_a_rename_committed_meanwhile(private_store, owner_actor, seed):
    moving = seed("/x.md", "x")
    holding = threading.Event()
    other = _hold_lock_then(
        private_store,
        lambda: services.update_memory(store=private_store, memory_id=moving.pk, path="/a/b.md", actor=owner_actor),
        holding,
    )
    with pytest.raises(MemoryPathConflict):
        services.create_memory(store=private_store, path="/a", content="y", actor=owner_actor)
    other.join()
    assert sorted(Memory.objects.values_list("path", flat=True)) == ["/a/b.md"]


def test_an_update_that_waited_sees_the_content_written_meanwhile(private_store, owner_actor, seed):
    memory = seed("/a.md", "one")
    holding = threading.Event()
    other = _hold_lock_then(
        private_store,
        lambda: services.update_memory(store=private_store, memory_id=memory.pk, content="two", actor=owner_actor),
        holding,
    )
    with pytest.raises(MemoryPreconditionFailed) as caught:
        services.update_memory(
            store=private_store, memory_id=memory.pk, content="three", expected_sha256=sha("one"), actor=owner_actor
        )
    other.join()
    assert caught.value.details == {"content_sha256": sha("two")}
    assert Memory.objects.get().content == "two"


def test_a_delete_that_waited_sees_the_memory_deleted_meanwhile(private_store, owner_actor, seed):
    memory = seed("/a.md", "one")
    holding = threading.Event()
    other = _hold_lock_then(
        private_store,
        lambda: services.delete_memory(store=private_store, memory_id=memory.pk, actor=owner_actor),
        holding,
    )
    with pytest.raises(MemoryNotFound):
        services.delete_memory(store=private_store, memory_id=memory.pk, actor=owner_actor)
    other.join()
    assert Version.objects.filter(operation="deleted").count() == 1
    assert Store.objects.get(pk=private_store.pk).memory_count == 0


def test_a_create_that_waited_sees_the_cap_reached_meanwhile(private_store, owner_actor, settings):
    settings.MEMORY_STORE_MAX_MEMORIES = 1
    holding = threading.Event()
    other = _hold_lock_then(
        private_store,
        lambda: services.create_memory(store=private_store, path="/one.md", content="x", actor=owner_actor),
        holding,
    )
    with pytest.raises(MemoryLimitReached):
        services.create_memory(store=private_store, path="/two.md", content="y", actor=owner_actor)
    other.join()
    assert Store.objects.get(pk=private_store.pk).memory_count == 1
