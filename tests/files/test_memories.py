"""File-memory behaviour through the API: conflicts, renames, preconditions, no-ops, lists (SPEC §5)."""

from __future__ import annotations

import hashlib

import pytest

from tests.files.conftest import memories_url, versions_url
from versions.models import Memory, Version


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def precondition(text: str) -> dict:
    return {"type": "content_sha256", "content_sha256": sha(text)}


# --- path conflicts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing", "requested"),
    [("/a", "/a/b.md"), ("/a/b.md", "/a"), ("/a", "/a/b/c/d.md"), ("/a/b/c/d.md", "/a/b")],
    ids=["below-a-file", "above-a-file", "deep-below", "deep-above"],
)
def test_creating_an_ancestor_or_descendant_of_a_memory_is_a_path_conflict(
    owner_client, private_store, seed, existing, requested
):
    blocker = seed(existing)
    response = owner_client.post(memories_url(private_store), {"path": requested, "content": "x"})
    assert response.status_code == 409
    assert response["x-should-retry"] == "false"
    error = response.json()["error"]
    assert error["type"] == "memory_path_conflict_error"
    assert error["conflicting_memory_id"] == str(blocker.pk)
    assert error["conflicting_path"] == existing
    assert Memory.objects.count() == 1


def test_siblings_sharing_a_name_prefix_do_not_conflict(owner_client, private_store, seed):
    seed("/a")
    for path in ["/ab", "/a.md", "/a-b/c"]:
        assert owner_client.post(memories_url(private_store), {"path": path, "content": "x"}).status_code == 200


def test_renaming_onto_an_occupied_path_is_a_path_conflict(owner_client, private_store, seed):
    seed("/taken.md")
    mover = seed("/mover.md")
    response = owner_client.post(memories_url(private_store, str(mover.pk)), {"path": "/taken.md"})
    assert response.status_code == 409
    assert response.json()["error"]["conflicting_path"] == "/taken.md"
    assert Memory.objects.get(pk=mover.pk).path == "/mover.md"


def test_renaming_below_another_memory_is_a_path_conflict(owner_client, private_store, seed):
    blocker = seed("/dir")
    mover = seed("/mover.md")
    response = owner_client.post(memories_url(private_store, str(mover.pk)), {"path": "/dir/mover.md"})
    assert response.status_code == 409
    assert response.json()["error"]["conflicting_memory_id"] == str(blocker.pk)


def test_renaming_a_memory_below_its_own_old_path_is_allowed(owner_client, private_store, seed):
    memory = seed("/a")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), {"path": "/a/b"})
    assert response.status_code == 200 and response.json()["path"] == "/a/b"


def test_creating_the_same_content_at_an_existing_path_returns_that_memory(owner_client, private_store, seed):
    memory = seed("/a.md", "same")
    response = owner_client.post(memories_url(private_store), {"path": "/a.md", "content": "same"})
    assert response.status_code == 200
    assert response.json()["id"] == str(memory.pk)
    assert response.json()["memory_version_id"] == str(memory.current_version_id)
    assert Version.objects.count() == 1


def test_creating_different_content_at_an_existing_path_is_a_conflict(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    response = owner_client.post(memories_url(private_store), {"path": "/a.md", "content": "two"})
    assert response.status_code == 409
    assert response.json()["error"]["conflicting_memory_id"] == str(memory.pk)
    assert Memory.objects.get().content == "one"


def test_a_deleted_memory_frees_its_path_and_recreating_gives_a_new_id(owner_client, private_store, seed):
    old = seed("/a.md", "one")
    assert owner_client.delete(memories_url(private_store, str(old.pk))).status_code == 200
    response = owner_client.post(memories_url(private_store), {"path": "/a.md", "content": "one"})
    assert response.status_code == 200 and response.json()["id"] != str(old.pk)


# --- updates ------------------------------------------------------------------------------------------


def test_rename_keeps_the_id_and_appends_a_modified_version_with_the_new_path(owner_client, private_store, seed):
    memory = seed("/old.md", "body")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), {"path": "/new/name.md"})
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["path"], body["content_sha256"]) == (str(memory.pk), "/new/name.md", sha("body"))
    head = Version.objects.get(pk=body["memory_version_id"])
    assert (head.operation, head.path, head.content, head.memory_id) == ("modified", "/new/name.md", "body", memory.pk)
    assert Version.objects.filter(memory_id=memory.pk).count() == 2


def test_update_of_content_and_path_at_once_appends_one_version(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), {"path": "/b.md", "content": "two"})
    assert response.status_code == 200
    lineage = Version.objects.filter(memory_id=memory.pk).order_by("created_at")
    assert list(lineage.values_list("operation", "path")) == [
        ("created", "/a.md"),
        ("modified", "/b.md"),
    ]


@pytest.mark.parametrize(
    "body",
    [{}, {"content": "same"}, {"path": "/a.md"}, {"content": "same", "path": "/a.md"}, {"content": None, "path": None}],
)
def test_an_update_that_changes_nothing_appends_no_version(owner_client, private_store, seed, body):
    memory = seed("/a.md", "same")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), body)
    assert response.status_code == 200
    assert response.json()["memory_version_id"] == str(memory.current_version_id)
    assert (
        response.json()["updated_at"]
        == owner_client.get(memories_url(private_store, str(memory.pk))).json()["updated_at"]
    )
    assert Version.objects.count() == 1


