"""Owner-only changes and irreversible redactions are judged against the rights of the moment they hold the
store lock (docs/access.md "Owner rights are judged under the lock"), with real parallel clients.

A transaction holds the project store's row lock; a project owner sends each change over HTTP, passes the
view's check and queues on the lock; she is then removed from the (private) project; the lock is released.
Each change must answer the 404 a new request of hers gets and change nothing (a breaker's removed owner
still deleted the store; a removed member still redacted a version for good).
"""

from __future__ import annotations

import pytest

from accounts import services as account_services
from memories.models import Entry
from stores.models import Store
from tests.contract.test_write_races_delete import queued_on_a_held_lock
from tests.factories import ProjectFactory, UserFactory, project_store
from tests.log.conftest import fill
from versions import services as version_services
from versions.actors import Actor
from versions.models import Version

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_changes_queued_on_the_store_lock_by_an_owner_removed_meanwhile_change_nothing(live_server):
    project = ProjectFactory(slug="locked-out")
    boss, carol = UserFactory(handle="boss"), UserFactory(handle="carol")
    for user in (boss, carol):
        account_services.ensure_project_membership(project=project, user=user, role="owner")
    store = fill(project_store(project, name="Shared"), 4, author=boss)
    actor = Actor.user(boss.pk)
    memory = version_services.create_memory(store=store, actor=actor, path="/a.md", content="one").memory
    old_version = Version.objects.filter(memory_id=memory.pk).order_by("created_at").first()
    version_services.update_memory(store=store, memory_id=memory.pk, actor=actor, content="two")
    secret = account_services.issue_token(user=carol).secret
    log, files = f"/api/v1/memories/{store.pk}", f"/api/v1/memory_stores/{store.pk}"
    requests = {
        "update_store": ("PATCH", log, {"name": "mine"}),
        "archive_store": ("POST", f"{files}/archive", None),
        "delete_store": ("DELETE", files, None),
        "forget_range": ("POST", f"{log}/forget", {"range": "0-1", "generation": 1}),
        "redact_entry": ("POST", f"{log}/entries/1/redact", {"reason": "gone"}),
        "redact_version": ("POST", f"{files}/memory_versions/{old_version.pk}/redact", None),
    }
    blocked, results = queued_on_a_held_lock(
        live_server,
        secret,
        requests,
        lambda: Store.objects.select_for_update(no_key=True).get(pk=store.pk),
        while_queued=lambda: account_services.set_project_member(
            project=project, actor=boss, handle="carol", active=False
        ),
    )

    assert blocked >= len(requests), f"only {blocked} of {len(requests)} changes queued on the store lock"
    for name, status, body in results:
        assert status == 404 and body["error"]["type"] == "not_found_error", (name, status, body)
    store.refresh_from_db()
    assert (store.name, store.archived_at, store.deleted_at, store.generation) == ("Shared", None, None, 1)
    assert not Entry.objects.filter(store=store, redacted_at__isnull=False).exists()
    assert Version.objects.get(pk=old_version.pk).redacted_at is None
