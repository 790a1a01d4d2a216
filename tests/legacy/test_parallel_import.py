"""The 0041 import on several connections at once (issue 17): the same entries as one connection, every
store in its author's chronological order, a failing worker stopping the others. Real PostgreSQL
transactions and threads (`transaction=True`: other connections must see the committed legacy rows)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from factory.random import reseed_random

from legacy import services
from legacy.models import Record
from memories.models import Entry
from stores.models import Store
from tests.factories import UserFactory
from tests.legacy.factories import LegacyRecordFactory, legacy_world


def imported() -> dict[tuple, tuple]:
    """{(store, seq): (author, nonce, body, provenance)} of every entry."""
    return {
        (e.store_id, e.seq): (e.author_id, e.client_nonce, e.body_md, e.provenance)
        for e in Entry.objects.order_by("store_id", "seq")
    }


def forget_import() -> None:
    """Remove every imported entry and reset the counters, keeping the stores (their ids stay)."""
    Entry.objects.all().delete()
    Store.objects.update(entry_count=0)


@pytest.mark.django_db(transaction=True)
def test_parallel_workers_write_exactly_what_one_worker_writes():
    reseed_random("legacy-0041-parallel")
    world = legacy_world(authors=5, records=45)
    progress = []
    summary = services.migrate_0041(batch_size=3, workers=3, on_batch=progress.append)
    parallel = imported()
    assert summary.records == Record.objects.count() == sum(progress)
    assert summary.entries == len(parallel) and summary.authors == 5 and summary.stores_created == 5
    for author in world["authors"]:
        store = Store.objects.get(owner=author, canonical=True)
        entries = list(Entry.objects.filter(store=store).order_by("seq"))
        assert [entry.seq for entry in entries] == list(range(store.entry_count))
        chronological = list(
            Record.objects.filter(author=author).order_by("created_at", "id").values_list("id", flat=True)
        )
        assert list(dict.fromkeys(entry.provenance["source_id"] for entry in entries)) == chronological

    forget_import()
    serial = services.import_records(batch_size=3, workers=1)
    assert serial.records == summary.records and serial.entries == summary.entries
    assert imported() == parallel


@pytest.mark.django_db(transaction=True)
def test_a_rerun_with_workers_skips_everything_already_imported():
    reseed_random("legacy-0041-rerun")
    legacy_world(authors=3, records=12)
    first = services.migrate_0041(batch_size=2, workers=2)
    before = imported()
    again = services.migrate_0041(batch_size=5, workers=2)
    assert again.records == 0 and again.skipped_already_imported == first.records
    assert imported() == before


@pytest.mark.django_db(transaction=True)
def test_a_failing_worker_stops_the_others_and_its_error_is_raised(monkeypatch):
    doomed, steady = UserFactory(), UserFactory()
    LegacyRecordFactory.create_batch(3, author=doomed)
    LegacyRecordFactory.create_batch(40, author=steady)
    started, failed = threading.Event(), threading.Event()
    steady_batches = []
    import_batch = services._import_batch

    def flaky(batch, summary, *, dry_run):
        if batch[0]["author_id"] == doomed.pk:
            assert started.wait(30)  # fails once the steady worker is under way
            failed.set()
            raise RuntimeError("disk full")
        steady_batches.append(batch)
        started.set()
        if len(steady_batches) == 2:  # a second batch, if it began before the stop, ends after the failure
            assert failed.wait(30)
        import_batch(batch, summary, dry_run=dry_run)

    monkeypatch.setattr(services, "_import_batch", flaky)
    with pytest.raises(RuntimeError, match="disk full"):
        services.import_records(batch_size=1, workers=2)
    # It stopped after the batch in flight: committed batches stay, the rest is left for a re-run.
    assert 1 <= len(steady_batches) <= 2  # of its 40
    assert Entry.objects.filter(author=steady).values("provenance__source_id").distinct().count() == len(steady_batches)
    assert not Entry.objects.filter(author=doomed).exists()
    monkeypatch.setattr(services, "_import_batch", import_batch)
    rerun = services.import_records(batch_size=10, workers=2)
    assert rerun.records == 43 - len(steady_batches) and rerun.skipped_already_imported == len(steady_batches)


@pytest.mark.django_db(transaction=True)
def test_author_groups_are_disjoint_and_balanced_by_record_count():
    counts = [9, 7, 4, 4, 3, 1]
    authors = UserFactory.create_batch(len(counts))
    for author, n in zip(authors, counts, strict=True):
        LegacyRecordFactory.create_batch(n, author=author)
    groups = services._author_partitions(2)
    assert sorted(a for group in groups for a in group) == sorted(author.pk for author in authors)
    totals = sorted(Record.objects.filter(author_id__in=group).count() for group in groups)
    assert totals == [14, 14]
    assert len(services._author_partitions(10)) == len(counts)  # never an empty group


@pytest.mark.django_db
def test_inside_a_transaction_the_import_runs_on_the_callers_connection(world, monkeypatch):
    """Other connections cannot see uncommitted rows: inside `atomic` (this test's) the workers are not used."""
    threads = []
    original = services._import_batch

    def spy(batch, summary, *, dry_run):
        threads.append(threading.current_thread())
        original(batch, summary, dry_run=dry_run)

    monkeypatch.setattr(services, "_import_batch", spy)
    assert connection.in_atomic_block
    summary = services.import_records(batch_size=4, workers=4)
    assert summary.records == Record.objects.count()
    assert set(threads) == {threading.current_thread()}


@pytest.mark.django_db(transaction=True)
def test_with_no_legacy_record_the_workers_import_nothing():
    summary = services.migrate_0041(workers=2)
    assert (summary.records, summary.entries, summary.authors, summary.skipped) == (0, 0, 0, 0)


def test_worker_and_batch_counts_below_one_are_refused():
    with pytest.raises(ValueError, match="workers"):
        services.import_records(workers=0)
    with pytest.raises(ValueError, match="batch_size"):
        services.import_records(batch_size=0)
