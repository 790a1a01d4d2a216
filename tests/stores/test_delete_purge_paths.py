"""A deleted store whose rows still wait for the purge, seen from the paths that read or reuse it.

Found by a fresh breaker of the two-step deletion (2026-12-04): each of these answered as if the store
still existed while its rows were on disk, which the one-statement deletion never allowed — a re-import
found the id taken, a committed import still answered, a note replay was acknowledged, `ensure` racing the
deletion returned the deleted store, the back office could not delete a user whose entries waited for the
purge, and an export that lost its store between the access check and the snapshot failed mid-stream.
Each test sets `STORE_PURGE_SECONDS` to 0 for the deletion (the state any store too large for the
request's budget is in) and, where the path purges on its own, back to the default for that path.
"""

from __future__ import annotations

import itertools
import traceback

import pytest

from accounts.models import Project, User
from config.errors import DomainError
from memories import nap as nap_module
from memories import selectors as log_selectors
from memories.exchange.export import export_lines
from memories.services import append_entry
from memories.tree import Block
from stores import selectors as store_selectors
from stores import services as store_services
from stores.errors import StoreNotFound
from stores.models import Scope, Store
from tests.exchange.conftest import export_bytes
from tests.exchange.test_http import IMPORTS, post_lines
from tests.factories import ProjectFactory, StoreFactory, UserFactory
from tests.log.conftest import fill, put_summary
from tests.threads import run_threads
from versions import selectors as version_selectors
from versions import services as version_services
from versions.actors import Actor

DEFAULT_BUDGET = 2.0
WAITING_OR_PURGED = pytest.mark.parametrize("purge_seconds", [0, 30], ids=["rows-waiting", "purged"])


def delete_via_api(client, store) -> None:
    store.refresh_from_db()
    query = f"expected_entry_count={store.entry_count}&generation={store.generation}"
    response = client.delete(f"/api/v1/memories/{store.pk}?{query}")
    assert response.status_code == 200, response.content


# --- imports ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
@WAITING_OR_PURGED
def test_reimporting_the_export_of_a_deleted_store_keeps_its_id(settings, owner_client, private_store, purge_seconds):
    """The import purges a deleted store holding the header's id (within its own purge budget) and keeps
    the id, as for a missing store (docs/export-import.md "Ids")."""
    fill(private_store, 5)
    data = export_bytes(Store.objects.get(pk=private_store.pk))
    settings.STORE_PURGE_SECONDS = purge_seconds
    delete_via_api(owner_client, private_store)
    settings.STORE_PURGE_SECONDS = DEFAULT_BUDGET
    upload = post_lines(owner_client, IMPORTS, data).json()["data"]
    assert upload["warnings"] == []
    assert upload["store_id"] == str(private_store.pk)


@pytest.mark.django_db
@WAITING_OR_PURGED
def test_a_committed_import_of_a_deleted_store_is_gone(settings, owner_client, private_store, purge_seconds):
    fill(private_store, 5)
    data = export_bytes(Store.objects.get(pk=private_store.pk))
    private_store.delete()  # the id is free: the import keeps it
    upload = post_lines(owner_client, IMPORTS, data).json()["data"]
    assert upload["status"] == "committed"
    settings.STORE_PURGE_SECONDS = purge_seconds
    delete_via_api(owner_client, Store.objects.get(pk=upload["store_id"]))
    answers = [
        owner_client.get(f"{IMPORTS}/{upload['id']}"),
        post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", b"{}\n", from_line=upload["next_line"]),
        owner_client.delete(f"{IMPORTS}/{upload['id']}"),
    ]
    assert [answer.status_code for answer in answers] == [404, 404, 404]
    for answer in answers:
        assert answer.json()["error"]["message"] == "Import not found."


# --- writes and ensure that read the store before the deletion ----------------------------------------------


@pytest.mark.django_db
def test_a_replayed_note_into_a_deleted_store_is_a_404(settings, owner):
    """The replay reads the original entry without the store lock; the entry outlives the deletion until
    purged, so the replay checks the store."""
    settings.STORE_PURGE_SECONDS = 0
    store = StoreFactory(owner=owner, canonical=False)
    append_entry(store=store, author=owner, body_md="first try", client_nonce="retry-1")
    stale = Store.objects.get(pk=store.pk)
    store_services.delete_store(store=store)
    with pytest.raises(StoreNotFound):
        append_entry(store=stale, author=owner, body_md="first try", client_nonce="retry-1")


@pytest.mark.django_db(transaction=True)
def test_ensure_racing_a_delete_creates_a_new_store(owner, monkeypatch, settings):
    canonical, _ = store_services.ensure_canonical_store(scope="user", user=owner)
    settings.STORE_PURGE_SECONDS = 0
    real = store_selectors.canonical_store_id

    def lookup_then_delete(**kwargs):
        found = real(**kwargs)
        if found is not None:
            errors = run_threads({"delete": lambda: store_services.delete_store(store=Store(pk=found))})
            assert not errors, errors
        return found

    monkeypatch.setattr(store_services, "canonical_store_id", lookup_then_delete)
    store, created = store_services.ensure_canonical_store(scope="user", user=owner)
    assert created and store.pk != canonical.pk and store.deleted_at is None


