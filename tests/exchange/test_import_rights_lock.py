"""An import chunk holds its project's row only while it commits (docs/access.md "Writes racing a removal"):
held for a whole chunk's work, parallel imports kept every membership change of the project waiting until
it timed out (a breaker: 503s after 5 s with three importers)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from accounts import services as account_services
from memories.exchange import importer as importer_module
from memories.exchange import services as imports
from memories.exchange.export import export_lines
from stores.selectors import find_subject
from tests.factories import ProjectFactory, UserFactory, project_store
from tests.log.conftest import fill

pytestmark = [pytest.mark.django_db(transaction=True)]


def importing_owner(slug: str, other_role: str = "member") -> tuple:
    """(project `slug`, alice its owner, a second member `frank` with `other_role`, the export of a 5-entry
    store alice owns elsewhere as bytes, alice's subject for the project)."""
    project = ProjectFactory(slug=slug)
    alice, frank = UserFactory(handle="alice"), UserFactory(handle="frank")
    account_services.ensure_project_membership(project=project, user=alice, role="owner")
    account_services.ensure_project_membership(project=project, user=frank, role=other_role)
    source = ProjectFactory(slug="source")
    account_services.ensure_project_membership(project=source, user=alice, role="owner")
    body = b"".join(export_lines(fill(project_store(source, name="Src"), 5, author=alice)))
    return project, alice, frank, body, find_subject(alice, scope="project", subject=project.slug)


def test_a_membership_change_does_not_wait_for_an_import_chunk_at_work(monkeypatch):
    project, alice, _, body, subject = importing_owner("busy-imports")
    lines = body.splitlines(keepends=True)
    upload = imports.start_upload(actor=alice, body=b"".join(lines[:2]), subject=subject)
    working, done = threading.Event(), threading.Event()
    feed = importer_module.Importer.feed

    def slow_feed(self, chunk):  # the chunk's work takes a while, inside its transaction
        working.set()
        time.sleep(3)
        return feed(self, chunk)

    monkeypatch.setattr(importer_module.Importer, "feed", slow_feed)

    def next_chunk() -> None:
        try:
            imports.append_chunk(actor=alice, import_id=upload.pk, from_line=3, body=b"".join(lines[2:]))
            done.set()
        finally:
            connections.close_all()

    chunk = threading.Thread(target=next_chunk)
    chunk.start()
    assert working.wait(30)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '1s'")  # a wait for the chunk's lock fails the test
        account_services.set_project_member(project=project, actor=alice, handle="frank", active=False)
    chunk.join(30)
    assert done.is_set()  # the chunk committed after the change: alice is still an owner


def test_a_membership_change_does_not_wait_for_an_import_starting_at_work(monkeypatch):
    """The first request creates the hidden store and feeds its chunk in one transaction: it judged the
    owner with the project's row held at the start, so a change waited for the whole first chunk's work
    (the new store's foreign key is checked at commit, deferred, and holds nothing before)."""
    project, alice, _, body, subject = importing_owner("busy-starts")
    working, done = threading.Event(), threading.Event()
    feed = importer_module.Importer.feed

    def slow_feed(self, chunk):  # the first chunk's work takes a while, inside its transaction
        working.set()
        time.sleep(3)
        return feed(self, chunk)

    monkeypatch.setattr(importer_module.Importer, "feed", slow_feed)

    def start() -> None:
        try:
            imports.start_upload(actor=alice, body=body, subject=subject)
            done.set()
        finally:
            connections.close_all()

    starting = threading.Thread(target=start)
    starting.start()
    assert working.wait(30)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '1s'")  # a wait for the import's lock fails the test
        account_services.set_project_member(project=project, actor=alice, handle="frank", active=False)
    starting.join(30)
    assert done.is_set()  # the import committed after the change: alice is still an owner


def test_an_import_whose_starter_was_demoted_while_its_first_chunk_worked_commits_nothing(monkeypatch):
    """Judged again, under the project's row, just before the first chunk commits: a demotion that
    committed while the chunk worked refuses it (403) and leaves no store."""
    from memories.exchange.errors import ImportForbidden
    from stores.models import Store

    project, alice, bob, body, subject = importing_owner("demoted-start", other_role="owner")
    before = set(Store.objects.values_list("pk", flat=True))
    feed = importer_module.Importer.feed

    def feed_while_demoted(self, chunk):
        done = threading.Event()

        def demote() -> None:
            try:
                account_services.set_project_member(project=project, actor=bob, handle="alice", role="member")
                done.set()
            finally:
                connections.close_all()

        thread = threading.Thread(target=demote)
        thread.start()
        thread.join(30)
        assert done.is_set()  # it did not wait for this chunk
        return feed(self, chunk)

    monkeypatch.setattr(importer_module.Importer, "feed", feed_while_demoted)
    with pytest.raises(ImportForbidden):
        imports.start_upload(actor=alice, body=body, subject=subject)
    assert set(Store.objects.values_list("pk", flat=True)) == before


@pytest.mark.parametrize("first_chunk", [True, False])
def test_an_author_removed_while_a_chunk_worked_is_never_written_as_its_author(monkeypatch, first_chunk):
    """The authors a chunk may name are read before its work; judged again with the project's row held just
    before it commits: removed meanwhile, the chunk is a 409 and writes nothing (a breaker: the first chunk
    no longer holds the row through its work, so nothing else stopped it)."""
    from memories.exchange.errors import ImportWritersChanged
    from memories.models import Entry

    project, alice, frank, _, subject = importing_owner("authors-change")
    source = ProjectFactory(slug="frank-source")
    for user, role in ((alice, "owner"), (frank, "member")):
        account_services.ensure_project_membership(project=source, user=user, role=role)
    lines = b"".join(export_lines(fill(project_store(source, name="Frank's"), 5, author=frank)))
    lines = lines.splitlines(keepends=True)
    before = Entry.objects.count()
    if not first_chunk:
        upload = imports.start_upload(actor=alice, body=lines[0], subject=subject)
    feed = importer_module.Importer.feed

    def feed_while_frank_is_removed(self, chunk):
        def remove() -> None:
            try:
                account_services.set_project_member(project=project, actor=alice, handle="frank", active=False)
            finally:
                connections.close_all()

        thread = threading.Thread(target=remove)
        thread.start()
        thread.join(30)
        return feed(self, chunk)

    monkeypatch.setattr(importer_module.Importer, "feed", feed_while_frank_is_removed)
    with pytest.raises(ImportWritersChanged):
        if first_chunk:
            imports.start_upload(actor=alice, body=b"".join(lines), subject=subject)
        else:
            imports.append_chunk(actor=alice, import_id=upload.pk, from_line=2, body=b"".join(lines[1:]))
    assert Entry.objects.count() == before
