"""GET /api/v1/memories: readable stores, newest first, keyset cursors, constant queries (SPEC §4)."""

from __future__ import annotations

import pytest

from accounts.models import Visibility
from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    ReaderGrantFactory,
    SectionFactory,
    SectionMembershipFactory,
    StoreFactory,
    board_store,
    project_store,
)
from tests.stores.helpers import assert_error

pytestmark = pytest.mark.django_db


def walk(client, url: str) -> list[dict]:
    """Follow meta.next_cursor to the end; return every item."""
    items, cursor = [], None
    for _ in range(100):  # bounded: a cursor that does not advance fails instead of hanging
        response = client.get(url, {"cursor": cursor} if cursor else {})
        assert response.status_code == 200, response.content
        items += response.json()["data"]
        cursor = response.json()["meta"]["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("the cursor never reached the end")


def readable_mix(owner, count: int) -> None:
    """`count` stores `owner` can read, spread over every way of reading."""
    project = ProjectFactory()
    ProjectMembershipFactory(project=project, user=owner)
    section = SectionFactory(visibility=Visibility.PRIVATE)
    SectionMembershipFactory(section=section, user=owner)
    project_store(project)
    board_store(section)
    for index in range(count - 2):
        if index % 3 == 0:
            StoreFactory(owner=owner, canonical=False)
        elif index % 3 == 1:
            ReaderGrantFactory(user=owner, store=StoreFactory())
        else:
            StoreFactory(visibility=Visibility.PUBLIC)


def test_list_returns_readable_stores_newest_first_with_permissions(owner_client, owner, private_store, public_store):
    StoreFactory()  # someone else's private store
    response = owner_client.get("/api/v1/memories")
    assert response.status_code == 200
    data = response.json()["data"]
    assert [item["id"] for item in data] == [str(public_store.pk), str(private_store.pk)]
    assert data[0]["permissions"] == {"read": True, "write": True, "owner": True}
    assert response.json()["meta"] == {"next_cursor": None}


def test_list_item_has_the_store_fields_of_the_memories_surface(owner_client, owner, private_store):
    item = owner_client.get("/api/v1/memories").json()["data"][0]
    assert set(item) == {
        "id",
        "scope",
        "subject",
        "canonical",
        "name",
        "description_md",
        "visibility",
        "entry_count",
        "generation",
        "memory_count",
        "archived_at",
        "created_at",
        "updated_at",
        "permissions",
    }
    assert item["subject"] == {"id": str(owner.pk), "handle": "owner"}
    assert item["generation"] == 1


def test_project_and_board_stores_show_their_parents_visibility_and_subject(make_client, cast):
    cast.project.visibility = Visibility.PUBLIC
    cast.project.save()
    store = project_store(cast.project)
    item = make_client(cast.project_member).get(f"/api/v1/memories/{store.pk}").json()["data"]
    assert item["visibility"] == "public"
    assert item["subject"] == {"id": str(cast.project.pk), "slug": "apollo", "name": "Apollo"}


def test_scope_filter_keeps_only_that_scope(owner_client, owner, private_store, cast):
    ProjectMembershipFactory(project=cast.project, user=owner)
    store = project_store(cast.project)
    data = owner_client.get("/api/v1/memories", {"scope": "project"}).json()["data"]
    assert [item["id"] for item in data] == [str(store.pk)]


def test_cursor_walks_every_store_exactly_once(owner_client, owner):
    readable_mix(owner, 23)
    items = walk(owner_client, "/api/v1/memories?limit=5")
    assert len(items) == 23
    assert len({item["id"] for item in items}) == 23


def test_cursor_is_stable_when_stores_share_a_creation_time(owner_client, owner):
    from django.utils import timezone

    same = timezone.now()
    for _ in range(7):
        StoreFactory(owner=owner, canonical=False, created_at=same)
    items = walk(owner_client, "/api/v1/memories?limit=2")
    assert len({item["id"] for item in items}) == 7


def test_last_page_has_a_null_cursor(owner_client, owner, private_store):
    response = owner_client.get("/api/v1/memories", {"limit": 1})
    assert response.json()["meta"]["next_cursor"] is None


def test_default_page_is_twenty(owner_client, owner):
    readable_mix(owner, 25)
    response = owner_client.get("/api/v1/memories")
    assert len(response.json()["data"]) == 20
    assert response.json()["meta"]["next_cursor"]


@pytest.mark.parametrize("limit", ["0", "101", "-1", "abc", "1.5", "99999999999999999999999"])
def test_limit_outside_1_to_100_is_400(owner_client, limit):
    body = assert_error(owner_client.get("/api/v1/memories", {"limit": limit}), 400, "invalid_request_error")
    assert "limit" in body["error"]["message"]


def test_tampered_cursor_is_400(owner_client, owner):
    readable_mix(owner, 4)
    cursor = owner_client.get("/api/v1/memories", {"limit": 1}).json()["meta"]["next_cursor"]
    tampered = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    body = assert_error(owner_client.get("/api/v1/memories", {"cursor": tampered}), 400, "invalid_request_error")
    assert "cursor" in body["error"]["message"]


@pytest.mark.parametrize("cursor", ["not a cursor!", "bm90LWEtY3Vyc29y:1abc:def", "x" * 2000])
def test_every_malformed_cursor_names_the_field_the_same_way(owner_client, owner, cursor):
    """The serializer refuses a cursor of the wrong shape, the list one whose signature fails: both answers
    carry `details.fields.cursor` (one of them used to have no `details`; a tester)."""
    body = assert_error(owner_client.get("/api/v1/memories", {"cursor": cursor}), 400, "invalid_request_error")
    assert set(body["error"]["details"]["fields"]) == {"cursor"}
    assert body["error"]["message"] == f"cursor: {body['error']['details']['fields']['cursor']}"


def test_cursor_from_another_scope_is_400(owner_client, owner):
    readable_mix(owner, 4)
    cursor = owner_client.get("/api/v1/memories", {"limit": 1}).json()["meta"]["next_cursor"]
    response = owner_client.get("/api/v1/memories", {"cursor": cursor, "scope": "user"})
    assert_error(response, 400, "invalid_request_error")


def test_a_cursor_carried_to_another_caller_is_400(owner_client, stranger_client, anon_client, owner):
    """The store list's cursor was bound to the scope only: another caller's was a 200 page of their own."""
    for n in range(3):
        StoreFactory(owner=owner, canonical=False, name=f"public {n}", visibility=Visibility.PUBLIC)
    cursor = owner_client.get("/api/v1/memories", {"limit": 1}).json()["meta"]["next_cursor"]
    for client in (stranger_client, anon_client):
        body = assert_error(client.get("/api/v1/memories", {"cursor": cursor}), 400, "invalid_request_error")
        assert set(body["error"]["details"]["fields"]) == {"cursor"}
    assert owner_client.get("/api/v1/memories", {"cursor": cursor}).status_code == 200


@pytest.mark.parametrize("cursor", ["garbage", "eyJrIjpbXX0:abc:def", "x" * 1025, "…"])
def test_forged_cursor_is_400(owner_client, cursor):
    assert_error(owner_client.get("/api/v1/memories", {"cursor": cursor}), 400, "invalid_request_error")


def test_unknown_scope_or_parameter_is_400(owner_client):
    assert_error(owner_client.get("/api/v1/memories", {"scope": "team"}), 400, "invalid_request_error")
    body = assert_error(owner_client.get("/api/v1/memories", {"sort": "name"}), 400, "invalid_request_error")
    assert "sort" in body["error"]["message"]


def test_anonymous_list_shows_public_stores_only(anon_client, private_store, public_store):
    data = anon_client.get("/api/v1/memories").json()["data"]
    assert [item["id"] for item in data] == [str(public_store.pk)]
    assert data[0]["permissions"] == {"read": True, "write": False, "owner": False}


@pytest.mark.parametrize("count", [5, 200])
def test_list_runs_a_constant_number_of_queries(owner_client, owner, count, django_assert_max_num_queries):
    readable_mix(owner, count)
    owner_client.get("/api/v1/me")  # settle the token's last_used_at write
    with django_assert_max_num_queries(2):  # the token, the page
        response = owner_client.get("/api/v1/memories", {"limit": 100})
    assert len(response.json()["data"]) == min(count, 100)
