"""Staff status gives no extra API access (SPEC §2): a staff user without membership sees what a stranger sees."""

from __future__ import annotations

import pytest

from accounts.models import Visibility
from memories.models import Entry
from stores.models import Store
from tests.factories import ReaderGrantFactory, SectionFactory, StoreFactory, board_store, project_store
from tests.stores.helpers import assert_error

pytestmark = pytest.mark.django_db

SECRET = "xylophonics"


@pytest.fixture
def hidden(owner, reader, cast):
    """Private stores of every scope that staff is not a member of, named and seeded with a secret."""
    stores = [
        StoreFactory(owner=owner, name=f"{SECRET} user", description=SECRET),
        project_store(cast.project, name=f"{SECRET} project"),
        board_store(SectionFactory(visibility=Visibility.PRIVATE), name=f"{SECRET} board"),
    ]
    ReaderGrantFactory(store=stores[0], user=reader)
    for store in stores:
        Entry.objects.create(store=store, seq=0, author=owner, body_md=SECRET, size_bytes=len(SECRET))
    return stores


@pytest.fixture
def staff_client(make_client, staff):
    return make_client(staff)


def test_staff_lists_no_private_store(staff_client, hidden):
    response = staff_client.get("/api/v1/memories", {"limit": 100})
    assert response.json()["data"] == []


def test_staff_gets_404_for_private_stores(staff_client, stranger_client, hidden):
    for store in hidden:
        staff_response = staff_client.get(f"/api/v1/memories/{store.pk}")
        assert_error(staff_response, 404, "not_found_error")
        assert staff_response.json()["error"] == stranger_client.get(f"/api/v1/memories/{store.pk}").json()["error"]


def test_staff_cannot_resolve_private_stores(staff_client, hidden):
    for params in [
        {"scope": "user", "subject": "owner"},
        {"scope": "project", "subject": "apollo"},
        {"ref": f"^{hidden[2].pk}"},
    ]:
        assert_error(staff_client.get("/api/v1/memories/resolve", params), 404, "not_found_error")


def test_staff_search_finds_nothing_private(staff_client, hidden):
    response = staff_client.get("/api/v1/search", {"q": SECRET})
    assert response.json()["data"] == []


def test_staff_directory_shows_nothing_private(staff_client, hidden):
    for suffix in ["", ".json", ".yaml"]:
        assert SECRET not in staff_client.get(f"/memories{suffix}").content.decode()


def test_staff_cannot_update_delete_share_or_list_readers(staff_client, hidden):
    store = hidden[0]
    for response in [
        staff_client.patch(f"/api/v1/memories/{store.pk}", {"name": "taken over"}),
        staff_client.delete(f"/api/v1/memories/{store.pk}?expected_entry_count=1&generation=1"),
        staff_client.post(f"/api/v1/memories/{store.pk}/share", {"handle": "staffer"}),
        staff_client.get(f"/api/v1/memories/{store.pk}/readers"),
    ]:
        assert_error(response, 404, "not_found_error")
    assert Store.objects.get(pk=store.pk).name == f"{SECRET} user"
    assert store.reader_grants.count() == 1


def test_staff_cannot_ensure_other_subjects(staff_client, hidden):
    assert_error(staff_client.post("/api/v1/memories", {"subject": "owner"}), 403, "permission_error")
    assert_error(
        staff_client.post("/api/v1/memories", {"scope": "project", "subject": "apollo"}), 404, "not_found_error"
    )
    assert Store.objects.count() == 3


def test_staff_cannot_read_a_public_stores_owner_rights(staff_client, owner):
    store = StoreFactory(owner=owner, visibility=Visibility.PUBLIC)
    data = staff_client.get(f"/api/v1/memories/{store.pk}").json()["data"]
    assert data["permissions"] == {"read": True, "write": False, "owner": False}
    assert_error(staff_client.patch(f"/api/v1/memories/{store.pk}", {"name": "x"}), 403, "permission_error")
