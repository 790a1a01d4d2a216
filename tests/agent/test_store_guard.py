"""A store cannot be deleted, on either surface, while a session that is not terminated attaches it (SPEC §3)."""

from __future__ import annotations

import pytest

from accounts.services import ensure_project_membership, issue_token, set_project_member
from sessions.models import Attachment
from sessions.services import environments as environment_services
from sessions.services import sessions as session_services
from stores.errors import StoreNotFound
from stores.models import Store
from tests.agent.conftest import bearer
from tests.factories import ProjectFactory, UserFactory, project_store

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


def _someone_elses_session(make_session, store, handle: str = "eve"):
    """A session of another user (with an environment of her own) that attaches `store` read-only."""

    eve = UserFactory(handle=handle)
    environment = environment_services.create_environment(owner=eve, name="Eve's farm")
    return make_session((store, "read_only"), owner=eve, environment=environment)


def test_a_reader_who_lost_access_cannot_veto_the_owners_delete(owner_api, notes_store, make_session):
    """docs/agent-access.md "The delete guard": only attachments whose owner can still read the store count."""
    Store.objects.filter(pk=notes_store.pk).update(visibility="public")
    _someone_elses_session(make_session, notes_store)
    assert [r.status_code for r in delete_both_ways(owner_api, notes_store)] == [409, 409]  # a live reader guards
    assert owner_api.patch(f"/api/v1/memories/{notes_store.pk}", {"visibility": "private"}).status_code == 200
    assert owner_api.delete(f"/api/v1/memory_stores/{notes_store.pk}").status_code == 200
    assert not Store.objects.filter(pk=notes_store.pk).exists()


def test_an_archived_public_store_can_still_be_made_private_and_then_deleted(owner_api, notes_store, make_session):
    """A breaker's stranger attached a public store to her session, then its owner archived it: making it
    private was 409 store_archived (archived stores are read-only) and the delete guard held for as long as
    her session lived. Making a store private is the one change an archived store takes."""
    from stores.services import archive_store

    Store.objects.filter(pk=notes_store.pk).update(visibility="public")
    _someone_elses_session(make_session, notes_store)
    archive_store(store=notes_store)
    url = f"/api/v1/memories/{notes_store.pk}"
    for body in ({"name": "renamed"}, {"visibility": "private", "name": "renamed"}, {"visibility": "public"}):
        response = owner_api.patch(url, body, format="json")
        assert response.status_code == 409 and response.json()["error"]["details"]["reason"] == "store_archived"
    assert owner_api.patch(url, {"visibility": "private"}, format="json").status_code == 200
    assert owner_api.patch(url, {"visibility": "private"}, format="json").status_code == 200  # idempotent
    assert Store.objects.get(pk=notes_store.pk).name == "Team Notes"
    assert owner_api.delete(f"/api/v1/memory_stores/{notes_store.pk}").status_code == 200


def test_a_project_owner_demoted_while_her_delete_waited_deletes_nothing(owner, make_session):
    """The owner right is judged again under the store lock: the view let her through, then a demotion
    committed, then the service ran (a breaker's DELETE waited on a busy store row meanwhile)."""
    from stores.errors import StoreOwnerRequired
    from stores.services import delete_store, update_store

    project = ProjectFactory()
    carol = UserFactory(handle="carol")
    for user in (owner, carol):
        ensure_project_membership(project=project, user=user, role="owner")
    store = project_store(project, name="Project notes")
    set_project_member(project=project, actor=owner, handle="carol", role="member")
    with pytest.raises(StoreOwnerRequired):
        delete_store(store=store, actor=carol)
    with pytest.raises(StoreOwnerRequired):
        update_store(store=store, actor=carol, name="mine now")
    store.refresh_from_db()
    assert store.deleted_at is None and store.name == "Project notes"
    set_project_member(project=project, actor=owner, handle="carol", active=False)
    with pytest.raises(StoreNotFound):  # no longer a member of the private project: the missing store's 404
        delete_store(store=store, actor=carol)


def test_a_removed_project_members_session_no_longer_guards_the_project_store(owner, make_session):

    project = ProjectFactory()
    ensure_project_membership(project=project, user=owner, role="owner")
    member = UserFactory(handle="mallory")
    ensure_project_membership(project=project, user=member)
    store = project_store(project, name="Project notes")

    environment = environment_services.create_environment(owner=member, name="Mallory's farm")
    make_session((store, "read_only"), owner=member, environment=environment)
    api = bearer(issue_token(user=owner, name="t").secret)
    assert api.delete(f"/api/v1/memory_stores/{store.pk}").status_code == 409
    set_project_member(project=project, actor=None, handle="mallory", active=False)
    assert api.delete(f"/api/v1/memory_stores/{store.pk}").status_code == 200
