"""GET /api/v1/memories/resolve: scope + subject or ref=^uuid; never creates (SPEC §4 resolve)."""

from __future__ import annotations

import uuid

import pytest

from accounts.models import Visibility
from stores.models import Store
from tests.factories import ProjectFactory, SectionFactory, StoreFactory, board_store, project_store
from tests.stores.helpers import assert_error, without_request_id

pytestmark = pytest.mark.django_db


def test_resolve_defaults_to_my_user_store(owner_client, private_store):
    response = owner_client.get("/api/v1/memories/resolve")
    assert response.status_code == 200
    assert response.json()["data"]["id"] == str(private_store.pk)
    assert response.json()["data"]["permissions"]["owner"] is True


def test_resolve_never_creates(owner_client):
    assert_error(owner_client.get("/api/v1/memories/resolve"), 404, "not_found_error")
    assert not Store.objects.exists()


def test_resolve_finds_a_users_public_store_by_handle_case_insensitively(stranger_client, owner):
    store = StoreFactory(owner=owner, visibility=Visibility.PUBLIC)
    response = stranger_client.get("/api/v1/memories/resolve", {"scope": "user", "subject": "OwNeR"})
    assert response.json()["data"]["id"] == str(store.pk)


def test_resolve_finds_project_stores_by_uuid_or_slug(anon_client):
    project = ProjectFactory(slug="Apollo", visibility=Visibility.PUBLIC)
    store = project_store(project)
    for subject in [str(project.pk), str(project.pk).upper(), "apollo", "APOLLO"]:
        response = anon_client.get("/api/v1/memories/resolve", {"scope": "project", "subject": subject})
        assert response.json()["data"]["id"] == str(store.pk), subject


def test_resolve_finds_board_stores_by_uuid_or_slug(anon_client):
    section = SectionFactory(slug="NeedHelp")
    store = board_store(section)
    for subject in [str(section.pk), "needhelp", "NEEDHELP"]:
        response = anon_client.get("/api/v1/memories/resolve", {"scope": "board", "subject": subject})
        assert response.json()["data"]["id"] == str(store.pk), subject


def test_resolve_prefers_a_uuid_match_over_a_slug_that_looks_like_one(anon_client):
    first = ProjectFactory(visibility=Visibility.PUBLIC)
    second = ProjectFactory(slug=str(first.pk), visibility=Visibility.PUBLIC)
    store, _ = project_store(first), project_store(second)
    response = anon_client.get("/api/v1/memories/resolve", {"scope": "project", "subject": str(first.pk)})
    assert response.json()["data"]["id"] == str(store.pk)


def test_resolve_by_ref(stranger_client, public_store):
    response = stranger_client.get("/api/v1/memories/resolve", {"ref": f"^{public_store.pk}"})
    assert response.json()["data"]["id"] == str(public_store.pk)
    assert response.json()["data"]["permissions"] == {"read": True, "write": False, "owner": False}


def test_unreadable_and_absent_subjects_give_identical_404s(stranger_client, private_store):
    hidden = stranger_client.get("/api/v1/memories/resolve", {"subject": "owner"})
    unknown = stranger_client.get("/api/v1/memories/resolve", {"subject": "nobody"})
    no_store = stranger_client.get("/api/v1/memories/resolve", {"subject": "stranger"})
    by_ref = stranger_client.get("/api/v1/memories/resolve", {"ref": f"^{private_store.pk}"})
    missing_ref = stranger_client.get("/api/v1/memories/resolve", {"ref": f"^{uuid.uuid4()}"})
    bodies = [without_request_id(r) for r in (hidden, unknown, no_store, by_ref, missing_ref)]
    assert_error(hidden, 404, "not_found_error")
    assert all(body == bodies[0] for body in bodies)


def test_private_project_store_is_404_for_non_members(stranger_client):
    project_store(ProjectFactory(slug="secret"))
    assert_error(
        stranger_client.get("/api/v1/memories/resolve", {"scope": "project", "subject": "secret"}),
        404,
        "not_found_error",
    )


def test_anonymous_me_needs_a_token(anon_client):
    assert_error(anon_client.get("/api/v1/memories/resolve"), 401, "authentication_error")


@pytest.mark.parametrize(
    "params",
    [
        {"ref": "not-a-uuid"},
        {"ref": "^not-a-uuid"},
        {"ref": f"{uuid.uuid4()}"},
        {"ref": f"^{uuid.uuid4()}", "subject": "me"},
        {"scope": "galaxy"},
        {"subject": "x" * 65},
        {"subject": ""},
        {"scope": "project", "subject": "me"},
        {"colour": "red"},
    ],
)
def test_bad_resolve_queries_are_400(owner_client, params):
    assert_error(owner_client.get("/api/v1/memories/resolve", params), 400, "invalid_request_error")
