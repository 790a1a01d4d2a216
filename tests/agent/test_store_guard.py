"""A store cannot be deleted, on either surface, while a session that is not terminated attaches it (SPEC §3)."""

from __future__ import annotations

import pytest

from sessions.models import Attachment
from sessions.services import sessions as session_services
from stores.models import Store

pytestmark = pytest.mark.django_db


def delete_both_ways(client, store):
    """DELETE on the Memory Stores surface, then on the Memories surface (with its confirmation)."""
    files = client.delete(f"/api/v1/memory_stores/{store.pk}")
    log = client.delete(f"/api/v1/memories/{store.pk}?expected_entry_count=0&generation=1")
    return files, log


def test_both_surfaces_refuse_to_delete_a_store_a_live_session_attaches(owner_api, notes_store, make_session):
    make_session(notes_store)
    for response in delete_both_ways(owner_api, notes_store):
        body = response.json()
        assert response.status_code == 409 and response["x-should-retry"] == "false"
        assert body["error"]["type"] == "conflict_error" and body["error"]["details"]["reason"] == "store_attached"
    assert Store.objects.filter(pk=notes_store.pk).exists()


def test_a_read_only_attachment_guards_the_store_too(owner_api, notes_store, make_session):
    make_session((notes_store, "read_only"))
    assert [r.status_code for r in delete_both_ways(owner_api, notes_store)] == [409, 409]


@pytest.mark.parametrize("surface", ["memory_stores", "memories"])
def test_once_the_session_is_archived_the_store_can_be_deleted_and_the_archive_keeps_its_record(
    owner_api, notes_store, make_session, surface
):
    session = make_session(notes_store)
    session_services.archive_session(session=session)
    url = f"/api/v1/{surface}/{notes_store.pk}" + (
        "?expected_entry_count=0&generation=1" if surface == "memories" else ""
    )
    assert owner_api.delete(url).status_code == 200
    assert not Store.objects.filter(pk=notes_store.pk).exists()
    kept = owner_api.get(f"/api/v1/sessions/{session.pk}").json()["resources"]
    assert [(r["memory_store_id"], r["name"]) for r in kept] == [(str(notes_store.pk), "Team Notes")]
    assert Attachment.objects.filter(store_id=notes_store.pk).count() == 1


def test_a_deleted_session_no_longer_guards_its_stores(owner_api, notes_store, make_session):
    session = make_session(notes_store)
    session_services.delete_session(session=session)
    assert owner_api.delete(f"/api/v1/memory_stores/{notes_store.pk}").status_code == 200
