"""Who may do what on the Memory Stores surface (SPEC §2, §3): nonreaders see nothing, readers only read."""

from __future__ import annotations

import uuid

import pytest

from tests.factories import ProjectFactory, ProjectMembershipFactory, ReaderGrantFactory, project_store
from tests.files.conftest import memories_url, versions_url
from versions.models import Memory, Version


@pytest.fixture
def written(private_store, seed, owner_client):
    """A memory written through this surface in the private store, modified once (so an old version exists)."""
    memory = seed("/secret.md", "the secret")
    owner_client.post(memories_url(private_store, str(memory.pk)), {"content": "the new secret"})
    memory.refresh_from_db()
    return memory


def operations(store_id, memory_id, version_id):
    """(method, url, body) for all fourteen operations except store create and store list."""
    base = f"/api/v1/memory_stores/{store_id}"
    return [
        ("get", base, None),
        ("post", base, {"name": "mine now"}),
        ("delete", base, None),
        ("post", f"{base}/archive", None),
        ("get", f"{base}/memories", None),
        ("post", f"{base}/memories", {"path": "/new.md", "content": "x"}),
        ("get", f"{base}/memories/{memory_id}", None),
        ("post", f"{base}/memories/{memory_id}", {"content": "overwritten"}),
        ("delete", f"{base}/memories/{memory_id}", None),
        ("get", f"{base}/memory_versions", None),
        ("get", f"{base}/memory_versions/{version_id}", None),
        ("post", f"{base}/memory_versions/{version_id}/redact", None),
    ]


def call(client, method, url, body):
    return getattr(client, method)(url, body) if body is not None else getattr(client, method)(url)


def without_request_id(response) -> dict:
    body = response.json()
    body.pop("request_id")
    return body


def test_every_operation_on_an_unreadable_store_is_identical_to_a_missing_store(
    stranger_client, private_store, written
):
    old_version = Version.objects.filter(memory_id=written.pk, operation="created").get()
    real = operations(private_store.pk, written.pk, old_version.pk)
    missing = operations(uuid.uuid4(), written.pk, old_version.pk)
    for (method, url, body), (_, missing_url, _) in zip(real, missing, strict=True):
        hidden = call(stranger_client, method, url, body)
        absent = call(stranger_client, method, missing_url, body)
        assert hidden.status_code == 404 == absent.status_code, (method, url)
        assert without_request_id(hidden) == without_request_id(absent), (method, url)
    assert Memory.objects.get().content == "the new secret"
    assert Version.objects.count() == 2 and old_version.__class__.objects.get(pk=old_version.pk).redacted_at is None


@pytest.mark.parametrize("suffix", ["%0A", "%0D%0A"])
def test_a_store_id_with_a_trailing_newline_is_the_missing_stores_404(owner_client, private_store, written, suffix):
    """A canonical UUID then a newline passed the id check (`$` matches before a final newline) and then
    failed in uuid.UUID: 500 on every operation (found by a breaker). It is a malformed id: 404."""
    old_version = Version.objects.filter(memory_id=written.pk, operation="created").get()
    for method, url, body in operations(f"{private_store.pk}{suffix}", written.pk, old_version.pk):
        response = call(owner_client, method, url, body)
        assert response.status_code == 404, (method, url, response.content)
        assert response.json()["error"] == {"type": "not_found_error", "message": "Store not found."}
    assert Memory.objects.get().content == "the new secret"


def test_staff_status_gives_no_access_to_file_memories(make_client, staff, private_store, written):
    client = make_client(staff)
    assert client.get(memories_url(private_store, str(written.pk))).status_code == 404
    assert client.get(versions_url(private_store)).status_code == 404


def test_an_unreadable_store_is_left_out_of_the_store_list(stranger_client, private_store):
    assert stranger_client.get("/api/v1/memory_stores").json()["data"] == []


def test_a_reader_may_read_but_every_write_is_a_permission_error(make_client, reader, private_store, written):
    ReaderGrantFactory(store=private_store, user=reader)
    client = make_client(reader)
    old_version = Version.objects.filter(memory_id=written.pk, operation="created").get()
    for method, url, body in operations(private_store.pk, written.pk, old_version.pk):
        response = call(client, method, url, body)
        expected = 200 if method == "get" else 403
        assert response.status_code == expected, (method, url, response.json())
    assert Memory.objects.get().content == "the new secret"
    assert Version.objects.get(pk=old_version.pk).redacted_at is None


def test_a_read_only_token_cannot_write(make_client, owner, private_store, written):
    client = make_client(owner, scopes=["agent:read"])
    response = client.post(memories_url(private_store), {"path": "/x.md", "content": "x"})
    assert response.status_code == 403 and response.json()["error"]["type"] == "permission_error"
    assert client.get(memories_url(private_store, str(written.pk))).status_code == 200


def test_anonymous_callers_read_public_stores_only_and_never_write(anon_client, public_store, private_store, seed):
    public = seed("/hello.md", "hi", store=public_store)
    seed("/secret.md", "psst")
    assert anon_client.get(memories_url(public_store, str(public.pk))).json()["content"] == "hi"
    assert anon_client.get(versions_url(public_store)).status_code == 200
    assert anon_client.get(memories_url(private_store)).status_code == 404
    response = anon_client.post(memories_url(public_store), {"path": "/x.md", "content": "x"})
    assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"


def test_project_members_write_files_but_only_project_owners_archive(make_client, owner, reader):
    project = ProjectFactory()
    ProjectMembershipFactory(project=project, user=owner, role="owner")
    ProjectMembershipFactory(project=project, user=reader, role="member")
    store = project_store(project)
    member = make_client(reader)
    assert member.post(memories_url(store), {"path": "/plan.md", "content": "x"}).status_code == 200
    assert member.post(f"/api/v1/memory_stores/{store.pk}/archive").status_code == 403
    assert make_client(owner).post(f"/api/v1/memory_stores/{store.pk}/archive").status_code == 200


def test_deleting_a_store_leaves_other_stores_files_alone(owner_client, private_store, public_store, seed):
    seed("/a.md")
    kept = seed("/a.md", store=public_store)
    assert owner_client.delete(f"/api/v1/memory_stores/{private_store.pk}").status_code == 200
    assert list(Memory.objects.values_list("pk", flat=True)) == [kept.pk]
    assert set(Version.objects.values_list("store_id", flat=True)) == {public_store.pk}


def test_anthropic_beta_and_version_headers_are_accepted_and_ignored(owner_client, private_store):
    response = owner_client.post(
        memories_url(private_store),
        {"path": "/a.md", "content": "x"},
        HTTP_ANTHROPIC_BETA="agent-memory-2026-07-22,managed-agents-2026-04-01",
        HTTP_ANTHROPIC_VERSION="2026-10-21",
    )
    assert response.status_code == 200


def test_an_empty_post_body_is_an_empty_object(owner_client, private_store, seed):
    memory = seed("/a.md")
    url = f"/api/v1/memory_stores/{private_store.pk}"
    assert owner_client.generic("POST", f"{url}/memories/{memory.pk}", b"", content_type="application/json").json()[
        "id"
    ] == str(memory.pk)
    assert owner_client.generic("POST", url, b"", content_type="application/json").status_code == 200
