"""The export is one snapshot (SPEC §8b): writes committed while it streams are not in it, and it stays whole."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memories import services
from memories.exchange.export import BATCH_ROWS, export_lines
from tests.exchange.conftest import parse
from tests.factories import StoreFactory, UserFactory
from tests.log.conftest import fill

pytestmark = pytest.mark.django_db(transaction=True)


def in_another_connection(work) -> None:
    """Run `work()` in a thread (its own database connection, committed when it returns)."""
    errors: list[BaseException] = []

    def run():
        try:
            work()
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]


def test_notes_and_redactions_during_an_export_do_not_leak_into_it():
    owner = UserFactory(handle="snap-owner")
    store = fill(StoreFactory(owner=owner), BATCH_ROWS["entries"] + 500)
    stream = export_lines(store)
    header = next(stream)
    first_entries = [next(stream) for _ in range(10)]

    def meanwhile():
        services.append_entry(store=store, author=owner, body_md="written during the export")
        services.redact_entry(store=store, actor=owner, seq=BATCH_ROWS["entries"] + 100, reason="late leak")

    in_another_connection(meanwhile)
    objects = parse(header + b"".join(first_entries) + b"".join(stream))
    entries = [obj for obj in objects if obj["type"] == "entry"]
    assert len(entries) == objects[0]["counts"]["entries"] == BATCH_ROWS["entries"] + 500
    assert all(obj["body_md"] is not None for obj in entries)  # the redaction came after the snapshot
    assert objects[-1]["type"] == "end" and objects[-1]["lines"] == len(objects) - 1
    store.refresh_from_db()
    assert store.entry_count == BATCH_ROWS["entries"] + 501
