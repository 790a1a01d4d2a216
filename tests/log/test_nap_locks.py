"""nap's writing statements (claims, watermarks) against the store lock of concurrent writes: no deadlock.

Found by a breaker (2026-12-04): a nap renewing one claim and inserting another deadlocked with `forget`
(which deletes every claim of the store under the store lock), and a nap moving one watermark and inserting
another deadlocked with `delete_store` — the new rows' foreign-key check waited for the store row while the
nap held the rows the other transaction wanted to delete. Now every write service locks the store
`FOR NO KEY UPDATE` (foreign-key checks pass it), `delete_store` alone `FOR UPDATE`, and nap's statements take
`FOR KEY SHARE` on the store row before they lock any claim or watermark. Each test holds the store lock in
one thread as the real service does, with a pause to make the interleaving certain, and runs the nap in
another (own connections, real PostgreSQL).
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import transaction

from memories import nap as nap_module
from memories.models import Claim, Watermark
from memories.services import forget_range
from memories.tree import Block
from stores import services as store_services
from stores.errors import StoreNotFound
from stores.models import Store
from tests.log.conftest import fill, put_summary
from tests.threads import run_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def interleave(holder, napper) -> dict[str, BaseException]:
    """Run `holder(locked_event)` and `napper()` in two threads; the nap starts once the holder has its
    lock. Returns the exceptions raised, by name."""
    locked = threading.Event()

    def nap():
        locked.wait(10)
        time.sleep(0.2)  # the holder keeps its lock for a while yet: the nap's statement runs inside that time
        napper()

    return run_threads({"holder": lambda: holder(locked), "nap": nap})


def deleting(store):
    """A holder for `interleave`: `delete_store`'s own lock taken first, held a while, then the deletion."""

    def delete(locked):
        with transaction.atomic():
            store_services.lock_store(store, for_delete=True)
            locked.set()
            time.sleep(1.0)
            store_services.delete_store(store=store)

    return delete


def test_a_nap_renewing_its_claim_and_a_forget_do_not_deadlock(private_store):
    store = fill(private_store, 64)  # few pending: the exhaustive walk, no watermark
    claimant = f"user:{store.owner_id}"
    assert [job["range"] for job in nap_module.nap(store=store, claimant=claimant).data["jobs"]] == ["0-1"]

    def forget(locked):
        with transaction.atomic():
            store_services.lock_store(store)
            locked.set()
            time.sleep(1.0)
            forget_range(store=store, actor=store.owner, block=Block(0, 1), generation=store.generation)

    # renews 0-1 (an UPDATE of the claim row it holds) and claims 2-3 (an INSERT: foreign-key check)
    def napper():
        nap_module.nap(store=Store.objects.get(pk=store.pk), claimant=claimant, limit=2)

    errors = interleave(forget, napper)
    assert not errors, {name: repr(exc) for name, exc in errors.items()}
    assert not Claim.objects.filter(store=store, generation=Store.objects.get(pk=store.pk).generation).exists()


def test_a_nap_moving_watermarks_and_a_store_delete_do_not_deadlock(private_store):
    store = fill(private_store, 600)  # 599 pending: the scan, with watermarks
    put_summary(store, "0-1")
    put_summary(store, "2-3")
    nap_module.nap(store=Store.objects.get(pk=store.pk), claimant=None)
    assert dict(Watermark.objects.filter(store=store).values_list("level", "start")) == {1: 4}
    put_summary(store, "4-5")
    put_summary(store, "6-7")
    put_summary(store, "0-3")  # the next scan moves level 1 (an UPDATE) and adds level 2 (an INSERT)
    store.refresh_from_db()

    errors = interleave(deleting(store), lambda: nap_module.nap(store=store, claimant=None))
    assert "holder" not in errors, repr(errors["holder"])
    assert isinstance(errors.get("nap"), StoreNotFound), repr(errors.get("nap"))
    assert not Store.objects.filter(pk=store.pk).exists() and not Watermark.objects.exists()


def test_a_claiming_nap_and_a_store_delete_do_not_deadlock(private_store):
    store = fill(private_store, 64)
    claimant = f"user:{store.owner_id}"
    nap_module.nap(store=store, claimant=claimant)  # holds 0-1: the next nap renews it and claims 2-3

    errors = interleave(deleting(store), lambda: nap_module.nap(store=store, claimant=claimant, limit=2))
    assert "holder" not in errors, repr(errors["holder"])
    assert isinstance(errors.get("nap"), StoreNotFound), repr(errors.get("nap"))
    assert not Claim.objects.exists()


def test_writers_of_one_store_still_wait_for_each_other(private_store):
    """The weaker lock still serialises the store's writers: a second `lock_store` waits for the first."""
    store = fill(private_store, 4)
    order: list[str] = []

    def first(locked):
        with transaction.atomic():
            store_services.lock_store(store)
            locked.set()
            time.sleep(0.8)
            order.append("first done")

    def second():
        with transaction.atomic():
            store_services.lock_store(store)
            order.append("second locked")

    errors = interleave(first, second)
    assert not errors, errors
    assert order == ["first done", "second locked"]
