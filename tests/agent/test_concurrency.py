"""Real parallel clients on PostgreSQL (SPEC §5): claims, heartbeats, the lease fence, the store delete guard
and the attached-stores rule hold when requests race; requests racing the delete of their environment,
session or key are 4xx, never 500; a revoke wins over a poll's later claim; deletes never deadlock."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from types import SimpleNamespace

import anthropic
import httpx
import pytest
from django.db import connection, connections, transaction
from django.db.models.expressions import RawSQL

from accounts import services as account_services
from sessions import selectors
from sessions.errors import (
    EnvironmentKeyGone,
    EnvironmentKeyNotFound,
    EnvironmentKeyRevoked,
    EnvironmentNotFound,
    LeaseExpired,
    SessionNotFound,
)
from sessions.models import Attachment, Environment, EnvironmentKey, Poller, Session, Work, WorkClaim
from sessions.services import environments as environment_services
from sessions.services import sessions as session_services
from sessions.services import work as work_services
from stores.models import Store
from tests.agent.conftest import sessions_token
from tests.factories import StoreFactory
from tests.files.test_concurrency import race
from versions import services as version_services
from versions.actors import Actor
from versions.models import Version

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_workers_polling_one_queue_claim_each_item_exactly_once(
    client_for, env_key, environment, make_session, notes_store
):
    sessions = [make_session(notes_store) for _ in range(8)]
    workers = [client_for(env_key.secret) for _ in range(2)]

    def drain(i):
        claimed = []
        while (item := workers[i].beta.environments.work.poll(str(environment.pk))) is not None:
            claimed.append(item.data.id)
        return claimed

    results = race(2, drain)
    assert not [r for r in results if isinstance(r, Exception)]
    counts = Counter(session_id for claimed in results for session_id in claimed)
    assert counts == Counter({str(s.pk): 1 for s in sessions})
    assert WorkClaim.objects.count() == 8


@pytest.mark.parametrize("credential", ["environment_key", "claims_own"])
def test_of_heartbeats_with_one_expectation_exactly_one_moves_the_heartbeat(
    client_for, env_key, environment, make_session, notes_store, claim, credential
):
    """Four heartbeats race with one expectation. With the environment key, which names no claim (workers
    believing they hold one item), exactly one succeeds and the others are 412. With the claim's own
    credential, which names the one worker holding the item, the others are that heartbeat's retries
    (docs/agent-access.md): taken in turn under the row lock, all four answer the `last_heartbeat` the server
    holds."""
    for _ in range(5):
        make_session(notes_store)
        claimed = claim(heartbeat=False)
        secret = env_key.secret if credential == "environment_key" else claimed.token
        clients = [client_for(secret) for _ in range(4)]

        def beat(i, claimed=claimed, clients=clients):
            return clients[i].beta.environments.work.heartbeat(
                claimed.work_id, environment_id=str(environment.pk), expected_last_heartbeat="NO_HEARTBEAT"
            )

        outcomes = race(4, beat)
        held = claimed.row.last_heartbeat_at.isoformat().replace("+00:00", "Z")
        answered = [o for o in outcomes if not isinstance(o, Exception)]
        refused = sorted(type(o).__name__ for o in outcomes if isinstance(o, Exception))
        if credential == "environment_key":
            assert refused == ["BetaHeartbeatPreconditionFailedError"] * 3, outcomes
            assert [o.last_heartbeat for o in answered] == [held]
        else:
            assert not refused, outcomes
            assert {o.last_heartbeat for o in answered} == {held}


def _live_claim(environment) -> tuple[Work, WorkClaim]:
    claimed = work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    work = work_services.acknowledge_work(work=claimed.work)
    return work, WorkClaim.objects.get(pk=work.claim_id)


def test_no_write_the_database_judged_after_lease_expiry_lands_in_100_trials(
    environment, make_session, notes_store, settings
):
    """Three writers per trial race a lease set to lapse a few milliseconds out. Each keeps writing until the
    fence refuses, then tries once more. Every landed version carries the database time its fence judged;
    none is at or after the expiry, every refused write left nothing, and a refusal is never followed by a
    success. The store's memory cap is lifted: on a fast machine 100 trials land more than 2,000 files, and a
    writer stopped by the cap (an exception in its thread) no longer raced the lease."""
    settings.MEMORY_STORE_MAX_MEMORIES = 1_000_000
    session = make_session(notes_store)
    work, claim = _live_claim(environment)
    actor = Actor.session(session.pk)
    expiries, outcomes = {}, []
    lock = threading.Lock()

    def writer(trial: int, writer_id: int, start: threading.Barrier) -> None:
        try:
            connection.ensure_connection()  # connected before the lease is set, so the race is the writes'
            start.wait()
            refused, n = False, 0
            while True:
                path = f"/t{trial}/w{writer_id}-{n}.md"
                n += 1
                try:
                    version_services.create_memory(
                        store=notes_store, path=path, content="x", actor=actor, fence=work_services.lease_fence(claim)
                    )
                except LeaseExpired:
                    with lock:
                        outcomes.append((trial, path, "refused"))
                    if refused:
                        return
                    refused = True
                    continue
                with lock:
                    outcomes.append((trial, path, "refused-then-landed" if refused else "landed"))
        finally:
            connection.close()

    for trial in range(100):
        start = threading.Barrier(4)
        threads = [threading.Thread(target=writer, args=(trial, i, start)) for i in range(3)]
        for thread in threads:
            thread.start()
        ms = random.uniform(20, 100)
        Work.objects.filter(pk=work.pk).update(
            lease_expires_at=RawSQL("statement_timestamp() + make_interval(secs => %s)", [ms / 1000])
        )
        expiries[trial] = Work.objects.get(pk=work.pk).lease_expires_at
        start.wait()
        for thread in threads:
            thread.join()

    landed = {path for _, path, kind in outcomes if kind == "landed"}
    assert not [o for o in outcomes if o[2] == "refused-then-landed"]
    versions = {v.path: v for v in Version.objects.filter(store=notes_store)}
    assert set(versions) == landed  # refused writes left nothing
    for path, version in versions.items():
        trial = int(path.split("/")[1][1:])
        assert version.created_at < expiries[trial], (path, version.created_at, expiries[trial])
    trials_with_writes = {int(p.split("/")[1][1:]) for p in landed}
    assert len(trials_with_writes) >= 10  # the race really happened, not only refusals
    assert Store.objects.get(pk=notes_store.pk).memory_count == len(landed)


def test_a_store_delete_racing_a_session_create_never_leaves_a_live_attachment_to_a_missing_store(
    client_for, owner_token, environment, owner
):
    client = [client_for(owner_token.secret) for _ in range(2)]
    for _ in range(6):
        store = StoreFactory(owner=owner, canonical=False, name="Raced")

        def act(i, store=store):
            if i == 0:
                return client[0].beta.sessions.create(
                    agent="a",
                    environment_id=str(environment.pk),
                    resources=[{"type": "memory_store", "memory_store_id": str(store.pk)}],
                )
            return client[1].beta.memory_stores.delete(str(store.pk))

        created, deleted = race(2, act)
        if isinstance(deleted, Exception):
            assert isinstance(deleted, anthropic.ConflictError) and not isinstance(created, Exception)
            assert deleted.body["error"]["details"]["reason"] == "store_attached"
            assert Store.objects.filter(pk=store.pk).exists()
        else:
            assert isinstance(created, anthropic.NotFoundError), created
            assert not Store.objects.filter(pk=store.pk).exists()
            assert not Attachment.objects.filter(store_id=store.pk).exists()


def test_parallel_per_work_credentials_reach_their_own_store_and_see_the_other_as_missing(
    client_for, key_sdk, environment, owner, make_session
):
    stores = [StoreFactory(owner=owner, canonical=False, name=f"Own {i}") for i in range(2)]
    tokens = []
    for store in stores:
        make_session(store)
    for _ in stores:
        work = key_sdk.beta.environments.work.poll(str(environment.pk))
        key_sdk.beta.environments.work.ack(work.id, environment_id=str(environment.pk))
        tokens.append((Work.objects.get(pk=work.id).session.attachments.get().store_id, sessions_token(work.secret)))
    agents = [client_for(token) for _, token in tokens for _ in range(2)]
    own = [store_id for store_id, _ in tokens for _ in range(2)]

    def probe(i):
        mine, other = str(own[i]), str(next(s.pk for s in stores if s.pk != own[i]))
        results = []
        for n in range(5):
            agents[i].beta.memory_stores.memories.create(mine, path=f"/agent{i}/{n}.md", content="mine")
            try:
                agents[i].beta.memory_stores.memories.create(other, path=f"/intruder{i}/{n}.md", content="no")
            except anthropic.NotFoundError as exc:
                results.append(exc.body["error"]["message"])
            else:
                results.append("landed in another session's store")
        return results

    outcomes = race(4, probe)
    assert all(r == ["Store not found."] * 5 for r in outcomes), outcomes
    for store in stores:
        paths = set(Version.objects.filter(store=store).values_list("path", flat=True))
        assert paths and all(p.startswith("/agent") for p in paths)


def _delete_heartbeat_stop(owner, worker, key, claimed, env_id: str) -> list:
    """The three racing calls: the owner deletes the session, the worker heartbeats, the key stops the item."""
    return [
        lambda: owner.beta.sessions.delete(claimed.session_id),
        lambda: worker.beta.environments.work.heartbeat(
            claimed.work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
        ),
        lambda: key.beta.environments.work.stop(claimed.work_id, environment_id=env_id),
    ]


def test_heartbeat_and_stop_racing_the_sessions_deletion_are_404_or_succeed_never_500(
    client_for, owner_token, env_key, environment, make_session, notes_store, claim
):
    """One client deletes the session while the worker heartbeats (per-work credential) and stops (environment
    key): each request either wins or answers a 4xx in the §2 shape; nothing is a 500 (SPEC §2)."""
    statuses: Counter = Counter()
    for _ in range(6):
        make_session(notes_store)
        claimed = claim(heartbeat=False)
        owner, worker, key = client_for(owner_token.secret), client_for(claimed.token), client_for(env_key.secret)
        calls = _delete_heartbeat_stop(owner, worker, key, claimed, str(environment.pk))
        for outcome in race(3, lambda i, calls=calls: calls[i]()):
            if isinstance(outcome, anthropic.APIStatusError):
                statuses[outcome.status_code] += 1
                assert outcome.status_code < 500, outcome
                assert outcome.body["error"]["type"], outcome.body
            else:
                assert not isinstance(outcome, Exception), outcome
                statuses[200] += 1
        assert not Work.objects.filter(session_id=claimed.session_id).exists()
    assert statuses[200] >= 6  # every delete landed


def test_a_work_row_deleted_after_it_was_read_is_work_not_found(environment, make_session, notes_store):
    """The lock helper's own guarantee, made deterministic: the row is read, then deleted, then locked."""
    from sessions.errors import WorkNotFound

    make_session(notes_store)
    work, _ = _live_claim(environment)
    Work.objects.filter(pk=work.pk).delete()
    with pytest.raises(WorkNotFound):
        work_services.heartbeat_work(work=work, expected_last_heartbeat=None)
    with pytest.raises(WorkNotFound):
        work_services.stop_work(work=work, force=True)


