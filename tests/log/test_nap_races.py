"""nap's scan and claims where a breaker found them wanting (2026-12-05; docs/memories-log.md "Watermarks",
"Claims"): a nap claiming while `forget` releases claims (a deadlock: both now lock claims in key order), a
range compacted while the claim statement ran (handed out as a job: `_jobs` now drops it), exactly
WATERMARK_HOLES holes (X stopped at the last one: every nap read the levels after it), and the level ≥ 2
pair scans on a table without statistics (the wrong index: every summary read on every nap)."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memories import nap as nap_module
from memories import tree
from memories.models import Claim
from memories.services import forget_range
from stores.models import Store
from tests.log.conftest import fill
from tests.threads import run_threads


@contextlib.contextmanager
def paused_claim_inserts(seconds: float):
    """Every insert of a claim of range start 0 sleeps `seconds` first (a trigger, dropped on exit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION nap_test_pause() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({seconds:g}); RETURN NEW; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER nap_test_pause BEFORE INSERT ON memories_claim FOR EACH ROW "
            "WHEN (NEW.start = 0) EXECUTE FUNCTION nap_test_pause()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS nap_test_pause ON memories_claim")
            cursor.execute("DROP FUNCTION IF EXISTS nap_test_pause()")


@pytest.mark.django_db(transaction=True)
def test_a_nap_taking_over_a_lapsed_claim_after_renewing_its_own_does_not_deadlock_with_forget(private_store):
    """forget deletes every claim of the store (`_release_claims`, in physical order: 0-1 first, then 2-3)
    while a nap's claim statement renews its own claim 2-3 (rank order: own claims first) and then takes
    over the lapsed claim 0-1. A BEFORE INSERT trigger only pauses the nap between its two rows, to make the
    interleaving certain: forget deletes 0-1 and waits for 2-3 (locked by the nap), the nap's insert of 0-1
    waits for forget's delete of it — PostgreSQL kills one of them (a 503 on forget or nap)."""
    store = fill(private_store, 64)
    claimant = f"user:{store.owner_id}"
    now = timezone.now()
    Claim.objects.create(  # 0-1: someone else's claim, lapsed (the next nap takes it over); first on disk
        store=store,
        start=0,
        end=1,
        level=1,
        claimant="user:other",
        generation=store.generation,
        claimed_at=now - timedelta(minutes=10),
        expires_at=now - timedelta(minutes=5),
    )
    Claim.objects.create(  # 2-3: the napper's own active claim (renewed first)
        store=store,
        start=2,
        end=3,
        level=1,
        claimant=claimant,
        generation=store.generation,
        claimed_at=now,
        expires_at=now + timedelta(minutes=5),
    )
    with paused_claim_inserts(1.5):
        started = threading.Event()

        def napper():
            started.set()
            result = nap_module.nap(store=Store.objects.get(pk=store.pk), claimant=claimant, limit=2)
            assert result.data["jobs"]

        def forgetter():
            started.wait(10)
            time.sleep(0.5)  # the nap has renewed 2-3 and pauses before 0-1
            fresh = Store.objects.get(pk=store.pk)
            forget_range(store=fresh, actor=fresh.owner, block=tree.Block(0, 1), generation=fresh.generation)

        errors = run_threads({"nap": napper, "forget": forgetter})
    assert not errors, {name: repr(exc) for name, exc in errors.items()}


@pytest.mark.django_db(transaction=True)
def test_a_range_compacted_while_the_claim_statement_runs_is_not_handed_out(private_store):
    """A nap's claim statement checks readiness in its snapshot, then inserts the claim; a `compact` of the
    range that commits in between (the claim row it deletes, if any, is gone by then: no conflict) leaves
    the nap handing out a job whose summary already exists — duplicated LLM work, then 200 `created: false`
    or 409 `summary_conflict`. Seen without any trigger: 3 nappers + forgets for 25 s handed one range of
    one generation to two claimants in most runs. The trigger only
    pauses the claim insert of 0-1 to make the interleaving certain."""
    from memories.models import Summary
    from memories.services import compact_range

    store = fill(private_store, 64)
    left, right = tree.Block(0, 1), tree.Block(1, 1)
    digest = tree.source_digest(left, tree.child_text("entry 0"), right, tree.child_text("entry 1"))
    handed: list[str] = []
    with paused_claim_inserts(1.0):
        started = threading.Event()

        def napper():
            started.set()
            result = nap_module.nap(store=Store.objects.get(pk=store.pk), claimant="user:napper", limit=1)
            handed.extend(job["range"] for job in result.data["jobs"])

        def compactor():
            started.wait(10)
            time.sleep(0.4)  # the nap's claim statement has read 0-1 as ready and pauses before inserting it
            fresh = Store.objects.get(pk=store.pk)
            compact_range(
                store=fresh,
                author=fresh.owner,
                block=tree.Block(0, 2),
                generation=fresh.generation,
                source_digest=digest,
                summary_md="done by someone else",
                model="m",
            )

        errors = run_threads({"nap": napper, "compact": compactor})
    assert not errors, {name: repr(exc) for name, exc in errors.items()}
    assert Summary.objects.filter(store=store, start=0, end=1, invalidated_at=None).exists()
    assert "0-1" not in handed, handed  # observed: ['0-1'] — a job for a range that already has its summary
