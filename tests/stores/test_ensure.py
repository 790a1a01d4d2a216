"""POST /api/v1/memories: ensure a subject's canonical store (SPEC §4 ensure)."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from accounts import services as account_services
from accounts.models import Posting, Visibility
from stores.models import Store
from stores.services import archive_store
from tests.factories import ProjectMembershipFactory, SectionFactory, StoreFactory, UserFactory, project_store
from tests.stores.helpers import assert_error

pytestmark = pytest.mark.django_db


def test_ensure_creates_my_private_user_store_with_defaults(owner_client, owner):
    response = owner_client.post("/api/v1/memories", {})
    assert response.status_code == 201, response.content
    data = response.json()["data"]
    assert response.json()["meta"] == {"created": True}
    assert data["scope"] == "user"
    assert data["canonical"] is True
    assert data["visibility"] == "private"
    assert data["name"] == "owner memories"
    assert data["permissions"] == {"read": True, "write": True, "owner": True}
    assert Store.objects.get().owner == owner


def test_ensure_uses_the_given_name_and_description(owner_client):
    response = owner_client.post(
        "/api/v1/memories", {"scope": "user", "subject": "me", "name": "Notes", "description_md": "# Why\n"}
    )
    assert response.status_code == 201
    assert response.json()["data"]["name"] == "Notes"
    assert response.json()["data"]["description_md"] == "# Why\n"


def test_ensure_returns_the_existing_store_untouched(owner_client, private_store):
    before = Store.objects.get(pk=private_store.pk)
    response = owner_client.post("/api/v1/memories", {"subject": "OWNER", "name": "New name", "description_md": "x"})
    assert response.status_code == 200
    assert response.json()["meta"] == {"created": False}
    assert response.json()["data"]["id"] == str(private_store.pk)
    after = Store.objects.get(pk=private_store.pk)
    assert (after.name, after.description, after.updated_at) == (before.name, before.description, before.updated_at)


def test_ensure_ignores_non_canonical_stores_of_the_subject(owner_client, owner, public_store):
    response = owner_client.post("/api/v1/memories", {"subject": "me"})
    assert response.status_code == 201
    assert response.json()["data"]["id"] != str(public_store.pk)


def test_ensure_of_an_archived_store_returns_it_unchanged(owner_client, private_store):
    archive_store(store=private_store)
    response = owner_client.post("/api/v1/memories", {"subject": "me"})
    assert response.status_code == 200
    assert response.json()["data"]["archived_at"] is not None


def test_project_member_ensures_the_project_store_by_uuid_or_slug(make_client, cast):
    client = make_client(cast.project_member)
    created = client.post("/api/v1/memories", {"scope": "project", "subject": str(cast.project.pk)})
    assert created.status_code == 201
    assert created.json()["data"]["name"] == "Apollo"
    again = client.post("/api/v1/memories", {"scope": "project", "subject": "APOLLO"})
    assert again.status_code == 200
    assert again.json()["data"]["id"] == created.json()["data"]["id"]
    assert created.json()["data"]["permissions"] == {"read": True, "write": True, "owner": False}


def test_any_active_user_ensures_the_public_open_board(stranger_client):
    SectionFactory(slug="Global", name="Global board", visibility=Visibility.PUBLIC, posting=Posting.OPEN)
    response = stranger_client.post("/api/v1/memories", {"scope": "board", "subject": "global"})
    assert response.status_code == 201
    assert response.json()["data"]["scope"] == "board"
    assert response.json()["data"]["visibility"] == "public"


def test_ensuring_someone_elses_user_store_is_403_whether_or_not_it_exists(stranger_client, owner):
    absent = stranger_client.post("/api/v1/memories", {"subject": "owner"})
    StoreFactory(owner=owner)
    present = stranger_client.post("/api/v1/memories", {"subject": "owner"})
    assert_error(absent, 403, "permission_error")
    assert_error(present, 403, "permission_error")
    assert absent.json()["error"]["message"] == present.json()["error"]["message"]
    assert Store.objects.count() == 1


def test_unknown_subject_is_404_naming_it(owner_client):
    body = assert_error(owner_client.post("/api/v1/memories", {"subject": "nobody"}), 404, "not_found_error")
    assert "nobody" in body["error"]["message"]
    body = assert_error(
        owner_client.post("/api/v1/memories", {"scope": "project", "subject": "nowhere"}), 404, "not_found_error"
    )
    assert "nowhere" in body["error"]["message"]


def test_inactive_user_is_an_unknown_subject(owner_client):
    UserFactory(handle="gone", is_active=False)
    assert_error(owner_client.post("/api/v1/memories", {"subject": "gone"}), 404, "not_found_error")


def test_me_is_not_a_project(owner_client):
    body = assert_error(
        owner_client.post("/api/v1/memories", {"scope": "project", "subject": "me"}), 400, "invalid_request_error"
    )
    assert "subject" in body["error"]["message"]


def test_ensure_needs_the_write_scope(make_client, owner):
    client = make_client(owner, scopes=["agent:read"])
    assert_error(client.post("/api/v1/memories", {}), 403, "permission_error")
    assert not Store.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "team"},
        {"scope": 1},
        {"subject": 7},
        {"subject": ""},
        {"subject": "x" * 65},
        {"name": ""},
        {"name": "x" * 256},
        {"name": "line\nbreak"},
        {"name": 5},
        {"name": None},
        {"description_md": "x" * 1025},
        {"description_md": ["a"]},
        {"colour": "red"},
    ],
)
def test_bad_ensure_bodies_are_400_and_create_nothing(owner_client, body):
    assert_error(owner_client.post("/api/v1/memories", body), 400, "invalid_request_error")
    assert not Store.objects.exists()


def test_ensure_rejects_bad_input_even_when_the_store_exists(owner_client, private_store):
    assert_error(owner_client.post("/api/v1/memories", {"name": "x" * 256}), 400, "invalid_request_error")


@pytest.mark.django_db(transaction=True)
def test_concurrent_ensures_of_one_subject_create_exactly_one_store(live_server, cast):
    members = [UserFactory() for _ in range(7)] + [cast.project_member]
    for member in members[:-1]:
        ProjectMembershipFactory(project=cast.project, user=member)
    secrets = [account_services.issue_token(user=member).secret for member in members]
    barrier = threading.Barrier(len(secrets))
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def ensure(secret: str) -> None:
        with httpx.Client(base_url=live_server.url, timeout=30) as client:
            barrier.wait()
            response = client.post(
                "/api/v1/memories",
                json={"scope": "project", "subject": "apollo"},
                headers={"Authorization": f"Bearer {secret}"},
            )
        with lock:
            results.append((response.status_code, response.json()["data"]["id"]))

    threads = [threading.Thread(target=ensure, args=(secret,)) for secret in secrets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(status for status, _ in results) == [200] * (len(secrets) - 1) + [201]
    assert len({store_id for _, store_id in results}) == 1
    assert Store.objects.filter(project=cast.project).count() == 1


def test_ensure_is_not_confused_by_another_subjects_store(make_client, cast):
    project_store(cast.project)
    response = make_client(cast.section_owner).post("/api/v1/memories", {"scope": "board", "subject": "needhelp"})
    assert response.status_code == 201
    assert Store.objects.count() == 2


def test_losing_the_insert_race_returns_the_winners_store(owner, private_store, monkeypatch):
    """The key of CanonicalStore is the backstop: a racer that saw no store gets the winner's row (and its own
    store is rolled back)."""
    from stores import services

    real_filter = Store.objects.filter
    calls = {"n": 0}

    def first_lookup_sees_nothing(*args, **kwargs):
        calls["n"] += 1
        return Store.objects.none() if calls["n"] == 1 else real_filter(*args, **kwargs)

    monkeypatch.setattr(Store.objects, "filter", first_lookup_sees_nothing)
    store, created = services.ensure_canonical_store(scope="user", user=owner, created_by=owner)
    assert (store.pk, created) == (private_store.pk, False)
    assert Store.objects.count() == 1


def test_a_store_deleted_between_the_ensure_and_its_answer_is_ensured_again(owner_client, owner, monkeypatch):
    """An owner's DELETE racing an ensure: the ensure found the store, the delete committed, and the answer's
    read said 404 "Store not found" (a breaker, 1–2 in 200). It ensures again and answers the new store."""
    from stores import services

    existing = StoreFactory(owner=owner, canonical=True)
    services.claim_canonical(existing)
    real = services.ensure_canonical_store

    def then_deleted(**kwargs):
        store, created = real(**kwargs)
        if store.pk == existing.pk:
            services.delete_store(store=store)
        return store, created

    monkeypatch.setattr(services, "ensure_canonical_store", then_deleted)
    response = owner_client.post("/api/v1/memories", {})

    assert response.status_code == 201, response.content
    assert response.json()["data"]["id"] != str(existing.pk)
    assert Store.objects.filter(deleted_at__isnull=True).get().pk == uuid.UUID(response.json()["data"]["id"])


def test_a_section_owner_posts_even_without_can_post(make_client, cast):
    """Owners run the section: the `can_post` flag limits members only (docs/access.md)."""
    cast.section.memberships.filter(user=cast.section_owner).update(can_post=False)
    client = make_client(cast.section_owner)
    response = client.post("/api/v1/memories", {"scope": "board", "subject": "needhelp"})
    assert response.status_code == 201
    assert response.json()["data"]["permissions"] == {"read": True, "write": True, "owner": True}