# --- racing the deletes of environments, sessions and keys (breaker 1) ---------------------------------


@pytest.fixture
def http(live_server):
    """``make(secret) -> httpx.Client`` on /api/v1 of the live server: for our own routes (environment keys)
    that the SDK has no method for. Closed afterwards."""
    made: list[httpx.Client] = []

    def make(secret: str) -> httpx.Client:
        client = httpx.Client(
            base_url=f"{live_server.url}/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=30
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_key_create_key_revoke_and_poll_racing_the_environments_delete_are_never_500(http, owner, owner_token):
    """A key created (FK IntegrityError), a key revoked (DoesNotExist on the re-read) and a poll recording its
    worker (FK violation on the poller row) while the environment is deleted: each waits for the delete's
    lock and then answers the 404 of a missing environment or key (or 401 for the deleted key), never a 500."""
    owner_api = http(owner_token.secret)
    statuses: Counter = Counter()
    for i in range(15):
        environment = environment_services.create_environment(owner=owner, name=f"e{i}")
        first, second = (environment_services.issue_environment_key(environment=environment) for _ in range(2))
        worker, env = http(first.secret), f"/environments/{environment.pk}"
        outcomes = race(
            4,
            lambda n, env=env, worker=worker, second=second, i=i: [
                lambda: owner_api.delete(env),
                lambda: owner_api.post(f"{env}/keys", json={"name": "x"}),
                lambda: owner_api.delete(f"{env}/keys/{second.key.pk}"),
                lambda: worker.get(f"{env}/work/poll", headers={"Anthropic-Worker-ID": f"w{i}"}),
            ][n](),
        )
        for name, response in zip(("delete", "key_create", "key_revoke", "poll"), outcomes, strict=True):
            assert not isinstance(response, Exception), response
            statuses[(name, response.status_code)] += 1
        assert not Environment.objects.filter(pk=environment.pk).exists()
    assert not [k for k in statuses if k[1] >= 500], statuses
    assert statuses[("delete", 200)] == 15


def test_a_key_or_poller_written_after_its_environment_was_deleted_is_a_404(owner):
    """The same three, deterministic: the environment (and key) row is read, then deleted, then used."""
    environment = environment_services.create_environment(owner=owner, name="gone")
    issued = environment_services.issue_environment_key(environment=environment)
    Environment.objects.filter(pk=environment.pk).delete()
    with pytest.raises(EnvironmentNotFound):
        environment_services.issue_environment_key(environment=environment)
    with pytest.raises(EnvironmentNotFound):
        work_services.record_poller(environment=environment, worker_id="w1")
    with pytest.raises(EnvironmentNotFound):
        environment_services.revoke_environment_key(key=issued.key)
    assert not EnvironmentKey.objects.exists() and not Poller.objects.exists()


def test_revoking_a_key_deleted_since_it_was_read_is_key_not_found(environment, env_key):
    EnvironmentKey.objects.filter(pk=env_key.key.pk).delete()
    with pytest.raises(EnvironmentKeyNotFound):
        environment_services.revoke_environment_key(key=env_key.key)


def test_session_get_with_the_work_credential_racing_the_sessions_delete_is_never_500(
    http, owner_token, environment, make_session
):
    """The credential authenticates (its claim is live), then the session is deleted before it is read:
    404, as for a missing session (it was Session.DoesNotExist, a 500)."""
    owner_api = http(owner_token.secret)
    statuses: Counter = Counter()
    for _ in range(30):
        session = make_session()
        claimed = work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
        work_services.acknowledge_work(work=claimed.work)
        agent, url = http(sessions_token(claimed.secret)), f"/sessions/{session.pk}"
        got, deleted = race(2, lambda n, agent=agent, url=url: (agent.get, owner_api.delete)[n](url))
        assert deleted.status_code == 200, deleted.text
        statuses[got.status_code] += 1
    assert set(statuses) <= {200, 401, 404}, statuses


def test_a_session_deleted_after_its_credential_authenticated_is_session_not_found(environment, make_session):
    """The same, deterministic: the claim was authenticated (live), then the session was deleted."""
    session = make_session()
    claimed = work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    work_services.acknowledge_work(work=claimed.work)
    claim = selectors.claim_by_digest(account_services.token_digest(sessions_token(claimed.secret)))
    assert claim.live
    Session.objects.filter(pk=session.pk).delete()
    with pytest.raises(SessionNotFound):
        selectors.session_for_request(SimpleNamespace(auth=claim), str(session.pk))


def test_a_blocking_poll_whose_key_is_revoked_mid_poll_is_401_and_claims_nothing(
    http, owner_token, environment, env_key
):
    """A poll with block_ms=999 started before the revoke; an item is queued after the revoke answered 200.
    The claiming transaction re-reads the key (FOR SHARE), so the revoke wins: the poll answers the 401 of a
    revoked key and the item stays unclaimed (it was claimed, with a fresh per-work credential)."""
    owner_api, worker = http(owner_token.secret), http(env_key.secret)
    env = f"/environments/{environment.pk}"
    out: dict = {}
    poller = threading.Thread(target=lambda: out.setdefault("poll", worker.get(f"{env}/work/poll?block_ms=999")))
    poller.start()
    time.sleep(0.3)
    revoked = owner_api.delete(f"{env}/keys/{env_key.key.pk}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert worker.get(f"{env}/work/stats").status_code == 401  # dead for new requests
    created = owner_api.post("/sessions", json={"agent": "a", "environment_id": str(environment.pk)})
    assert created.status_code == 200
    poller.join(10)
    assert out["poll"].status_code == 401, out["poll"].text
    assert out["poll"].json()["error"]["type"] == "authentication_error"
    assert not WorkClaim.objects.exists() and Work.objects.get().claim_id is None


def test_a_poll_by_a_key_revoked_after_it_authenticated_claims_nothing(environment, env_key, make_session):
    """The same, deterministic: the key was read (authenticated) unrevoked, then revoked, then polled with."""
    make_session()
    authenticated = EnvironmentKey.objects.get(pk=env_key.key.pk)
    environment_services.revoke_environment_key(key=EnvironmentKey.objects.get(pk=env_key.key.pk))
    assert authenticated.revoked_at is None
    with pytest.raises(EnvironmentKeyRevoked):
        work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000, key=authenticated)
    assert not WorkClaim.objects.exists()


def test_a_poll_by_a_key_deleted_after_it_authenticated_is_the_401_of_an_unknown_key(
    environment, env_key, make_session
):
    """A key deleted with its environment while a poll waited: the poll answers what a new request with that
    key gets ("Invalid environment key."), not "revoked" — nobody revoked it."""
    make_session()
    authenticated = EnvironmentKey.objects.get(pk=env_key.key.pk)
    EnvironmentKey.objects.filter(pk=authenticated.pk).delete()
    with pytest.raises(EnvironmentKeyGone) as raised:
        work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000, key=authenticated)
    assert (raised.value.status, raised.value.message) == (401, "Invalid environment key.")
    assert not WorkClaim.objects.exists()