def test_a_stale_precondition_whose_requested_state_is_stored_succeeds_without_a_version(
    owner_client, private_store, seed
):
    memory = seed("/a.md", "one")
    url = memories_url(private_store, str(memory.pk))
    first = owner_client.post(url, {"content": "two", "precondition": precondition("one")})
    assert first.status_code == 200
    retry = owner_client.post(url, {"content": "two", "precondition": precondition("one")})  # a retried request
    assert retry.status_code == 200
    assert retry.json()["memory_version_id"] == first.json()["memory_version_id"]
    assert Version.objects.filter(memory_id=memory.pk).count() == 2


def test_a_stale_precondition_with_a_different_request_is_refused_and_changes_nothing(
    owner_client, private_store, seed
):
    memory = seed("/a.md", "one")
    url = memories_url(private_store, str(memory.pk))
    response = owner_client.post(url, {"content": "three", "precondition": precondition("zero")})
    assert response.status_code == 409
    assert response["x-should-retry"] == "false"
    assert response.json()["error"]["type"] == "memory_precondition_failed_error"
    assert Memory.objects.get().content == "one" and Version.objects.count() == 1


def test_a_precondition_refers_to_the_current_content_even_when_renaming(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    url = memories_url(private_store, str(memory.pk))
    assert owner_client.post(url, {"path": "/b.md", "precondition": precondition("one")}).status_code == 200
    assert owner_client.post(url, {"path": "/c.md", "precondition": precondition("two")}).status_code == 409


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "etag", "content_sha256": "0" * 64},
        {"type": "content_sha256", "content_sha256": "A" * 64},
        {"type": "content_sha256", "content_sha256": "0" * 63},
        {"type": "content_sha256"},
        {"content_sha256": "0" * 64},
        {"type": "content_sha256", "content_sha256": "0" * 64, "extra": True},
        "0" * 64,
    ],
)
def test_a_malformed_precondition_is_rejected(owner_client, private_store, seed, bad):
    memory = seed("/a.md", "one")
    response = owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "two", "precondition": bad})
    assert response.status_code == 400
    assert Memory.objects.get().content == "one"


def test_patch_is_an_alias_of_post_for_updates(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    response = owner_client.patch(memories_url(private_store, str(memory.pk)), {"content": "two"})
    assert response.status_code == 200 and Memory.objects.get().content == "two"


def test_update_of_an_unknown_memory_is_not_found(owner_client, private_store):
    for memory_id in ["00000000-0000-0000-0000-000000000000", "not-a-uuid"]:
        response = owner_client.post(memories_url(private_store, memory_id), {"content": "x"})
        assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_a_memory_of_another_store_is_not_found_here(owner_client, private_store, public_store, seed):
    elsewhere = seed("/a.md", store=public_store)
    assert owner_client.get(memories_url(private_store, str(elsewhere.pk))).status_code == 404
    assert owner_client.delete(memories_url(private_store, str(elsewhere.pk))).status_code == 404


# --- delete -------------------------------------------------------------------------------------------


def test_delete_appends_a_deleted_version_with_the_path_and_keeps_the_lineage(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    url = memories_url(private_store, str(memory.pk))
    response = owner_client.delete(f"{url}?expected_content_sha256={sha('one')}")
    assert response.status_code == 200 and response.json() == {"id": str(memory.pk), "type": "memory_deleted"}
    lineage = owner_client.get(versions_url(private_store) + f"?memory_id={memory.pk}").json()["data"]
    assert [(v["operation"], v["path"], v["content_sha256"]) for v in lineage] == [
        ("deleted", "/a.md", None),
        ("created", "/a.md", sha("one")),
    ]


def test_delete_with_a_malformed_expected_hash_is_rejected(owner_client, private_store, seed):
    memory = seed("/a.md", "one")
    response = owner_client.delete(memories_url(private_store, str(memory.pk)) + "?expected_content_sha256=xyz")
    assert response.status_code == 400 and Memory.objects.exists()


def test_delete_twice_is_not_found_the_second_time(owner_client, private_store, seed):
    memory = seed("/a.md")
    assert owner_client.delete(memories_url(private_store, str(memory.pk))).status_code == 200
    assert owner_client.delete(memories_url(private_store, str(memory.pk))).status_code == 404


# --- the counter and the log fields --------------------------------------------------------------------


def test_memory_count_tracks_current_memories_and_log_fields_are_untouched(owner_client, private_store, seed):
    before = (private_store.entry_count, private_store.generation, private_store.summary_count)
    updated_at = private_store.updated_at
    a = seed("/a.md")
    seed("/b.md")
    owner_client.post(memories_url(private_store, str(a.pk)), {"content": "changed", "path": "/c.md"})
    owner_client.delete(memories_url(private_store, str(a.pk)))
    private_store.refresh_from_db()
    assert private_store.memory_count == 1 == Memory.objects.count()
    assert (private_store.entry_count, private_store.generation, private_store.summary_count) == before
    assert private_store.updated_at == updated_at


def test_the_memory_cap_refuses_a_new_path_but_keeps_existing_memories_editable(
    owner_client, private_store, seed, settings
):
    settings.MEMORY_STORE_MAX_MEMORIES = 2
    first = seed("/a.md", "one")
    seed("/b.md")
    response = owner_client.post(memories_url(private_store), {"path": "/c.md", "content": "x"})
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "conflict_error"
    assert response.json()["error"]["details"]["reason"] == "memory_limit"
    assert response["x-should-retry"] == "false"
    assert owner_client.post(memories_url(private_store, str(first.pk)), {"content": "two"}).status_code == 200
    assert owner_client.post(memories_url(private_store), {"path": "/a.md", "content": "two"}).status_code == 200
    owner_client.delete(memories_url(private_store, str(first.pk)))
    assert owner_client.post(memories_url(private_store), {"path": "/c.md", "content": "x"}).status_code == 200
