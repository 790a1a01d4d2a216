"""The work queue: polls and claims, acknowledgement, leases and heartbeats, stops, and the lease fence
every write through a per-work credential passes (SPEC §5).

States: ``queued → starting → active → stopping → stopped``.

- A **poll** claims the oldest claimable `queued` item — never polled, or polled (and not acknowledged)
  longer than `reclaim_older_than_ms` ago — and mints a new per-work credential; the previous claim's
  credential dies. Claims use ``FOR UPDATE SKIP LOCKED``, so parallel polls never claim one item twice.
- **ack** moves the claimed item to `starting` and starts a lease of the default TTL.
- **heartbeat** extends the lease (TTL clamped to 10–300 s) and moves it to `active`; its
  `expected_last_heartbeat` precondition is compared under the row lock (412 on a mismatch).
- A lease whose TTL passes **lapses**: `starting`/`active` go back to `queued` (a new claim is needed),
  `stopping` becomes `stopped`. Lapses are applied lazily — by polls, reads and every locked use of the
  item — always judged by `statement_timestamp()`.
- **stop** asks for a graceful stop (`stopping`; the worker learns it from its next heartbeat) or, with
  `force` or on an item nobody runs, stops it at once.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from accounts.models import User
from config.compiled import CompiledQuery
from config.threads import Slots
from sessions.errors import (
    EnvironmentKeyGone,
    EnvironmentKeyRevoked,
    EnvironmentNotFound,
    EnvironmentOwnerInactive,
    HeartbeatPreconditionFailed,
    LeaseExpired,
    WorkAlreadyAcknowledged,
    WorkNotClaimed,
    WorkNotFound,
    WorkStopped,
    not_acknowledged,
)
from sessions.models import (
    LEASE_DEFAULT_TTL_SECONDS,
    LEASE_MAX_TTL_SECONDS,
    LEASE_MIN_TTL_SECONDS,
    LEASED_STATES,
    WORK_CREDENTIAL_PREFIX,
    WORKERS_POLLING_WINDOW,
    Environment,
    EnvironmentKey,
    Poller,
    Work,
    WorkClaim,
    WorkState,
)
from sessions.services.common import UNSET, db_now, lock_row, mint_secret, rfc3339
from sessions.validation import clamp_ttl
from stores import validation as store_validation

# A blocked poll re-tries its claim this often (seconds); `block_ms` ≤ 999 bounds the whole wait, so a
# poll never holds a request thread for much more than a second, whatever the server type.
POLL_STEP_SECONDS = 0.1
# A worker's `last_polled_at` is rewritten at most this often: a poll per second per worker would
# otherwise be a write per second per worker.
POLLER_RESOLUTION_SECONDS = 5


def _lock(work: Work) -> Work:
    return lock_row(work, WorkNotFound)


@contextmanager
def _settled(work: Work) -> Iterator[tuple[Work, datetime]]:
    """A transaction holding the work row's lock, with a lapsed lease already applied: ``(locked, now)``,
    `now` being database time read after the lock. Errors are raised after it commits, so the lapse stays."""
    with transaction.atomic():
        locked = _lock(work)
        now = db_now()
        _settle(locked, now)
        yield locked, now


def _end_claim(work: Work, now: datetime) -> None:
    if work.claim_id is not None:
        WorkClaim.objects.filter(pk=work.claim_id, ended_at=None).update(ended_at=now)


def _requeue(work: Work, now: datetime) -> None:
    """Back to `queued` for a new claim: the old claim ends, the lease and its timestamps reset."""
    _end_claim(work, now)
    work.state = WorkState.QUEUED
    work.claim_id = None
    work.polled_at = work.acknowledged_at = work.started_at = None
    work.last_heartbeat_at = work.previous_heartbeat_at = work.lease_expires_at = None
    work.lease_ttl_seconds = 0
    work.worker_id = ""
    work.queued_at = now
    work.save()


def stop_for_good(work: Work, now: datetime) -> bool:
    """Stop a locked work item now (`stopped`, its claim ended); False when it already was stopped."""
    if work.state == WorkState.STOPPED:
        return False
    _end_claim(work, now)
    work.state = WorkState.STOPPED
    work.claim_id = None
    work.lease_expires_at = None
    work.stopped_at = now
    work.save()
    return True


def _settle(work: Work, now: datetime) -> bool:
    """Apply a lapsed lease to a locked item (re-queue, or finish a graceful stop). True if it changed."""
    if work.state in LEASED_STATES and work.lease_expires_at <= now:
        if work.state == WorkState.STOPPING:
            return stop_for_good(work, now)
        _requeue(work, now)
        return True
    return False


def lease_state(work: Work) -> dict[str, Any]:
    """The lease as the server holds it (the SDK's `BetaWorkLeaseState`), for 412 bodies."""
    return {
        "last_heartbeat": rfc3339(work.last_heartbeat_at),
        "lease_extended": False,
        "state": work.state,
        "ttl_seconds": work.lease_ttl_seconds,
    }


def settle_lapsed_leases(*, environment: Environment) -> int:
    """Apply every lapsed lease of `environment` (by database time); returns how many items changed.

    Skips rows another transaction holds (that holder settles them itself). Called by polls and by the
    work reads, so what they report is what a poll would see.
    """
    with transaction.atomic():
        lapsed = _LAPSED.all(environment_id=environment.pk)
        if not lapsed:
            return 0
        now = db_now()
        return sum(_settle(work, now) for work in lapsed)


# --- polling --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedWork:
    """A claimed work item and its `secret`: URL-safe base64 (unpadded) of ``{"sessions_token": …}``."""

    work: Work
    secret: str


def encode_secret(sessions_token: str) -> str:
    raw = json.dumps({"sessions_token": sessions_token}, separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# What a poll runs on every try — every `POLL_STEP_SECONDS` while it waits on an empty queue — compiled once per
# process and run as prepared statements (config/compiled.py): built with the ORM, an idle worker's waiting
# poll cost about 65 ms of CPU a second (bench/RESULTS.md, 2026-12-06).
_LAPSED = CompiledQuery(
    lambda environment_id: (
        Work.objects.select_for_update(of=("self",), skip_locked=True)
        .filter(environment_id=environment_id, state__in=LEASED_STATES, lease_expires_at__lte=Now())
        .order_by("pk")
    ),
    environment_id=uuid.UUID("00000000-0000-4000-8000-00000000f3c1"),
)
_ACTIVE_USER = CompiledQuery(
    lambda pk: User.objects.filter(pk=pk, is_active=True)[:1], pk=uuid.UUID("00000000-0000-4000-8000-00000000f3c2")
)
_CLAIMABLE = CompiledQuery(
    lambda environment_id, reclaim_after: (
        Work.objects.select_for_update(of=("self",), skip_locked=True)
        .filter(environment_id=environment_id, state=WorkState.QUEUED)
        .filter(Q(polled_at__isnull=True) | Q(polled_at__lte=Now() - reclaim_after))
        .order_by("created_at", "id")[:1]
    ),
    environment_id=uuid.UUID("00000000-0000-4000-8000-00000000f3c3"),
    reclaim_after=timedelta(days=1234, microseconds=5678),
)


def _claim_next(
    environment: Environment, *, key: EnvironmentKey | None, reclaim_older_than_ms: int, worker_id: str
) -> ClaimedWork | None:
    with transaction.atomic():
        # The key is re-read under FOR SHARE in the transaction that claims: a revoke that committed first
        # is seen (401, nothing claimed); one that comes later waits until this claim commits — a claim made
        # before the revoke, whose credential lives on (docs/agent-access.md).
        if key is not None and lock_row(key, EnvironmentKeyGone, strength="share").revoked_at is not None:
            raise EnvironmentKeyRevoked()
        if key is not None and _ACTIVE_USER.first(pk=environment.owner_id) is None:
            raise EnvironmentOwnerInactive()  # deactivated while the poll waited (found by a breaker)
        work = _CLAIMABLE.first(
            environment_id=environment.pk, reclaim_after=timedelta(milliseconds=reclaim_older_than_ms)
        )
        if work is None:
            return None
        now = db_now()
        _end_claim(work, now)
        minted = mint_secret(WORK_CREDENTIAL_PREFIX)
        claim = WorkClaim.objects.create(
            work=work, prefix=minted.prefix, digest=minted.digest, worker_id=worker_id, created_at=now
        )
        work.claim_id = claim.pk
        work.polled_at = now
        work.worker_id = worker_id
        work.save(update_fields=["claim_id", "polled_at", "worker_id"])
        return ClaimedWork(work=work, secret=encode_secret(minted.secret))


@transaction.atomic
def record_poller(*, environment: Environment, worker_id: str) -> None:
    """Note that `worker_id` polled `environment` now (for `workers_polling`); at most one write per
    worker per `POLLER_RESOLUTION_SECONDS`. One statement (INSERT … ON CONFLICT), after holding the
    environment row (``FOR KEY SHARE``): EnvironmentNotFound (404) when it was deleted since it was read.
    The same statement deletes the environment's rows older than `WORKERS_POLLING_WINDOW` (they count for
    nothing), skipping rows another poll holds, so the table keeps only the workers of the last window."""
    if not worker_id:
        return
    lock_row(environment, EnvironmentNotFound, strength="key share")
    table = connection.ops.quote_name(Poller._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH stale AS (SELECT id FROM {table} WHERE environment_id = %s AND worker_id <> %s "  # noqa: S608
            "AND last_polled_at < statement_timestamp() - make_interval(secs => %s) FOR UPDATE SKIP LOCKED), "
            f"pruned AS (DELETE FROM {table} WHERE id IN (SELECT id FROM stale)) "
            f"INSERT INTO {table} (environment_id, worker_id, last_polled_at) "
            "VALUES (%s, %s, statement_timestamp()) "
            "ON CONFLICT (environment_id, worker_id) DO UPDATE SET last_polled_at = EXCLUDED.last_polled_at "
            f"WHERE {table}.last_polled_at < EXCLUDED.last_polled_at - make_interval(secs => %s)",
            [
                environment.pk,
                worker_id,
                WORKERS_POLLING_WINDOW.total_seconds(),
                environment.pk,
                worker_id,
                POLLER_RESOLUTION_SECONDS,
            ],
        )


def poll_work(
    *,
    environment: Environment,
    block_ms: int | None,
    reclaim_older_than_ms: int,
    worker_id: str = "",
    key: EnvironmentKey | None = None,
) -> ClaimedWork | None:
    """Claim the oldest claimable work item of `environment`, or None when there is none (SPEC §5 poll).

    block_ms: None returns at once; 1–999 keeps trying, every `POLL_STEP_SECONDS`, for that long (no
    transaction or lock is held while waiting) — unless `settings.POLL_WAITERS` polls of this process
    already wait, when it tries once and returns at once (block_ms is how long a poll *may* wait).
    reclaim_older_than_ms: ≥ 0; a polled item not acknowledged
    that long ago is claimed again. Each claim mints a new per-work credential and ends the previous one.
    key: the environment key polling (None for callers that hold no key, such as tests): every attempt
    re-reads it in the claiming transaction, so a key revoked (deleted) while the poll waits raises
    EnvironmentKeyRevoked (EnvironmentKeyGone), a 401, and claims nothing. EnvironmentNotFound (404) when
    the environment is gone before the poll starts.
    """
    record_poller(environment=environment, worker_id=worker_id)
    waits = bool(block_ms) and _waiting_polls.take()
    deadline = time.monotonic() + (block_ms if waits else 0) / 1000
    try:
        while True:
            settle_lapsed_leases(environment=environment)
            claimed = _claim_next(
                environment, key=key, reclaim_older_than_ms=reclaim_older_than_ms, worker_id=worker_id
            )
            remaining = deadline - time.monotonic()
            if claimed is not None or remaining <= 0:
                return claimed
            time.sleep(min(POLL_STEP_SECONDS, remaining))
    finally:
        if waits:
            _waiting_polls.release()


# Polls of this process waiting on an empty queue now, at most `POLL_WAITERS`: each waits in a request
# thread, so idle pollers past it would take the threads every other request needs (found by a breaker:
# 160 idle pollers made a heartbeat take 7 s). The others answer at once, as block_ms allows (`poll_work`).
_waiting_polls = Slots(lambda: settings.POLL_WAITERS)


# --- acknowledge, heartbeat, stop -----------------------------------------------------------------


def acknowledge_work(*, work: Work) -> Work:
    """Acknowledge the claimed item: `queued` → `starting`, with a lease of the default TTL (SDK `ack`).

    Acknowledging a `starting` item again returns it unchanged (a poller retrying its ack). Raises
    WorkNotClaimed (409: never polled, or re-queued since), WorkAlreadyAcknowledged (409: active or
    stopping), WorkStopped (409). Locks the row; a lapsed lease is applied first.
    """
    with _settled(work) as (locked, now):
        error: Exception | None = None
        if locked.state == WorkState.STOPPED:
            error = WorkStopped()
        elif locked.state in (WorkState.ACTIVE, WorkState.STOPPING):
            error = WorkAlreadyAcknowledged()
        elif locked.state == WorkState.QUEUED and locked.claim_id is None:
            error = WorkNotClaimed()
        elif locked.state == WorkState.QUEUED:
            locked.state = WorkState.STARTING
            locked.acknowledged_at = now
            locked.lease_ttl_seconds = LEASE_DEFAULT_TTL_SECONDS
            locked.lease_expires_at = now + timedelta(seconds=LEASE_DEFAULT_TTL_SECONDS)
            locked.save(update_fields=["state", "acknowledged_at", "lease_ttl_seconds", "lease_expires_at"])
    if error is not None:
        raise error  # after the commit, so a lapse applied above is kept
    return locked


@dataclass(frozen=True)
class Heartbeat:
    """A `work_heartbeat` answer: `last_heartbeat` is RFC 3339 (``""`` when none was ever recorded)."""

    last_heartbeat: str
    lease_extended: bool
    state: str
    ttl_seconds: int


def heartbeat_work(
    *,
    work: Work,
    claim: WorkClaim | None = None,
    desired_ttl_seconds: int | None = None,
    expected_last_heartbeat: Any = UNSET,
) -> Heartbeat:
    """Extend the lease of `work` and move it to `active` (SDK `work.heartbeat`, SPEC §5).

    claim: the per-work credential making the call (None for the environment key). desired_ttl_seconds:
    clamped to 10–300 (None: 60). expected_last_heartbeat: a datetime (the server's previous
    `last_heartbeat`), None for `NO_HEARTBEAT` (no heartbeat yet in this claim), UNSET for no precondition.

    When `claim` no longer holds the item (nor held it when it was stopped) raises
    HeartbeatPreconditionFailed (412, with the lease the server holds), whatever the state. On
    `stopping`/`stopped` the precondition is not compared: the answer says ``lease_extended: false`` and the
    state, so the worker shuts down. Otherwise raises HeartbeatPreconditionFailed when the expectation
    differs — unless the holding claim's own credential repeats its last heartbeat (`_a_retry`: the lease is
    extended, the same `last_heartbeat` answered) — or when the item is not leased (queued; a lapsed lease is
    re-queued first). Locks the row: of two heartbeats with one expectation exactly one moves the heartbeat.
    """
    ttl = clamp_ttl(
        desired_ttl_seconds, low=LEASE_MIN_TTL_SECONDS, high=LEASE_MAX_TTL_SECONDS, default=LEASE_DEFAULT_TTL_SECONDS
    )
    with _settled(work) as (locked, now):
        rejected = None
        stale = expected_last_heartbeat is not UNSET and expected_last_heartbeat != locked.last_heartbeat_at
        if claim is not None and not _held_until_now(locked, claim):
            rejected = "This credential's claim has ended: the item was re-queued or claimed by another worker."
        elif locked.state in (WorkState.STOPPING, WorkState.STOPPED):
            return Heartbeat(
                last_heartbeat=rfc3339(locked.last_heartbeat_at) or "",
                lease_extended=False,
                state=locked.state,
                ttl_seconds=locked.lease_ttl_seconds,
            )
        elif locked.state == WorkState.QUEUED and locked.claim_id is not None:  # polled, not acknowledged
            rejected = f"This work item holds no lease yet: {not_acknowledged(locked)}"
        elif locked.state not in (WorkState.STARTING, WorkState.ACTIVE):
            rejected = "This work item holds no lease (it is queued): claim it again with a poll."
        elif stale and not _a_retry(locked, claim, expected_last_heartbeat):
            rejected = HeartbeatPreconditionFailed.message
        if rejected is None:
            if not stale:  # a retry (stale, yet accepted) repeats that heartbeat: same `last_heartbeat`
                locked.previous_heartbeat_at = locked.last_heartbeat_at
                locked.last_heartbeat_at = now
            locked.lease_ttl_seconds = ttl
            locked.lease_expires_at = now + timedelta(seconds=ttl)
            if locked.state == WorkState.STARTING:
                locked.state = WorkState.ACTIVE
                locked.started_at = now
            locked.save(
                update_fields=[
                    "previous_heartbeat_at",
                    "last_heartbeat_at",
                    "lease_ttl_seconds",
                    "lease_expires_at",
                    "state",
                    "started_at",
                ]
            )
            return Heartbeat(
                last_heartbeat=rfc3339(locked.last_heartbeat_at),
                lease_extended=True,
                state=locked.state,
                ttl_seconds=ttl,
            )
        current = lease_state(locked)
    raise HeartbeatPreconditionFailed(current_state=current, message=rejected)


def _a_retry(locked: Work, claim: WorkClaim | None, expected: datetime | None) -> bool:
    """Whether a heartbeat whose expectation is stale repeats the last successful one: made with the per-work
    credential of the claim that holds `locked` (checked by the caller), expecting what that heartbeat expected
    (`previous_heartbeat_at`). Such a retry extends the lease from now and answers the same `last_heartbeat`
    as the heartbeat it repeats, whichever of the copies lands first.

    Its answer was lost — a timeout, a reset connection, a 503 from a deadline the committed heartbeat
    outlived — and the SDK retries a request with the same body (its client's own retries, then
    `_heartbeat_loop`'s): before, that retry was the 412 of a lost lease, and the worker killed its agent
    (docs/agent-access.md, "Heartbeats"). Answering the *same* value matters when the original lands after its
    retry: a new value would replace the one the worker holds, and its next heartbeat would be the 412 (a
    breaker). Only the claim's own credential is believed: it names one claim, which no other worker holds.
    The environment key names none — a worker whose claim lapsed before its first heartbeat would send
    `NO_HEARTBEAT` just as a retry of the new claim's first one does — so it is held to the exact expectation.
    A retry two heartbeats back is a 412 as before.
    """
    return claim is not None and locked.last_heartbeat_at is not None and expected == locked.previous_heartbeat_at


def _held_until_now(locked: Work, claim: WorkClaim) -> bool:
    """Whether `claim` holds the locked item, or held it when it was stopped (its claim ended at `stopped_at`):
    the holder of a stopped item hears `stopped`; a credential whose claim ended before — re-queued, claimed
    by another worker — hears 412 whatever the item's state (before, a dead credential heard `stopping` with
    the live claim's heartbeat, and its SDK loop took a lost lease for a stop: a breaker)."""
    if locked.claim_id is not None or locked.state != WorkState.STOPPED:
        return locked.claim_id == claim.pk
    ended_at = WorkClaim.objects.filter(pk=claim.pk, work_id=locked.pk).values_list("ended_at", flat=True).first()
    # A lapsed lease applied by the stop itself re-queued the item (ending the claim) and stopped it at the
    # same instant: `queued_at` then equals `stopped_at`, and that claim had lost its lease before the stop.
    return ended_at is not None and ended_at == locked.stopped_at != locked.queued_at


def stop_work(*, work: Work, claim: WorkClaim | None = None, force: bool = False) -> Work:
    """Stop `work` (SDK `work.stop`): `force`, or an item nobody runs (`queued`), stops it now; a
    running item goes to `stopping` (graceful: its next heartbeat tells the worker), and a `stopping` one
    stays so until its worker stops it with `force` or its lease lapses.

    Raises WorkStopped (409) when already stopped, LeaseExpired (409) when `claim` (a per-work credential)
    no longer holds the item. Locks the row; a lapsed lease is applied first.
    """
    with _settled(work) as (locked, now):
        error: Exception | None = None
        if locked.state == WorkState.STOPPED:
            error = WorkStopped()
        elif claim is not None and (locked.claim_id != claim.pk or locked.state not in LEASED_STATES):
            error = LeaseExpired.of(claim.pk, locked)
        elif force or locked.state == WorkState.QUEUED:
            stop_for_good(locked, now)
        elif locked.state in (WorkState.STARTING, WorkState.ACTIVE):
            locked.state = WorkState.STOPPING
            locked.stop_requested_at = now
            locked.save(update_fields=["state", "stop_requested_at"])
    if error is not None:
        raise error
    return locked


@transaction.atomic
def update_work_metadata(*, work: Work, metadata_patch: object) -> Work:
    """Merge a metadata patch into `work` (SDK `work.update`: a string upserts a key, null deletes it)."""
    locked = _lock(work)
    merged = store_validation.patch_metadata(locked.metadata, metadata_patch)
    if merged != locked.metadata:
        locked.metadata = merged
        locked.save(update_fields=["metadata"])
    return locked


# --- the fence ------------------------------------------------------------------------------------

Fence = Callable[[], datetime]


# The fence's locking read, compiled once per process (config/compiled.py): it runs on every write made with
# a per-work credential.
_LOCK_WORK = CompiledQuery(
    lambda pk: Work.objects.select_for_update(of=("self",)).filter(pk=pk),
    pk=uuid.UUID("00000000-0000-4000-8000-00000000f3ce"),
)


def lease_fence(claim: WorkClaim) -> Fence:
    """A fence for one write made with `claim`'s credential (SPEC §5).

    The write service calls it inside its transaction, after locking the store row: it locks the work row,
    reads `statement_timestamp()` and raises LeaseExpired (409, nothing written) unless `claim` is still
    the item's claim, the item is leased and the lease has not passed. It returns that database time, which
    the service stamps on what it writes — so no write the database judged after expiry ever lands.
    """

    def fence() -> datetime:
        work = _LOCK_WORK.first(pk=claim.work_id)
        now = db_now()  # a statement of its own: one that started before the lock wait would read an older time
        if work is None or work.claim_id != claim.pk or work.state not in LEASED_STATES or work.lease_expires_at <= now:
            raise LeaseExpired.of(claim.pk, work)
        return now

    return fence


def fence_for_request(request: Any) -> Fence | None:
    """The fence a write request must pass: one for a per-work credential, None for an API token."""
    auth = getattr(request, "auth", None)
    return lease_fence(auth) if isinstance(auth, WorkClaim) else None