def test_a_poll_whose_environment_owner_was_deactivated_claims_nothing(environment, env_key, make_session):
    """A waiting poll re-read its key but not its owner: deactivated mid-poll, the poll still claimed an item
    (and ended the item's previous claim). It answers the 401 a new request with the key gets now."""
    from accounts.models import User
    from sessions.errors import EnvironmentOwnerInactive

    make_session()
    authenticated = EnvironmentKey.objects.get(pk=env_key.key.pk)
    User.objects.filter(pk=environment.owner_id).update(is_active=False)
    with pytest.raises(EnvironmentOwnerInactive):
        work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000, key=authenticated)
    assert not WorkClaim.objects.exists()


def _archived_sessions(environment, make_session, n: int) -> list[Session]:
    """`n` archived sessions of `environment` in pk order, each work item claimed once (so with claims)."""
    sessions = [make_session() for _ in range(n)]
    for _ in sessions:
        work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    for session in sessions:
        session_services.archive_session(session=session)
    return sorted(sessions, key=lambda s: s.pk)


def _lock_waiters() -> int:
    """Backends of this database waiting for a lock (a fresh look, even inside a transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def test_an_environment_delete_waiting_for_a_session_delete_holds_none_of_that_sessions_work(environment, make_session):
    """The lock order, deterministic. This transaction does what DELETE /sessions/{id} does (session row,
    then its work rows) for the middle session; the environment delete runs meanwhile and must wait at that
    session's row *before* touching any work row — it used to delete the work rows first and then wait for
    the session, which the session delete's next step (its work rows) waited for: a deadlock."""
    first, middle, last = _archived_sessions(environment, make_session, 3)
    errors: list[BaseException] = []

    def delete_environment() -> None:
        try:
            environment_services.delete_environment(environment=environment)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    deleter = threading.Thread(target=delete_environment)
    with transaction.atomic():
        Session.objects.select_for_update().get(pk=middle.pk)
        deleter.start()
        deadline = time.monotonic() + 10
        while _lock_waiters() == 0:
            assert time.monotonic() < deadline, "the environment delete never waited for the session"
            time.sleep(0.02)
        # The session delete's next lock: NOWAIT raises if the environment delete holds one of these rows.
        assert list(Work.objects.select_for_update(nowait=True).filter(session=middle))
        Session.objects.filter(pk=middle.pk).delete()
    deleter.join(10)
    assert not deleter.is_alive() and not errors, errors
    assert not Environment.objects.filter(pk=environment.pk).exists()
    assert not Session.objects.filter(pk__in=[first.pk, last.pk]).exists() and not Work.objects.exists()


