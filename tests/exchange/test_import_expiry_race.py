"""An idle import's chunk racing the idle-import expiry of someone's next import start (found by a breaker,
2026-12-04). The expiry deleted the hidden store with a plain delete while a chunk's transaction held the
import row and had inserted entries: the store's DELETE then failed on them (IntegrityError, a 500 for the
unrelated import start). Now the expiry locks the idle imports' rows with SKIP LOCKED first."""

from __future__ import annotations

import threading
import time

import pytest

from accounts.models import User
from memories.exchange import services as exchange
from memories.models import StoreImport
from stores.models import Store
from tests.exchange.conftest import assemble
from tests.exchange.test_http import IMPORTS, chunks, post_lines
from tests.threads import run_threads

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_chunk_being_appended_is_not_expired_under_it(owner_client, own_sample, settings, monkeypatch):
    parts = chunks(assemble(own_sample), 30)
    assert len(parts) >= 2
    started = post_lines(owner_client, IMPORTS, parts[0][1])
    assert started.status_code == 201, started.content
    upload = started.json()["data"]
    settings.IMPORT_IDLE_SECONDS = 0  # the import counts as idle from now on
    time.sleep(0.05)
    owner = User.objects.get(handle="owner")
    fed = threading.Event()
    feed = exchange.Importer.feed

    def slow_feed(self, lines):
        result = feed(self, lines)
        if threading.current_thread().name == "append":
            fed.set()
            time.sleep(1.5)  # inside append_chunk's transaction: entries inserted, not committed
        return result

    monkeypatch.setattr(exchange.Importer, "feed", slow_feed)
    expired: list[int] = []

    def append():
        exchange.append_chunk(actor=owner, import_id=upload["id"], from_line=parts[1][0], body=parts[1][1])

    def expire():
        fed.wait(10)
        time.sleep(0.2)
        expired.append(exchange.expire_idle_imports())

    errors = run_threads({"append": append, "expire": expire})
    assert not errors, {name: repr(exc) for name, exc in errors.items()}
    assert expired == [0]  # the import in use was skipped
    assert Store.objects.filter(pk=upload["store_id"]).exists() and StoreImport.objects.filter(pk=upload["id"]).exists()
    assert exchange.expire_idle_imports() == 1  # idle and not in use now: expired, store and all
    assert not Store.objects.filter(pk=upload["store_id"]).exists()
