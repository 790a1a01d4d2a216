"""Stores created by a member removed meanwhile: ensure and import judge the creator again with the parent's
row held (docs/access.md "Writes racing a removal"), with real parallel clients.

A transaction removes (or demotes) the member through the API's service and holds the project's row lock
while the member's request is sent: it passes its access check, then waits for that row (the new store's
foreign key, the parent's `FOR KEY SHARE`). Once it waits, the removal commits. A breaker saw each of these
create a store after the removal had answered: an ensure answered 404 and created the store anyway, an
import's first request and an import's last chunk committed a store into the project.
"""

from __future__ import annotations

import pytest

from accounts import services as account_services
from memories.exchange import services as imports
from memories.exchange.export import export_lines
from memories.models import StoreImport
from stores.models import Store
from stores.selectors import find_subject
from tests.contract.test_write_races_delete import queued_on_a_held_lock
from tests.factories import ProjectFactory, UserFactory, project_store
from tests.log.conftest import fill

pytestmark = [pytest.mark.django_db(transaction=True)]
IMPORTS = "/api/v1/memories/imports"


def changing(project, **change):
    """The holder's work: a membership change of `project` through the API's service (it locks the row)."""
    return lambda: account_services.set_project_member(project=project, **change)


def an_export(owner) -> bytes:
    """A whole export of a project store with five notes (7 lines: header, 5 entries, end)."""
    source = ProjectFactory(slug="elsewhere")
    account_services.ensure_project_membership(project=source, user=owner, role="owner")
    store = fill(project_store(source, name="Source"), 5, author=owner)
    return b"".join(export_lines(store))


def test_an_ensure_by_a_member_removed_meanwhile_is_404_and_creates_nothing(live_server):
    project = ProjectFactory(slug="no-store-yet")
    alice, bob = UserFactory(handle="alice"), UserFactory(handle="bob")
    account_services.ensure_project_membership(project=project, user=alice, role="owner")
    account_services.ensure_project_membership(project=project, user=bob, role="member")
    secret = account_services.issue_token(user=bob).secret
    requests = {"ensure": ("POST", "/api/v1/memories", {"scope": "project", "subject": project.slug})}

    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, changing(project, actor=alice, handle="bob", active=False)
    )

    assert blocked == 1
    [(_, status, body)] = results
    assert status == 404 and body["error"]["type"] == "not_found_error", body
    assert not Store.objects.filter(project=project).exists()


def test_imports_by_an_owner_demoted_meanwhile_are_403_and_commit_nothing(live_server):
    project = ProjectFactory(slug="import-here")
    alice, carol = UserFactory(handle="alice"), UserFactory(handle="carol")
    for user in (alice, carol):
        account_services.ensure_project_membership(project=project, user=user, role="owner")
    body = an_export(alice)
    lines = body.splitlines(keepends=True)
    subject = find_subject(carol, scope="project", subject=project.slug)
    started = imports.start_upload(actor=carol, body=b"".join(lines[:2]), subject=subject)
    assert started.status == "open" and started.next_line == 3
    secret = account_services.issue_token(user=carol).secret
    requests = {
        "whole file": ("POST", f"{IMPORTS}?scope=project&subject={project.slug}", body),
        "last chunk": ("POST", f"{IMPORTS}/{started.pk}/lines?from_line=3", b"".join(lines[2:])),
    }

    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, changing(project, actor=alice, handle="carol", role="member")
    )

    assert blocked == 2
    for name, status, answer in results:
        assert status == 403 and answer["error"]["type"] == "permission_error", (name, status, answer)
    assert list(Store.objects.filter(project=project).values_list("importing", flat=True)) == [True]
    upload = StoreImport.objects.get(pk=started.pk)
    assert (upload.status, upload.next_line) == ("open", 3)
