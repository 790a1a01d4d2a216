"""The official SDK drives the work queue against a live server, each call with the credential its
docstring names (SPEC §5): poll/ack/list with the environment key, heartbeat/stop with the item's own
per-work credential (or the key), retrieve/update with the owner's API token, stats with either."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from datetime import timedelta

import anthropic
import pytest
from anthropic import AsyncAnthropic
from anthropic.types.beta.environments import BetaHeartbeatPreconditionFailedError
from asgiref.sync import sync_to_async
from django.db import connections
from django.db.models.functions import Now

from sessions.models import WORKERS_POLLING_WINDOW, Environment, Poller, Work, WorkClaim
from tests.agent.conftest import sessions_token
from versions.models import Memory

pytestmark = pytest.mark.django_db(transaction=True)

WORK_KEYS = {
    "id",
    "type",
    "acknowledged_at",
    "created_at",
    "data",
    "environment_id",
    "latest_heartbeat_at",
    "metadata",
    "secret",
    "started_at",
    "state",
    "stop_requested_at",
    "stopped_at",
}


@pytest.fixture
def env_id(environment) -> str:
    return str(environment.pk)


@pytest.fixture
def session(make_session, notes_store):
    return make_session(notes_store)


def test_poll_claims_the_queued_item_with_a_secret_carrying_a_per_work_credential(key_sdk, env_id, session):
    raw = key_sdk.beta.environments.work.with_raw_response.poll(env_id)
    body, work = raw.http_response.json(), raw.parse()
    assert set(body) == WORK_KEYS
    assert (work.type, work.state, work.data.type, work.data.id) == ("work", "queued", "session", str(session.pk))
    token = sessions_token(work.secret)
    assert token.startswith("mwork_") and "=" not in work.secret
    row = Work.objects.get(pk=work.id)
    claim = WorkClaim.objects.get(pk=row.claim_id)
    assert claim.digest == hashlib.sha256(token.encode()).hexdigest() and token not in str(claim.__dict__)


def test_an_empty_poll_is_200_with_the_json_body_null_which_the_sdk_reads_as_none(key_sdk, env_id):
    raw = key_sdk.beta.environments.work.with_raw_response.poll(env_id)
    assert raw.http_response.status_code == 200
    assert raw.http_response.headers["content-type"].startswith("application/json")
    assert raw.http_response.text == "null"
    assert raw.parse() is None


@pytest.mark.serial  # timed
def test_a_blocking_poll_waits_for_block_ms_but_not_past_about_a_second(key_sdk, env_id):
    started = time.monotonic()
    assert key_sdk.beta.environments.work.poll(env_id, block_ms=999) is None
    elapsed = time.monotonic() - started
    assert 0.95 <= elapsed < 2.5


@pytest.mark.serial  # timed
def test_polls_past_poll_waiters_answer_at_once_and_the_slot_comes_back(client_for, env_key, env_id, settings):
    """Each waiting poll holds a request thread: past POLL_WAITERS a poll tries once and answers at once
    (a breaker's 160 idle pollers made every other request of the server wait 7 s)."""
    settings.POLL_WAITERS = 1
    first: dict = {}

    def waiting() -> None:
        try:
            started = time.monotonic()
            first["work"] = client_for(env_key.secret).beta.environments.work.poll(env_id, block_ms=999)
            first["took"] = time.monotonic() - started
        finally:
            connections.close_all()

    thread = threading.Thread(target=waiting)
    thread.start()
    time.sleep(0.3)
    poller = client_for(env_key.secret).beta.environments.work
    started = time.monotonic()
    second = poller.poll(env_id, block_ms=999)
    took = time.monotonic() - started
    thread.join()
    assert second is None and took < 0.5
    assert first["work"] is None and first["took"] >= 0.95
    started = time.monotonic()
    assert poller.poll(env_id, block_ms=999) is None  # the slot came back: this one waits again
    assert time.monotonic() - started >= 0.95


@pytest.mark.serial  # timed
def test_an_item_queued_during_a_blocking_poll_is_returned_by_that_poll(key_sdk, env_id, make_session, notes_store):
    def queue_one() -> None:
        try:
            make_session(notes_store)
        finally:
            connections.close_all()  # this thread's own connection

    timer = threading.Timer(0.3, queue_one)
    started = time.monotonic()
    timer.start()
    try:
        work = key_sdk.beta.environments.work.poll(env_id, block_ms=999)
    finally:
        timer.join()
    assert work is not None and work.state == "queued"
    assert time.monotonic() - started < 2.0


def test_ack_moves_the_claimed_item_to_starting_and_is_idempotent_while_starting(key_sdk, env_id, session):
    work = key_sdk.beta.environments.work.poll(env_id)
    acked = key_sdk.beta.environments.work.ack(work.id, environment_id=env_id)
    again = key_sdk.beta.environments.work.ack(work.id, environment_id=env_id)
    assert (acked.state, again.state) == ("starting", "starting")
    assert acked.acknowledged_at == again.acknowledged_at and acked.secret is None
    row = Work.objects.get(pk=work.id)
    assert row.lease_ttl_seconds == 60 and row.lease_expires_at - row.acknowledged_at == timedelta(seconds=60)


def test_ack_of_an_item_nobody_polled_is_409_without_retry(key_sdk, env_id, session):
    work = Work.objects.get(session=session)
    with pytest.raises(anthropic.ConflictError) as caught:
        key_sdk.beta.environments.work.ack(str(work.pk), environment_id=env_id)
    assert caught.value.body["error"]["details"]["reason"] == "work_not_claimed"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert Work.objects.get(pk=work.pk).state == "queued"


def test_first_heartbeat_with_no_heartbeat_makes_the_item_active_and_later_ones_echo_last_heartbeat(
    key_sdk, client_for, env_id, session, claim
):
    claimed = claim(heartbeat=False)
    work = client_for(claimed.token).beta.environments.work
    first = work.heartbeat(claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    assert (first.type, first.state, first.lease_extended, first.ttl_seconds) == ("work_heartbeat", "active", True, 60)
    second = work.heartbeat(
        claimed.work_id, environment_id=env_id, expected_last_heartbeat=first.last_heartbeat, desired_ttl_seconds=120
    )
    assert second.lease_extended and second.ttl_seconds == 120 and second.last_heartbeat > first.last_heartbeat
    row = claimed.row
    assert row.state == "active" and row.started_at is not None
    assert row.lease_expires_at - row.last_heartbeat_at == timedelta(seconds=120)


@pytest.mark.parametrize(("desired", "applied"), [(1, 10), (-5, 10), (10, 10), (300, 300), (10**12, 300)])
def test_desired_ttl_seconds_is_clamped_to_10_through_300(key_sdk, env_id, session, claim, desired, applied):
    claimed = claim(heartbeat=False)
    beat = key_sdk.beta.environments.work.heartbeat(
        claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT", desired_ttl_seconds=desired
    )
    assert beat.ttl_seconds == applied
    row = claimed.row
    assert row.lease_expires_at - row.last_heartbeat_at == timedelta(seconds=applied)


def test_a_stale_expected_last_heartbeat_is_412_with_the_lease_the_server_holds(key_sdk, env_id, session, claim):
    claimed = claim(heartbeat=False)
    work = key_sdk.beta.environments.work  # the key names no claim: held to the exact expectation
    beat = work.heartbeat(claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    before = claimed.row
    with pytest.raises(BetaHeartbeatPreconditionFailedError) as caught:
        work.heartbeat(claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    error = caught.value
    assert error.status_code == 412 and error.response.headers["x-should-retry"] == "false"
    assert error.body["error"]["type"] == "precondition_failed_error"
    assert error.body["error"]["details"] == {
        "error_code": "heartbeat_precondition_failed",
        "current_state": {
            "last_heartbeat": beat.last_heartbeat,
            "lease_extended": False,
            "state": "active",
            "ttl_seconds": 60,
        },
    }
    after = claimed.row
    assert (after.last_heartbeat_at, after.lease_expires_at) == (before.last_heartbeat_at, before.lease_expires_at)


def _beats_of_the_claim(client_for, claimed, env_id):
    """``beat(expected) -> heartbeat answer`` with the claim's own per-work credential."""
    work = client_for(claimed.token).beta.environments.work
    return lambda expected: work.heartbeat(claimed.work_id, environment_id=env_id, expected_last_heartbeat=expected)


def test_the_claims_own_credential_may_repeat_the_last_heartbeat_but_not_an_older_one(
    client_for, env_id, session, claim
):
    """A heartbeat whose answer was lost is retried with the same expectation: with the claim's own
    credential that is the same heartbeat again — the lease extended from now, the same `last_heartbeat`
    answered — never a lost lease; two back is 412."""
    claimed = claim(heartbeat=False)
    beat = _beats_of_the_claim(client_for, claimed, env_id)

    first = beat("NO_HEARTBEAT")
    expires = claimed.row.lease_expires_at
    retried = beat("NO_HEARTBEAT")  # the first one's answer "was lost"
    assert (retried.lease_extended, retried.last_heartbeat) == (True, first.last_heartbeat)
    assert claimed.row.lease_expires_at > expires
    assert beat("NO_HEARTBEAT").last_heartbeat == first.last_heartbeat  # the SDK's client retries twice
    second = beat(first.last_heartbeat)
    assert second.last_heartbeat > first.last_heartbeat
    assert beat(first.last_heartbeat).last_heartbeat == second.last_heartbeat  # a retry of the second
    with pytest.raises(BetaHeartbeatPreconditionFailedError):
        beat("NO_HEARTBEAT")  # two back now
    assert beat(second.last_heartbeat).last_heartbeat > second.last_heartbeat


def test_a_heartbeat_landing_after_its_own_retry_leaves_the_worker_its_lease(client_for, env_id, session, claim):
    """The original request is held up on the way and commits after the client's retry (a deadline's 503 and a
    request still running, say): both answer the same `last_heartbeat`, so the value the worker holds stays
    the one to expect. A first version answered the late copy a new value, and the worker's next heartbeat
    was a 412 (a breaker)."""
    claimed = claim(heartbeat=False)
    beat = _beats_of_the_claim(client_for, claimed, env_id)

    held = beat("NO_HEARTBEAT")  # the retry: its answer is the one the worker reads
    assert beat("NO_HEARTBEAT").last_heartbeat == held.last_heartbeat  # the original, late
    later = beat(held.last_heartbeat)
    assert beat(held.last_heartbeat).last_heartbeat == later.last_heartbeat  # the same one beat later
    assert beat(later.last_heartbeat).lease_extended


def _run_the_sdks_heartbeat_loop(api_url, env_id, claimed, transport, *, until, ttl: int = 60):
    """Run the SDK's own `_heartbeat_loop` (what memories-worker runs) with the claim's credential, its
    client's retries (2) and `transport` (an httpx2 transport: the SDK refuses httpx objects) until `until()`
    holds, then end the lease as the runner would. Returns the `_Lease`, whose end reason says whether the loop
    took the lease for lost first. Waits for any task the transport left in `transport.pending`."""
    import anyio
    import httpx2
    from anthropic.lib.environments._worker import _heartbeat_loop, _Lease, _LeaseEndReason

    class WithTtl:
        def __init__(self, work) -> None:
            self.work = work

        async def heartbeat(self, work_id, **kwargs):
            return await self.work.heartbeat(work_id, desired_ttl_seconds=ttl, **kwargs)

    async def run() -> _Lease:
        lease = _Lease()
        http_client = httpx2.AsyncClient(transport=transport)
        async with AsyncAnthropic(
            base_url=api_url, auth_token=claimed.token, max_retries=2, http_client=http_client
        ) as client:

            async def end_once_done() -> None:
                while not until():
                    await anyio.sleep(0.02)
                await anyio.sleep(0.3)  # the loop has read the last answer by now
                lease.finish(_LeaseEndReason.RUNNER_DONE)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(end_once_done)
                    work = WithTtl(client.beta.environments.work)
                    await _heartbeat_loop(work, work_id=claimed.work_id, environment_id=env_id, lease=lease)
                await asyncio.gather(*getattr(transport, "pending", []))
        return lease

    return asyncio.run(run())


def test_the_sdks_heartbeat_loop_keeps_the_lease_when_an_answer_is_lost(api_url, env_id, session, claim):
    """The first heartbeat commits but its answer is lost on the way back, so the SDK's client retries it with
    the same expectation. Before, that retry was 412 and the loop ended the lease as lost (the worker kills
    its agent)."""
    import httpx2

    class LoseTheFirstAnswer(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()
            self.statuses: list[int] = []

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await self.inner.handle_async_request(request)
            await response.aread()
            self.statuses.append(response.status_code)
            if len(self.statuses) == 1:
                raise httpx2.ReadError("the answer was lost on the way back", request=request)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    claimed = claim(heartbeat=False)
    transport = LoseTheFirstAnswer()
    lease = _run_the_sdks_heartbeat_loop(
        api_url, env_id, claimed, transport, until=lambda: len(transport.statuses) >= 2
    )
    assert transport.statuses == [200, 200]
    assert not lease.lost and lease.kept
    row = claimed.row
    assert row.state == "active" and row.lease_expires_at > row.last_heartbeat_at


def test_the_sdks_heartbeat_loop_keeps_the_lease_when_the_original_lands_after_its_retry(
    api_url, env_id, session, claim
):
    """The other order (a breaker): the first attempt is held up on the way (the transport gives up on it at
    once, as on a reset, and delivers it 2 s later), the client's retry commits first and the loop reads its
    answer, then the original commits. With TTL 10 the loop's next heartbeat comes 5 s later and must find the
    value it holds."""
    import httpx2

    class DelayTheFirst(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()
            self.late = httpx2.AsyncHTTPTransport()
            self.statuses: list[tuple[str, int]] = []
            self.pending: list[asyncio.Task] = []

        async def _deliver_late(self, request: httpx2.Request) -> None:
            await asyncio.sleep(2.0)
            response = await self.late.handle_async_request(request)
            await response.aread()
            self.statuses.append(("late original", response.status_code))

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            if not self.pending:
                self.pending.append(asyncio.ensure_future(self._deliver_late(request)))
                raise httpx2.ReadError("connection reset; the request is still on its way", request=request)
            response = await self.inner.handle_async_request(request)
            await response.aread()
            self.statuses.append(("loop", response.status_code))
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()
            await self.late.aclose()

    claimed = claim(heartbeat=False)
    transport = DelayTheFirst()
    lease = _run_the_sdks_heartbeat_loop(
        api_url, env_id, claimed, transport, ttl=10, until=lambda: [s[0] for s in transport.statuses].count("loop") >= 2
    )
    assert transport.statuses == [("loop", 200), ("late original", 200), ("loop", 200)], transport.statuses
    assert not lease.lost and lease.kept


def test_a_heartbeat_on_a_stopping_item_is_not_compared_and_says_the_lease_was_not_extended(
    key_sdk, client_for, env_id, session, claim
):
    claimed = claim()
    key_sdk.beta.environments.work.stop(claimed.work_id, environment_id=env_id)
    beat = client_for(claimed.token).beta.environments.work.heartbeat(
        claimed.work_id, environment_id=env_id, expected_last_heartbeat="2001-01-01T00:00:00Z"
    )
    assert (beat.state, beat.lease_extended) == ("stopping", False)


def test_stop_asks_a_running_item_to_stop_and_force_stops_it(key_sdk, client_for, env_id, session, claim):
    claimed = claim()
    stopping = key_sdk.beta.environments.work.stop(claimed.work_id, environment_id=env_id)
    assert stopping.state == "stopping" and stopping.stop_requested_at is not None and stopping.stopped_at is None
    stopped = client_for(claimed.token).beta.environments.work.stop(claimed.work_id, environment_id=env_id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at is not None
    assert WorkClaim.objects.get(work_id=claimed.work_id).ended_at is not None


def test_stopping_a_stopped_item_is_409_without_retry(key_sdk, env_id, session):
    work = Work.objects.get(session=session)
    first = key_sdk.beta.environments.work.stop(str(work.pk), environment_id=env_id)
    assert first.state == "stopped"  # a queued item nobody runs stops at once
    with pytest.raises(anthropic.ConflictError) as caught:
        key_sdk.beta.environments.work.stop(str(work.pk), environment_id=env_id, force=True)
    assert caught.value.body["error"]["details"]["reason"] == "work_stopped"
    assert caught.value.response.headers["x-should-retry"] == "false"


def test_retrieve_and_update_take_the_owners_api_token(owner_sdk, key_sdk, client_for, env_id, session, claim):
    claimed = claim()
    work = owner_sdk.beta.environments.work
    got = work.retrieve(claimed.work_id, environment_id=env_id)
    assert got.state == "active" and got.secret is None and got.data.id == str(session.pk)
    work.update(claimed.work_id, environment_id=env_id, metadata={"ticket": "T-1", "owner": "ops"})
    updated = work.update(claimed.work_id, environment_id=env_id, metadata={"owner": None})
    assert updated.metadata == {"ticket": "T-1"} == Work.objects.get(pk=claimed.work_id).metadata
    for other in (key_sdk, client_for(claimed.token)):
        with pytest.raises(anthropic.AuthenticationError):
            other.beta.environments.work.retrieve(claimed.work_id, environment_id=env_id)
        with pytest.raises(anthropic.AuthenticationError):
            other.beta.environments.work.update(claimed.work_id, environment_id=env_id, metadata={"x": "y"})
    assert Work.objects.get(pk=claimed.work_id).metadata == {"ticket": "T-1"}


def test_list_takes_the_environment_key_and_pages_newest_first(owner_sdk, key_sdk, env_id, make_session, notes_store):
    sessions = [make_session(notes_store) for _ in range(3)]
    page = key_sdk.beta.environments.work.list(env_id, limit=2)
    assert [w.data.id for w in page.data] == [str(sessions[2].pk), str(sessions[1].pk)]
    assert [w.data.id for w in key_sdk.beta.environments.work.list(env_id, limit=2)] == [
        str(s.pk) for s in reversed(sessions)
    ]
    with pytest.raises(anthropic.AuthenticationError):
        owner_sdk.beta.environments.work.list(env_id)


def test_stats_count_depth_pending_and_the_workers_seen_polling(owner_sdk, key_sdk, env_id, make_session, notes_store):
    first = make_session(notes_store)
    make_session(notes_store)
    make_session(notes_store)
    key_sdk.beta.environments.work.poll(env_id, anthropic_worker_id="host-a-1")
    for client in (key_sdk, owner_sdk):
        stats = client.beta.environments.work.stats(env_id)
        assert (stats.type, stats.depth, stats.pending, stats.workers_polling) == ("work_queue_stats", 2, 1, 1)
        assert stats.oldest_queued_at == Work.objects.get(session=first).queued_at.isoformat().replace("+00:00", "Z")


def test_pollers_older_than_the_window_are_pruned_by_the_next_poll(key_sdk, env_id, environment):
    """One row per distinct `Anthropic-Worker-ID`: a key holder sending a new id on every poll grew the table
    without bound (a breaker). Rows older than the window count for nothing and the next poll deletes them."""
    for n in range(5):
        key_sdk.beta.environments.work.poll(env_id, anthropic_worker_id=f"burst-{n}")
    assert key_sdk.beta.environments.work.stats(env_id).workers_polling == 5
    Poller.objects.filter(environment=environment, worker_id__in=["burst-0", "burst-1", "burst-2"]).update(
        last_polled_at=Now() - WORKERS_POLLING_WINDOW - timedelta(seconds=1)
    )
    key_sdk.beta.environments.work.poll(env_id, anthropic_worker_id="burst-4")
    assert sorted(Poller.objects.values_list("worker_id", flat=True)) == ["burst-3", "burst-4"]
    assert key_sdk.beta.environments.work.stats(env_id).workers_polling == 2
    other = Environment.objects.create(owner=environment.owner, name="other")
    Poller.objects.create(environment=other, worker_id="elsewhere", last_polled_at=Now() - timedelta(days=1))
    key_sdk.beta.environments.work.poll(env_id, anthropic_worker_id="burst-5")
    assert Poller.objects.filter(environment=other).exists()  # another environment's rows are its own polls' to prune


def test_an_unacknowledged_claim_is_reclaimed_after_reclaim_older_than_ms_and_its_credential_dies(
    key_sdk, client_for, env_id, session
):
    first = key_sdk.beta.environments.work.poll(env_id)
    assert key_sdk.beta.environments.work.poll(env_id) is None  # polled 0 s ago: not reclaimable yet
    Work.objects.filter(pk=first.id).update(polled_at=Now() - timedelta(seconds=6))
    second = key_sdk.beta.environments.work.poll(env_id)
    assert second.id == first.id and second.secret != first.secret
    old = client_for(sessions_token(first.secret))
    with pytest.raises(anthropic.ConflictError) as caught:
        old.beta.sessions.retrieve(str(session.pk))
    assert caught.value.body["error"]["details"]["reason"] == "lease_expired"
    assert key_sdk.beta.environments.work.poll(env_id, reclaim_older_than_ms=0).id == first.id


def test_a_credential_used_before_its_ack_is_told_to_acknowledge_not_that_its_lease_ended(
    key_sdk, client_for, env_id, session, notes_store, claim
):
    """A claim's credential before the ack heard "it lapsed, was reclaimed or stopped" — none of which had
    happened (helper-97). Same 409 `lease_expired` (nothing changes for the SDK), words that say what to do;
    once reclaimed, the old credential hears the ended words again."""
    claimed = claim(ack=False, heartbeat=False)
    early = client_for(claimed.token)
    calls = [
        lambda: early.beta.sessions.retrieve(claimed.session_id),
        lambda: early.beta.memory_stores.memories.create(str(notes_store.pk), path="/early.md", content="x"),
        lambda: early.beta.memory_stores.memories.list(str(notes_store.pk)),
        lambda: early.beta.environments.work.stop(claimed.work_id, environment_id=env_id),
    ]
    for call in calls:
        with pytest.raises(anthropic.ConflictError) as caught:
            call()
        error = caught.value.body["error"]
        assert error["details"]["reason"] == "lease_expired"
        assert error["message"].startswith("This work item's lease has not begun: the item was claimed but not"), error
        assert f"(POST /api/v1/environments/{env_id}/work/{claimed.work_id}/ack)" in error["message"]
    with pytest.raises(BetaHeartbeatPreconditionFailedError) as caught:  # was "claim it again with a poll"
        early.beta.environments.work.heartbeat(
            claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
        )
    assert caught.value.body["error"]["message"].startswith("This work item holds no lease yet: the item was claimed")
    assert not Memory.objects.filter(store=notes_store).exists()
    assert Work.objects.get(pk=claimed.work_id).state == "queued"
    Work.objects.filter(pk=claimed.work_id).update(polled_at=Now() - timedelta(seconds=6))
    assert key_sdk.beta.environments.work.poll(env_id).id == claimed.work_id  # reclaimed: the first claim ended
    with pytest.raises(anthropic.ConflictError) as caught:
        early.beta.sessions.retrieve(claimed.session_id)
    assert caught.value.body["error"]["message"].endswith("(it lapsed, was reclaimed or stopped).")


def test_a_lapsed_lease_requeues_the_item_for_a_new_claim_and_kills_the_old_credential(
    key_sdk, client_for, env_id, session, claim
):
    claimed = claim()
    Work.objects.filter(pk=claimed.work_id).update(lease_expires_at=Now() - timedelta(milliseconds=1))
    assert [w.state for w in key_sdk.beta.environments.work.list(env_id)] == ["queued"]
    with pytest.raises(BetaHeartbeatPreconditionFailedError) as caught:
        client_for(claimed.token).beta.environments.work.heartbeat(
            claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
        )
    assert caught.value.body["error"]["details"]["current_state"]["state"] == "queued"
    again = key_sdk.beta.environments.work.poll(env_id)
    assert again.id == claimed.work_id and sessions_token(again.secret) != claimed.token
    assert WorkClaim.objects.filter(work_id=claimed.work_id, ended_at__isnull=False).count() == 1


def test_a_stopping_item_whose_lease_lapses_ends_stopped(owner_sdk, key_sdk, env_id, session, claim):
    claimed = claim()
    key_sdk.beta.environments.work.stop(claimed.work_id, environment_id=env_id)
    Work.objects.filter(pk=claimed.work_id).update(lease_expires_at=Now() - timedelta(milliseconds=1))
    assert owner_sdk.beta.environments.work.retrieve(claimed.work_id, environment_id=env_id).state == "stopped"
    assert key_sdk.beta.environments.work.poll(env_id) is None


def test_archiving_the_session_stops_its_work_for_good(owner_sdk, key_sdk, client_for, env_id, session, claim):
    claimed = claim()
    owner_sdk.beta.sessions.archive(str(session.pk))
    row = claimed.row
    assert row.state == "stopped" and row.claim_id is None
    beat = client_for(claimed.token).beta.environments.work.heartbeat(
        claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
    )
    assert (beat.state, beat.lease_extended) == ("stopped", False)
    assert key_sdk.beta.environments.work.poll(env_id) is None


def test_the_sdks_async_poller_yields_each_queued_item_acked_and_ends_on_an_empty_poll(
    api_url, env_key, env_id, make_session, notes_store
):
    sessions = [make_session(notes_store), make_session(notes_store)]

    async def drain() -> list[tuple[str, str, str]]:
        client = AsyncAnthropic(base_url=api_url, auth_token="unused-parent-credential", max_retries=0)
        seen = []
        try:
            poller = client.beta.environments.work.poller(
                environment_id=env_id, environment_key=env_key.secret, drain=True, block_ms=None
            )
            async for item in poller:
                state = await sync_to_async(lambda pk=item.id: Work.objects.get(pk=pk).state)()
                seen.append((item.data.id, state, sessions_token(item.secret)[:6]))
        finally:
            await client.close()
            await sync_to_async(connections.close_all)()  # the helper thread's connection
        return seen

    seen = asyncio.run(drain())
    assert seen == [(str(s.pk), "starting", "mwork_") for s in sessions]
    # auto_stop: the poller stops each item once the loop body is done with it.
    assert set(Work.objects.values_list("state", flat=True)) == {"stopping"}


def test_an_overlong_worker_id_header_is_400(key_sdk, env_id, session):
    with pytest.raises(anthropic.BadRequestError) as caught:
        key_sdk.beta.environments.work.poll(env_id, anthropic_worker_id="w" * 201)
    assert "Anthropic-Worker-ID" in caught.value.body["error"]["message"]
    assert Work.objects.get(session=session).claim_id is None
