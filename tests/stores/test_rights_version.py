"""A store's rights version — its own for a user store, its project's or section's otherwise — moves with
every change that may narrow who reads, writes or owns it, and a write judged before such a change is
judged again under the store lock (docs/access.md "Writes racing a removal"). The parallel-client proofs are
in tests/contract/test_rights_races_lock.py; these pin every service that changes rights, one by one,
without a live server."""

from __future__ import annotations

import pytest
from django.db import transaction

from accounts import services as account_services
from memories.services import append_entry
from stores import services as store_services
from stores.errors import StoreNotFound, StoreWriteForbidden
from stores.models import Store
from stores.selectors import get_store_for
from tests.factories import ProjectFactory, SectionFactory, StoreFactory, UserFactory, board_store, project_store

pytestmark = pytest.mark.django_db


def version_of(store: Store) -> int:
    """The version a write to `store` compares: the project's, the section's, else the store's own."""
    store = Store.objects.select_related("project", "section").get(pk=store.pk)
    return (store.project or store.section or store).rights_version


def lock_as_judged(judged: Store) -> Store:
    with transaction.atomic():
        return store_services.lock_store(judged)


def test_closing_a_boards_posting_refuses_a_strangers_write_judged_before():
    boss, stranger = UserFactory(handle="boss"), UserFactory(handle="passer-by")
    section = SectionFactory(slug="open-board", posting="open")
    account_services.set_section_member(section=section, actor=None, handle="boss", role="owner")
    store = board_store(section, name="Board")
    judged = get_store_for(stranger, store.pk, need="write")
    account_services.update_section(section=section, actor=boss, name="Renamed")  # narrows nothing
    assert version_of(store) == 0
    account_services.update_section(section=section, actor=boss, open_to_all_posters=False)
    assert version_of(store) == 1
    with pytest.raises(StoreWriteForbidden):  # the board is still public: readable, no longer writable
        append_entry(store=judged, author=stranger, body_md="late")
    assert version_of(store) == 1 and Store.objects.get(pk=store.pk).entry_count == 0


def test_making_a_project_private_refuses_what_a_non_member_judged_before():
    boss, reader = UserFactory(handle="boss"), UserFactory(handle="reader")
    project = ProjectFactory(slug="was-open", visibility="public")
    account_services.ensure_project_membership(project=project, user=boss, role="owner")
    stores = [project_store(project, name=f"Log {n}", canonical=n == 0) for n in range(3)]
    judged = get_store_for(reader, stores[0].pk)
    account_services.update_project(project=project, actor=boss, visibility="private")
    assert [version_of(store) for store in stores] == [1, 1, 1]
    assert set(Store.objects.values_list("rights_version", flat=True)) == {0}  # one row bumped, not each store
    with pytest.raises(StoreNotFound):
        lock_as_judged(judged)


def test_a_user_store_made_private_or_a_grant_revoked_refuses_reads_judged_before():
    owner, reader, stranger = UserFactory(handle="own"), UserFactory(handle="grantee"), UserFactory(handle="other")
    store = StoreFactory(owner=owner, visibility="public")
    store_services.set_reader(store=store, handle="grantee", active=True, granted_by=owner)
    assert version_of(store) == 0  # a grant widens: nothing to judge again
    by_stranger, by_reader = get_store_for(stranger, store.pk), get_store_for(reader, store.pk)
    store_services.update_store(store=store, actor=owner, visibility="private")
    assert version_of(store) == 1
    with pytest.raises(StoreNotFound):
        lock_as_judged(by_stranger)
    assert lock_as_judged(by_reader).pk == store.pk  # the grant still lets her read
    by_reader = get_store_for(reader, store.pk)
    store_services.set_reader(store=store, handle="grantee", active=False, granted_by=owner)
    assert version_of(store) == 2
    with pytest.raises(StoreNotFound):
        lock_as_judged(by_reader)


def test_membership_changes_bump_their_parent_and_no_other():
    boss = UserFactory(handle="boss")
    UserFactory(handle="member"), UserFactory(handle="nobody-yet")
    project, other = ProjectFactory(slug="p-one"), ProjectFactory(slug="p-two")
    for parent in (project, other):
        account_services.ensure_project_membership(project=parent, user=boss, role="owner")
    mine, theirs = project_store(project, name="Mine"), project_store(other, name="Theirs")
    account_services.set_project_member(project=project, actor=boss, handle="member")  # added: widens only
    assert (version_of(mine), version_of(theirs)) == (0, 0)
    account_services.set_project_member(project=project, actor=boss, handle="member", role="owner")
    account_services.set_project_member(project=project, actor=boss, handle="member", active=False)
    account_services.set_project_member(project=project, actor=boss, handle="nobody-yet", active=False)
    assert (version_of(mine), version_of(theirs)) == (2, 0)