def test_environment_delete_racing_session_delete_never_deadlocks(http, owner, owner_token, make_session):
    """The same over HTTP: DELETE /environments/{id} racing DELETE /sessions/{id} of one of its archived
    sessions. Before, PostgreSQL reported 'deadlock detected' and one answered 503 on a healthy database."""
    owner_api = http(owner_token.secret)
    statuses: Counter = Counter()
    for i in range(20):
        environment = environment_services.create_environment(owner=owner, name=f"e{i}")
        sessions = _archived_sessions(
            environment, lambda environment=environment: make_session(environment=environment), 3
        )
        urls = (f"/environments/{environment.pk}", f"/sessions/{sessions[1].pk}")
        env_del, session_del = race(2, lambda n, urls=urls: owner_api.delete(urls[n]))
        statuses[("environment", env_del.status_code)] += 1
        statuses[("session", session_del.status_code)] += 1
    assert statuses[("environment", 200)] == 20, statuses
    assert set(statuses) <= {("environment", 200), ("session", 200), ("session", 404)}, statuses


def test_archiving_a_session_dates_its_stop_after_every_fenced_write_it_waited_for(
    environment, make_session, notes_store, monkeypatch
):
    """The archive read the database time before it locked the work rows: a fenced write that took the work
    lock in between committed with a later time than the item's `stopped_at` (a tester). It reads the time
    after the locks now; the test widens that gap and writes in it."""
    session = make_session(notes_store)
    work, claim = _live_claim(environment)
    real_now, in_gap = session_services.db_now, threading.Event()

    def slow_now():
        now = real_now()
        in_gap.set()
        time.sleep(0.5)  # a fenced write gets in here when the time is read before the work locks
        return now

    monkeypatch.setattr(session_services, "db_now", slow_now)
    outcome = []

    def write():
        try:
            in_gap.wait(5)
            version_services.create_memory(
                store=notes_store,
                path="/in-the-gap.md",
                content="x",
                actor=Actor.session(session.pk),
                fence=work_services.lease_fence(claim),
            )
            outcome.append("landed")
        except LeaseExpired:
            outcome.append("refused")
        finally:
            connection.close()

    writer = threading.Thread(target=write)
    writer.start()
    session_services.archive_session(session=Session.objects.get(pk=session.pk))
    writer.join()
    stopped = Work.objects.get(pk=work.pk).stopped_at
    landed = list(Version.objects.filter(store=notes_store, session_id=session.pk))
    assert outcome and all(version.created_at < stopped for version in landed), (outcome, stopped, landed)