# --- the back office ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@WAITING_OR_PURGED
def test_staff_can_delete_a_project_whose_store_was_deleted(settings, staff, client, purge_seconds):
    """A deleted store belongs to no subject any more: it protects nothing."""
    project = ProjectFactory()
    store = StoreFactory(scope=Scope.PROJECT, owner=None, project=project, visibility=None, name="Secret plans")
    settings.STORE_PURGE_SECONDS = purge_seconds
    store_services.delete_store(store=store)
    client.force_login(staff)
    page = client.get(f"/backoffice/accounts/project/{project.pk}/delete/")
    assert page.status_code == 200 and "Secret plans" not in page.content.decode()
    assert client.post(f"/backoffice/accounts/project/{project.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Project.objects.filter(pk=project.pk).exists()


@pytest.mark.django_db
@WAITING_OR_PURGED
def test_staff_can_delete_a_user_whose_entries_wait_in_a_deleted_store(settings, staff, client, purge_seconds):
    """The entries the user wrote protect the user until purged; the delete page purges first (for the
    default budget)."""
    user = UserFactory()
    store = StoreFactory(owner=user, name="Diary of a departing user")
    fill(store, 3)
    settings.STORE_PURGE_SECONDS = purge_seconds
    store_services.delete_store(store=store)
    settings.STORE_PURGE_SECONDS = DEFAULT_BUDGET
    client.force_login(staff)
    page = client.get(f"/backoffice/accounts/user/{user.pk}/delete/").content.decode()
    assert "Diary of a departing user" not in page and "Cannot delete" not in page
    assert client.post(f"/backoffice/accounts/user/{user.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not User.objects.filter(pk=user.pk).exists()


# --- reads that passed their access check before the deletion ------------------------------------------------

N = 64


def reads(stale, memory_ids):
    yield "wake", lambda: log_selectors.wake(store=stale, budget=32)
    for size in (1, 2, 8, 64):
        block = Block(N - size, size) if size < N else Block(0, N)
        yield f"zoom {size}", lambda block=block: log_selectors.zoom(store=stale, block=block)
    yield "recall", lambda: log_selectors.recall(store=stale, caller="anonymous", pattern="entry")
    yield "nap", lambda: nap_module.nap(store=stale, claimant=None, limit=4)
    yield "pending", lambda: log_selectors.pending_at(store=stale, snapshot=N)
    yield "files", lambda: version_selectors.memories(stale, with_content=True)
    yield "files depth 1", lambda: version_selectors.memories(stale, depth=1)
    yield "versions", lambda: version_selectors.versions(stale, with_content=True)
    for memory_id in memory_ids:
        yield "file", lambda memory_id=memory_id: version_selectors.memory(stale, memory_id)
    yield "export", lambda: b"".join(export_lines(stale))


@pytest.mark.django_db
def test_reads_of_a_half_purged_store_answer_or_404_never_fail(settings, owner, monkeypatch):
    """After every purge batch (5 rows), every read of the store object from before the deletion either
    answers (a stale answer: it read a store that existed when it started) or raises a domain error (404)
    — nothing else, which would be a 500. The export is a 404: its snapshot read sees the deletion."""
    settings.STORE_PURGE_SECONDS = 0
    settings.STORE_PURGE_BATCH = 5
    store = fill(StoreFactory(owner=owner, canonical=False), N)
    size = 2
    while size <= N:
        for start in range(0, N, size):
            put_summary(store, f"{start}-{start + size - 1}")
        size *= 2
    actor = Actor.user(owner.pk)
    memory_ids = []
    for k in range(6):
        memory = version_services.create_memory(store=store, path=f"/d{k % 2}/f{k}.md", content=f"c{k}", actor=actor)
        version_services.update_memory(store=store, memory_id=memory.memory.pk, content="two", actor=actor)
        memory_ids.append(memory.memory.pk)
    stale = Store.objects.get(pk=store.pk)
    store_services.delete_store(store=store)
    with pytest.raises(StoreNotFound):
        b"".join(export_lines(stale))
    clock = itertools.count()  # each reading a second later: a budget of 2 s is one batch
    monkeypatch.setattr(store_services.time, "monotonic", lambda: float(next(clock)))
    failures = []
    for stage in itertools.count():
        for name, read in reads(stale, memory_ids):
            try:
                read()
            except DomainError:
                pass
            except Exception as exc:  # what the test looks for: anything else is a 500
                failures.append((stage, name, repr(exc), traceback.format_exc(limit=-3)))
        if store_services.purge_deleted_stores(seconds=2).stores:
            break
    assert not failures, failures[:3]


@pytest.mark.django_db(transaction=True)
def test_ensure_losing_to_a_store_deleted_before_it_is_read_creates_one(owner, monkeypatch, settings):
    """The racer whose store won the key is deleted before the loser reads it: the loser tries again and
    creates the subject's store (it used to return None, a 500 in the view)."""
    winner, _ = store_services.ensure_canonical_store(scope="user", user=owner)
    settings.STORE_PURGE_SECONDS = 0
    real_lookup, real_claim = store_selectors.canonical_store_id, store_services.claim_canonical
    calls = {"lookup": 0}

    def first_lookup_sees_nothing(**kwargs):
        calls["lookup"] += 1
        return None if calls["lookup"] == 1 else real_lookup(**kwargs)

    def claim_loses_then_winner_is_deleted(store):
        claimed = real_claim(store)
        if not claimed and Store.objects.filter(pk=winner.pk, deleted_at__isnull=True).exists():
            errors = run_threads({"delete": lambda: store_services.delete_store(store=Store(pk=winner.pk))})
            assert not errors, errors
        return claimed

    monkeypatch.setattr(store_services, "canonical_store_id", first_lookup_sees_nothing)
    monkeypatch.setattr(store_services, "claim_canonical", claim_loses_then_winner_is_deleted)
    store, created = store_services.ensure_canonical_store(scope="user", user=owner)
    assert created and store is not None and store.pk != winner.pk and store.deleted_at is None
    assert Store.objects.filter(owner=owner, deleted_at__isnull=True).count() == 1
