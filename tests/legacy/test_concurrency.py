"""Two 0041 runs at once (real PostgreSQL transactions, threads): every record is imported once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from legacy import services
from legacy.models import Record
from memories.models import Entry
from stores.models import Store
from tests.factories import UserFactory
from tests.legacy.factories import LegacyRecordFactory


@pytest.mark.django_db(transaction=True)
def test_parallel_runs_import_each_record_once_with_contiguous_seqs():
    authors = UserFactory.create_batch(3)
    for index in range(60):
        LegacyRecordFactory(author=authors[index % 3], description="word " * (index * 7))
    barrier = threading.Barrier(3)
    summaries, errors = [], []

    def run():
        try:
            barrier.wait()
            summaries.append(services.migrate_0041(batch_size=4))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sum(summary.records for summary in summaries) == Record.objects.count()
    nonces = list(Entry.objects.values_list("client_nonce", flat=True))
    assert len(nonces) == len(set(nonces))
    for store in Store.objects.filter(owner__in=authors):
        seqs = list(Entry.objects.filter(store=store).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(store.entry_count))
    assert Store.objects.filter(owner__in=authors).count() == 3
