"""Deleting a store of any size (docs/decisions.md "Deleting a store of any size").

`delete_store` hides the store in one transaction (`deleted_at`, under its FOR UPDATE lock) and then purges
its rows in batches, each its own transaction, for at most `STORE_PURGE_SECONDS`; later deletions and
`manage.py purge_stores` finish what is left. These tests set the budget to zero to look at a store between
the two steps: gone for every read and write path, rows still there; then purged completely, by batches
that may stop anywhere, by two purgers at once, by the next deletion.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.services import issue_token
from memories import nap as nap_module
from memories.models import Claim, Entry, Summary, Watermark
from memories.services import append_entry, compact_range, forget_range, redact_entry
from memories.tree import Block
from stores import services as store_services
from stores.errors import StoreNotFound
from stores.models import CanonicalStore, ReaderGrant, Store
from tests.factories import StoreFactory, UserFactory
from tests.log.conftest import fill, put_summary
from tests.threads import run_threads
from versions import services as version_services
from versions.actors import Actor
from versions.models import Memory, Version

STORE_TABLES = (Entry, Summary, Memory, Version, Claim, Watermark, ReaderGrant)


def rows_of(store_id) -> dict[str, int]:
    """Rows of every store-content table that belong to `store_id` (the store row included)."""
    counts = {model._meta.db_table: model.objects.filter(store_id=store_id).count() for model in STORE_TABLES}
    counts["stores_store"] = Store.objects.filter(pk=store_id).count()
    return counts


def populated(owner, *, entries: int = 12, files: int = 3) -> Store:
    """A store with entries, summaries, file memories with versions, a reader grant, a claim, a watermark."""
    store = StoreFactory(owner=owner, canonical=False, name=f"doomed {uuid.uuid4().hex[:6]}")
    fill(store, entries)
    put_summary(store, "0-1")
    put_summary(store, "2-3")
    actor = Actor.user(owner.pk)
    for k in range(files):
        memory = version_services.create_memory(store=store, path=f"/f{k}.md", content="one", actor=actor).memory
        version_services.update_memory(store=store, memory_id=memory.pk, content="two", actor=actor)
    ReaderGrant.objects.create(store=store, user=UserFactory(), active=True, granted_by=owner)
    Claim.objects.create(
        store=store,
        start=4,
        end=5,
        level=1,
        claimant="user:x",
        generation=1,
        claimed_at="2026-01-01T00:00Z",
        expires_at="2099-01-01T00:00Z",
    )
    Watermark.objects.create(store=store, level=1, start=0, generation=1)
    return Store.objects.get(pk=store.pk)


def delete_via_api(client, store) -> None:
    store.refresh_from_db()
    response = client.delete(
        f"/api/v1/memories/{store.pk}?expected_entry_count={store.entry_count}&generation={store.generation}"
    )
    assert response.status_code == 200, response.content
    assert response.json()["data"] == {"id": str(store.pk), "deleted": True}


def without_request_id(body: dict) -> dict:
    return {key: value for key, value in body.items() if key != "request_id"}


# --- between the two steps: gone everywhere, rows still there -----------------------------------------


@pytest.mark.django_db
def test_a_deleted_store_is_gone_for_every_path_before_its_rows_are_purged(settings, owner, owner_client):
    settings.STORE_PURGE_SECONDS = 0  # hide only
    store = populated(owner)
    before = rows_of(store.pk)
    delete_via_api(owner_client, store)

    assert rows_of(store.pk) == before  # nothing purged yet
    assert Store.objects.get(pk=store.pk).deleted_at is not None
    missing = uuid.uuid4()
    for path in ("", "/wake", "/recall", "/nap", "/zoom?range=0-1", "/readers"):
        got = owner_client.get(f"/api/v1/memories/{store.pk}{path}")
        unknown = owner_client.get(f"/api/v1/memories/{missing}{path}")
        assert got.status_code == unknown.status_code == 404, (path, got.content)
        assert without_request_id(got.json()) == without_request_id(unknown.json()), path
    for method, path, body in (
        ("post", "/note", {"body_md": "after"}),
        ("post", "/compact", {"range": "0-3", "summary_md": "x"}),
        ("post", "/forget", {"range": "0-1", "generation": 1}),
    ):
        got = getattr(owner_client, method)(f"/api/v1/memories/{store.pk}{path}", body, format="json")
        assert got.status_code == 404, (path, got.content)
    assert owner_client.get(f"/api/v1/memory_stores/{store.pk}").status_code == 404
    assert owner_client.get(f"/api/v1/memory_stores/{store.pk}/memories").status_code == 404
    assert (
        owner_client.post(
            f"/api/v1/memory_stores/{store.pk}/memories", {"path": "/new.md", "content": "x"}, format="json"
        ).status_code
        == 404
    )
    listed = owner_client.get("/api/v1/memory_stores").json()["data"]
    assert str(store.pk) not in {item["id"] for item in listed}
    listed = owner_client.get("/api/v1/memories").json()["data"]
    assert str(store.pk) not in {item["id"] for item in listed}
    # deleting it again is a 404 like any missing store, and changes nothing
    again = owner_client.delete(f"/api/v1/memories/{store.pk}?expected_entry_count=12&generation=1")
    assert again.status_code == 404
    assert rows_of(store.pk) == before

    out = StringIO()
    call_command("purge_stores", stdout=out)
    assert out.getvalue().strip() == (
        f"Purged {sum(before[m._meta.db_table] for m in (Entry, Summary, Memory, Version))} rows; "
        "1 deleted stores removed; 0 still waiting."
    )
    assert set(rows_of(store.pk).values()) == {0}


@pytest.mark.django_db
def test_every_write_service_refuses_a_deleted_store_it_read_before_the_deletion(settings, owner):
    """The race's outcome without the timing: a writer holding the store object from before the deletion
    (its access check passed) locks the row afterwards and must find it deleted, write nothing, 404."""
    settings.STORE_PURGE_SECONDS = 0
    store = populated(owner)
    stale = Store.objects.get(pk=store.pk)
    store_services.delete_store(store=store)
    before = rows_of(store.pk)
    actor = Actor.user(owner.pk)
    memory_id = Memory.objects.filter(store_id=store.pk).values_list("pk", flat=True).first()
    writes = {
        "note": lambda: append_entry(store=stale, author=owner, body_md="late"),
        "note with nonce": lambda: append_entry(store=stale, author=owner, body_md="late", client_nonce="n-1"),
        "compact": lambda: compact_range(
            store=stale,
            author=owner,
            block=Block(0, 4),
            generation=1,
            source_digest="0" * 64,
            summary_md="x",
            model="m",
        ),
        "forget": lambda: forget_range(store=stale, actor=owner, block=Block(0, 2), generation=1),
        "redact": lambda: redact_entry(store=stale, actor=owner, seq=3, reason="r"),
        "file create": lambda: version_services.create_memory(store=stale, path="/late.md", content="x", actor=actor),
        "file update": lambda: version_services.update_memory(
            store=stale, memory_id=memory_id, content="late", actor=actor
        ),
        "archive": lambda: store_services.archive_store(store=stale),
        "update": lambda: store_services.update_store(store=stale, name="late"),
        "delete": lambda: store_services.delete_store(store=stale),
        "claiming nap": lambda: nap_module.nap(store=stale, claimant=f"user:{owner.pk}", limit=2),
    }
    for name, write in writes.items():
        with pytest.raises(StoreNotFound):
            write()
        assert rows_of(store.pk) == before, name
    assert store_services.lock_stores_in_order([store.pk]) == {}  # sessions and the 0041 import skip it


@pytest.mark.django_db
def test_the_store_commands_and_the_back_office_do_not_see_a_deleted_store(settings, owner, staff, client):
    settings.STORE_PURGE_SECONDS = 0
    store = populated(owner)
    store_services.delete_store(store=store)
    with pytest.raises(CommandError, match="No store"):
        call_command("export_store", str(store.pk), stdout=StringIO())
    client.force_login(staff)
    page = client.get("/backoffice/stores/store/")
    assert page.status_code == 200 and store.name not in page.content.decode()
    assert client.get(f"/backoffice/stores/store/{store.pk}/change/").status_code == 302  # "doesn't exist" redirect


@pytest.mark.django_db
def test_the_subject_can_ensure_a_new_canonical_store_at_once(settings, owner, owner_client):
    settings.STORE_PURGE_SECONDS = 0
    canonical, _ = store_services.ensure_canonical_store(scope="user", user=owner)
    fill(canonical, 3)
    delete_via_api(owner_client, canonical)
    fresh, created = store_services.ensure_canonical_store(scope="user", user=owner)
    assert created and fresh.pk != canonical.pk
    assert CanonicalStore.objects.get(subject_id=owner.pk).store_id == fresh.pk


# --- the purge -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_purge_removes_every_row_batch_by_batch_and_nothing_else(settings, owner):
    settings.STORE_PURGE_SECONDS = 0
    settings.STORE_PURGE_BATCH = 5
    doomed = [populated(owner, entries=17), populated(owner, entries=4, files=0)]
    kept = populated(owner)
    kept_rows = rows_of(kept.pk)
    expected = 0
    for store in doomed:
        counts = rows_of(store.pk)
        expected += sum(counts[m._meta.db_table] for m in (Entry, Summary, Memory, Version))
        store_services.delete_store(store=store)
    purged = store_services.purge_deleted_stores(seconds=None)
    assert (purged.rows, purged.stores, purged.pending) == (expected, 2, 0)
    for store in doomed:
        assert set(rows_of(store.pk).values()) == {0}
    assert rows_of(kept.pk) == kept_rows


@pytest.mark.django_db
def test_a_purge_stopped_anywhere_leaves_the_store_hidden_and_the_next_one_finishes(settings, owner, monkeypatch):
    settings.STORE_PURGE_SECONDS = 0
    settings.STORE_PURGE_BATCH = 4
    store = populated(owner, entries=30, files=2)
    store_services.delete_store(store=store)
    total = sum(rows_of(store.pk)[m._meta.db_table] for m in (Entry, Summary, Memory, Version))
    clock = itertools.count()  # every reading one second later: a budget of k seconds allows k batches
    monkeypatch.setattr(store_services.time, "monotonic", lambda: float(next(clock)))
    removed, tables = 0, (Entry, Summary, Memory, Version)  # the purge's order
    while True:
        purged = store_services.purge_deleted_stores(seconds=2)  # one batch per call
        removed += purged.rows
        if purged.stores:
            break
        assert purged.pending == 1 and Store.objects.filter(pk=store.pk, deleted_at__isnull=False).exists()
        assert not Store.objects.readable_by(owner).filter(pk=store.pk).exists()
        # the kept cursor says exactly what is gone: the tables before its own, and its ids up to `after`
        cursor = Store.objects.get(pk=store.pk).purge_cursor
        model = tables[cursor["table"]]
        assert all(not m.objects.filter(store_id=store.pk).exists() for m in tables[: cursor["table"]])
        after = model._meta.get_field("id").to_python(cursor["after"])
        assert not model.objects.filter(store_id=store.pk, id__lte=after).exists()
        assert removed == total - sum(m.objects.filter(store_id=store.pk).count() for m in tables)
    assert removed == total and set(rows_of(store.pk).values()) == {0}


@pytest.mark.django_db
def test_the_next_deletion_purges_what_an_earlier_one_left(settings, owner):
    settings.STORE_PURGE_SECONDS = 0
    first = populated(owner)
    store_services.delete_store(store=first)
    assert rows_of(first.pk)["stores_store"] == 1
    settings.STORE_PURGE_SECONDS = 30
    second = populated(owner)
    store_services.delete_store(store=second)
    assert set(rows_of(first.pk).values()) == set(rows_of(second.pk).values()) == {0}


def test_purge_stores_refuses_a_budget_that_is_not_positive(db):
    with pytest.raises(CommandError, match="positive"):
        call_command("purge_stores", "--seconds", "0", stdout=StringIO())


@pytest.mark.django_db
def test_a_database_fault_during_the_purge_does_not_undo_or_fail_the_deletion(settings, owner, monkeypatch, caplog):
    from django.db import OperationalError

    store = populated(owner)

    def failing(**kwargs):
        raise OperationalError("canceling statement due to statement timeout")

    monkeypatch.setattr(store_services, "purge_deleted_stores", failing)
    store_services.delete_store(store=store)  # does not raise: the deletion is committed
    assert Store.objects.get(pk=store.pk).deleted_at is not None
    assert "purging its rows stopped" in caplog.text


# --- concurrency (own connections, real PostgreSQL) -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_writers_waiting_for_the_deleting_transaction_get_404_and_write_nothing(settings, owner):
    """The deletion holds the store row (FOR UPDATE) while each writer's statement waits for it; when it
    commits, every writer must see the deletion (the lock returns the newest row version)."""
    settings.STORE_PURGE_SECONDS = 0  # the row stays, hidden: the writers must not take it for a live store
    store = populated(owner)
    actor = Actor.user(owner.pk)
    holding = threading.Event()

    def deleter():
        from django.db import transaction

        with transaction.atomic():
            store_services.lock_store(store, for_delete=True)
            holding.set()
            threading.Event().wait(1.0)  # the writers are queued behind the lock by now
            store_services.delete_store(store=store)

    def writer(write):
        def run():
            holding.wait(10)
            threading.Event().wait(0.2)
            write()

        return run

    before = rows_of(store.pk)
    errors = run_threads(
        {
            "delete": deleter,
            "note": writer(lambda: append_entry(store=store, author=owner, body_md="late")),
            "file": writer(
                lambda: version_services.create_memory(store=store, path="/late.md", content="x", actor=actor)
            ),
            "forget": writer(lambda: forget_range(store=store, actor=owner, block=Block(0, 2), generation=1)),
            "nap": writer(lambda: nap_module.nap(store=store, claimant=f"user:{owner.pk}", limit=3)),
        }
    )
    assert "delete" not in errors, repr(errors.get("delete"))
    assert {name: type(exc) for name, exc in errors.items()} == dict.fromkeys(
        ("note", "file", "forget", "nap"), StoreNotFound
    )
    after = rows_of(store.pk)
    assert after == before, "a writer wrote into the deleted store"


@pytest.mark.django_db(transaction=True)
def test_two_purgers_at_once_share_the_work_without_errors(settings, owner):
    settings.STORE_PURGE_SECONDS = 0
    settings.STORE_PURGE_BATCH = 3
    doomed = [populated(owner, entries=40) for _ in range(3)]
    for store in doomed:
        store_services.delete_store(store=store)
    results = {}

    def purger(name):
        def run():
            results[name] = store_services.purge_deleted_stores(seconds=None)

        return run

    errors = run_threads({"a": purger("a"), "b": purger("b")})
    assert not errors, errors
    assert results["a"].stores + results["b"].stores == 3
    for store in doomed:
        assert set(rows_of(store.pk).values()) == {0}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM stores_store WHERE deleted_at IS NOT NULL")
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("purge_seconds", [0, 30], ids=["hidden-row-stays", "purged-under-the-writers"])
def test_parallel_writers_over_http_get_404_once_the_deletion_is_answered(live_server, settings, owner, purge_seconds):
    """Four clients write notes and files as fast as they can while the owner deletes the store over HTTP:
    no answer but 2xx or 404, every write sent after the DELETE's answer a 404, and nothing left once
    purged. With no purge budget the hidden row stays behind the answer (the writers must see `deleted_at`);
    with one, the request purges in small batches while the writers keep coming."""
    settings.STORE_PURGE_SECONDS = purge_seconds
    settings.STORE_PURGE_BATCH = 50
    store = populated(owner, entries=400)
    auth = {"Authorization": f"Bearer {issue_token(user=owner).secret}"}
    stop, answered = threading.Event(), []
    deleted = {}

    def writer(k: int):
        def run():
            with httpx.Client(base_url=live_server.url, headers=auth, timeout=30) as client:
                for n in itertools.count():
                    if stop.is_set():
                        return
                    sent = time.monotonic()
                    if k % 2:
                        response = client.post(f"/api/v1/memories/{store.pk}/note", json={"body_md": f"w{k} {n}"})
                    else:
                        response = client.post(
                            f"/api/v1/memory_stores/{store.pk}/memories", json={"path": f"/w{k}/{n}.md", "content": "x"}
                        )
                    answered.append((sent, response.status_code))

        return run

    def deleter():
        time.sleep(0.5)
        with httpx.Client(base_url=live_server.url, headers=auth, timeout=30) as client:
            # the Memory Stores surface: no confirmation to race with the writers' moving entry_count
            response = client.delete(f"/api/v1/memory_stores/{store.pk}")
            deleted["status"], deleted["at"] = response.status_code, time.monotonic()
        time.sleep(0.5)
        stop.set()

    errors = run_threads({"delete": deleter, **{f"writer {k}": writer(k) for k in range(4)}}, timeout=60)
    assert not errors, errors
    assert deleted["status"] == 200
    statuses = {status for _, status in answered}
    assert statuses <= {200, 201, 404}, statuses
    assert any(status in (200, 201) for _, status in answered)
    late = [status for sent, status in answered if sent > deleted["at"]]
    assert late and set(late) == {404}
    store_services.purge_deleted_stores(seconds=None)
    assert set(rows_of(store.pk).values()) == {0}


@pytest.mark.django_db
def test_a_purge_starts_where_the_kept_cursor_says(settings, owner):
    """The next batch starts after `purge_cursor` (it never walks the index entries of rows deleted before,
    dead until VACUUM): with the cursor set past the first ten entries by hand, a batch deletes the next
    ones and leaves those ten (which a real purge never leaves behind a cursor)."""
    settings.STORE_PURGE_SECONDS = 0
    settings.STORE_PURGE_BATCH = 5
    store = populated(owner, entries=30, files=0)
    store_services.delete_store(store=store)
    ids = list(Entry.objects.filter(store_id=store.pk).order_by("id").values_list("id", flat=True))
    Store.objects.filter(pk=store.pk).update(purge_cursor={"table": 0, "after": str(ids[9])})
    clock = itertools.count()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_services.time, "monotonic", lambda: float(next(clock)))
        assert store_services.purge_deleted_stores(seconds=2).rows == 5
    left = list(Entry.objects.filter(store_id=store.pk).order_by("id").values_list("id", flat=True))
    assert left == ids[:10] + ids[15:]
    assert Store.objects.get(pk=store.pk).purge_cursor == {"table": 0, "after": str(ids[14])}
