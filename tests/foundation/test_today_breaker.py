"""Hostile review of three changes of 2026-12-02, with real PostgreSQL and real parallel clients.

1. The request deadline cut (`config.database.Watchdog`): a cut write answers 503 and never commits later;
   a late cancel never hurts the thread's next request except as a clean 503 with nothing written; `cuts`
   counts the connections cut.
2. Pipelined store locks (`CompiledQuery.many`, `lock_stores_in_order`): same rows as one lock per id,
   locks in id order and held, no deadlock, a lock timeout is a clean error on a usable connection.
3. A Content-Type Django cannot take is a 400 (`config.middleware.content_type_problem`), also through
   real gunicorn.

What held is a plain test. The three that broke (xfail until 2026-12-03) pass since the cut waits a grace
for a request whose cancel the server took, and cancels once more after shutting the socket down.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import uuid

import psycopg
import pytest
from django.db import OperationalError, connection, connections, transaction

import config.asgi as front
from config import database
from memories.models import Entry
from stores.models import Store
from stores.services import _LOCK_STORE, lock_stores_in_order
from tests.chaos.conftest import cluster, owners, template  # noqa: F401  (the chaos suite's fixtures)
from tests.chaos.harness import Server
from tests.factories import StoreFactory, UserFactory
from tests.foundation.test_faults import http_scope, run_asgi
from versions.models import Memory

pytestmark = pytest.mark.django_db(transaction=True)


# --- helpers ---------------------------------------------------------------------------------------


def pg_params() -> dict:
    """libpq parameters of the test database, for connections of our own (holders, probes)."""
    wanted = ("host", "port", "user", "dbname")
    return {k: v for k, v in connection.get_connection_params().items() if k in wanted}


def send(method: str, path: str, secret: str, payload: dict | None = None) -> tuple[int, dict]:
    """One JSON request through the ASGI front (`config.asgi.application`); (status, decoded body)."""
    body = json.dumps(payload).encode() if payload is not None else b""
    head = [(b"host", b"testserver"), (b"authorization", f"Bearer {secret}".encode())]
    if payload is not None:
        head += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    start, message = run_asgi(http_scope(method, path, head), [{"type": "http.request", "body": body}])
    return start["status"], json.loads(message["body"])


def waiting_for_lock(probe, like: str) -> int:
    """How many backends of this test's database wait on a lock running a statement whose text matches
    `like` (another database's waiters on a shared server — a parallel run, a helper — are not ours)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
        " AND datname = current_database()"
    )
    return probe.execute(query, (like,)).fetchone()[0]


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def front_pool(monkeypatch):
    """``make(n)``: the front's Django calls on `n` threads of our own, and a fresh watchdog scanning every
    20 ms (its `cuts` is this test's alone); connections closed after."""
    pools = []
    watchdog = database.Watchdog(interval=0.02)
    monkeypatch.setattr(database, "watchdog", watchdog)

    def make(n: int):
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=n)
        monkeypatch.setattr(front, "_pool", pool)
        pools.append(pool)
        return watchdog

    yield make
    watchdog.stop()
    for pool in pools:  # every thread closes its connection (a cut the cancel alone ended leaves it open)
        threads = pool._max_workers
        everyone = threading.Barrier(threads)

        def close(everyone=everyone):
            connections.close_all()
            everyone.wait(timeout=10)  # holds this thread, so each task runs on a thread of its own

        for _ in range(threads):
            pool.submit(close)
        pool.shutdown(wait=True)


@pytest.fixture
def cast(make_client):
    owner = UserFactory(handle="owner")
    store = StoreFactory(owner=owner)
    return {"owner": owner, "store": store, "secret": make_client(owner).secret}


@pytest.fixture
def server_budgets(settings):
    """The request budgets as a server process applies them (`apply_request_budgets`), lock and statement
    timeouts out of the way: what matters here is `client_connection_check_interval` (0.25 s)."""
    settings.DB_LOCK_TIMEOUT = 30
    settings.DB_STATEMENT_TIMEOUT = 30
    saved = dict(connection.settings_dict["OPTIONS"])
    database.apply_request_budgets()
    yield
    connection.settings_dict["OPTIONS"] = saved


def locked_counts(holder, store_pk) -> tuple[int, int]:
    """(entry_count, entries) read after whoever holds or waits for the store row (locking it again)."""
    [entry_count] = holder.execute(
        "SELECT entry_count FROM stores_store WHERE id = %s FOR UPDATE", (store_pk,)
    ).fetchone()
    [entries] = holder.execute("SELECT count(*) FROM memories_entry WHERE store_id = %s", (store_pk,)).fetchone()
    holder.rollback()
    return entry_count, entries


def locked_memory_count(holder, store_pk) -> int:
    """The store's memory_count read after whoever holds or waits for its row (locking it again)."""
    [count] = holder.execute("SELECT memory_count FROM stores_store WHERE id = %s FOR UPDATE", (store_pk,)).fetchone()
    holder.rollback()
    return count


# --- 1. the request deadline cut ------------------------------------------------------------------


def test_many_notes_cut_at_once_all_answer_503_and_none_is_appended(cast, front_pool, settings, server_budgets):
    """Six notes on six cold threads queue behind one held store row; the deadline cuts all six at once (six
    cut threads): each answers 503 overloaded_error, six cuts started, and releasing the row appends nothing.
    With the server's budgets: without the client check, one cut note in three runs is still queued for
    the row after its 503 (see the xfail below)."""
    watchdog = front_pool(6)
    settings.DB_REQUEST_DEADLINE = 0.5
    store, secret = cast["store"], cast["secret"]
    path = f"/api/v1/memories/{store.pk}/note"
    with psycopg.connect(**pg_params()) as holder, psycopg.connect(**pg_params(), autocommit=True) as probe:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as clients:
            futures = [clients.submit(send, "POST", path, secret, {"body_md": f"n{i}"}) for i in range(6)]
            answers = [f.result(timeout=20) for f in futures]
        wait_until(lambda: waiting_for_lock(probe, "%memories_entry%") == 0, 2, "the cut notes' backends to go")
        holder.rollback()
        after = locked_counts(holder, store.pk)
    assert [status for status, _ in answers] == [503] * 6, answers
    assert {body["error"]["type"] for _, body in answers} == {"overloaded_error"}
    assert after == (0, 0)
    assert watchdog.started == 6


def test_a_note_with_a_nonce_retried_after_its_cut_gives_exactly_one_entry(cast, front_pool, settings):
    """The client's rule for a 503 on a write: retry with the same client_nonce. The cut note never
    appended, so the retry appends it (created, not a replay) and the store holds exactly one entry."""
    front_pool(1)
    settings.DB_REQUEST_DEADLINE = 0.5
    store, secret = cast["store"], cast["secret"]
    path = f"/api/v1/memories/{store.pk}/note"
    note = {"body_md": "once", "client_nonce": "nonce-1"}
    with psycopg.connect(**pg_params()) as holder:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        cut_status, _ = send("POST", path, secret, note)
        holder.rollback()
        assert locked_counts(holder, store.pk) == (0, 0)
    settings.DB_REQUEST_DEADLINE = 7.0
    retry_status, retried = send("POST", path, secret, note)
    again_status, again = send("POST", path, secret, note)
    assert cut_status == 503
    assert retry_status == 201 and retried["meta"]["replayed"] is False, retried
    assert again_status == 200 and again["meta"]["replayed"] is True, again
    assert list(Entry.objects.filter(store=store).values_list("body_md", flat=True)) == ["once"]


def test_a_file_create_cut_while_its_statement_waits_for_the_store_row_is_never_written(cast, front_pool, settings):
    """POST memory_stores/{id}/memories: the one-statement CTE queues for the store row (FOR UPDATE in its
    first CTE); the deadline cuts it: 503, and once the row is released no memory, version or count moves."""
    front_pool(1)
    settings.DB_REQUEST_DEADLINE = 0.5
    store, secret = cast["store"], cast["secret"]
    path = f"/api/v1/memory_stores/{store.pk}/memories"
    with psycopg.connect(**pg_params()) as holder:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        status, body = send("POST", path, secret, {"path": "/cut.md", "content": "never"})
        holder.rollback()
        count = locked_memory_count(holder, store.pk)
    assert status == 503, body
    assert count == 0
    assert not Memory.objects.filter(store_id=store.pk).exists()


def test_a_file_create_cut_in_its_locked_retry_is_never_written(cast, front_pool, settings):
    """The stale path: the CTE waits behind a writer that changes the store row (ctid moves), so it writes
    nothing and the service retries in `transaction.atomic` after `lock_store` — which a second holder,
    queued behind the first, now makes wait. The deadline cuts it there: 503, nothing written."""
    front_pool(1)
    settings.DB_REQUEST_DEADLINE = 1.5
    store, secret = cast["store"], cast["secret"]
    path = f"/api/v1/memory_stores/{store.pk}/memories"
    with (
        psycopg.connect(**pg_params()) as first,
        psycopg.connect(**pg_params()) as second,
        psycopg.connect(**pg_params(), autocommit=True) as probe,
        concurrent.futures.ThreadPoolExecutor(max_workers=2) as clients,
    ):
        first.execute("UPDATE stores_store SET memory_count = memory_count WHERE id = %s", (store.pk,))
        write = clients.submit(send, "POST", path, secret, {"path": "/stale.md", "content": "never"})
        wait_until(lambda: waiting_for_lock(probe, "%WITH locked%") == 1, 5, "the CTE to queue for the row")
        queued = clients.submit(
            lambda: second.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,)).fetchone()
        )
        wait_until(lambda: waiting_for_lock(probe, "SELECT 1 FROM stores_store%") == 1, 5, "the second holder")
        first.commit()  # the CTE gets the row first, finds it stale; then the second holder takes it
        queued.result(timeout=5)
        wait_until(lambda: waiting_for_lock(probe, "%FOR NO KEY UPDATE OF%") == 1, 5, "the retry's lock_store to wait")
        status, body = write.result(timeout=10)
        second.rollback()
        count = locked_memory_count(second, store.pk)
    assert status == 503, body
    assert count == 0
    assert not Memory.objects.filter(store_id=store.pk).exists()


def _slow_cancel(monkeypatch, delay: float) -> None:
    """The cancel request takes `delay` seconds to reach PostgreSQL (a slow network, a busy postmaster)."""
    real = database._cancel

    def slow(cancel, timeout):
        time.sleep(delay)
        return real(cancel, timeout)

    monkeypatch.setattr(database, "_cancel", slow)


def _slow_cancel_reply(monkeypatch, delay: float) -> None:
    """The cancel request reaches PostgreSQL at once, but its answer takes `delay` seconds to come back."""
    real = database._cancel

    def slow(cancel, timeout):
        taken = real(cancel, timeout)
        time.sleep(delay)
        return taken

    monkeypatch.setattr(database, "_cancel", slow)


def _statement_after_the_cancel(store_pk, watchdog) -> str:
    """On a thread of its own: arm a 0.05 s deadline, stay idle between statements past it (the cut's cancel
    finds the backend idle), then send a write that queues for the store row, as a request past its deadline
    sending its next statement would. Returns how that write ended."""

    def run():
        mine = connections["default"]
        mine.ensure_connection()
        token = watchdog.arm(mine, 0.05)
        try:
            wait_until(lambda: watchdog.started == 1, 5, "the cut to start")
            time.sleep(0.1)  # the cancel has reached the idle backend; its answer is on its way
            with mine.cursor() as cursor:
                cursor.execute("UPDATE stores_store SET entry_count = entry_count + 1 WHERE id = %s", [store_pk])
            return "written"
        except OperationalError:
            return "OperationalError"
        finally:
            watchdog.disarm(token)

    return _in_thread(run)


def test_a_statement_sent_while_the_cuts_cancel_is_answered_never_commits(cast, monkeypatch):
    """A request between statements at its cut: the cancel finds the backend idle, and the write it sends next
    queues for a held row. Without the client check (test settings), the cut's second cancel, sent after the
    socket is shut down, is what keeps it from committing once the row is released (xfail until 2026-12-03)."""
    _slow_cancel_reply(monkeypatch, 0.4)
    watchdog = database.Watchdog(interval=0.02)
    store = cast["store"]
    try:
        with psycopg.connect(**pg_params()) as holder, psycopg.connect(**pg_params(), autocommit=True) as probe:
            holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                job = pool.submit(_statement_after_the_cancel, store.pk, watchdog)
                outcome = job.result(timeout=10)
            time.sleep(0.3)
            still_queued = waiting_for_lock(probe, "UPDATE stores_store%")
            holder.rollback()
            count = locked_counts(holder, store.pk)[0]
    finally:
        watchdog.stop()
    assert outcome == "OperationalError"
    assert (still_queued, count) == (0, 0)


def test_the_client_check_stops_a_statement_sent_while_the_cuts_cancel_is_answered(cast, monkeypatch, server_budgets):
    """The same window with the server's budgets: the queued write finds its client gone at its next client
    check (0.25 s) and aborts, so nothing commits once the row is released (the documented backstop)."""
    _slow_cancel_reply(monkeypatch, 0.4)
    watchdog = database.Watchdog(interval=0.02)
    store = cast["store"]
    try:
        with psycopg.connect(**pg_params()) as holder, psycopg.connect(**pg_params(), autocommit=True) as probe:
            holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
            outcome = _statement_after_the_cancel(store.pk, watchdog)
            wait_until(lambda: waiting_for_lock(probe, "UPDATE stores_store%") == 0, 2, "the queued write to abort")
            holder.rollback()
            count = locked_counts(holder, store.pk)[0]
    finally:
        watchdog.stop()
    assert outcome == "OperationalError"
    assert count == 0


def _note_ending_just_after_its_deadline(store, secret, holder, watchdog) -> tuple[int, dict]:
    """A note queued behind `holder`'s row lock past its deadline; the lock is released the moment the
    watchdog has started the cut (cancel not landed yet), so the note appends and its request ends."""
    path = f"/api/v1/memories/{store.pk}/note"
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as clients:
        note = clients.submit(send, "POST", path, secret, {"body_md": "just in time"})
        wait_until(lambda: watchdog.started == 1, 5, "the watchdog to start the cut")
        holder.rollback()
        return note.result(timeout=10)


@pytest.mark.serial  # timed
def test_a_cancel_landing_after_the_request_ended_fails_the_next_request_only_as_a_clean_503(
    cast, front_pool, settings, monkeypatch
):
    """The documented late-cancel case, made wide: request A ends (201) before its cut's cancel lands; the
    thread's next request B (a note with a nonce, its own deadline far away) is waiting on the row when it
    does. B answers 503 with nothing written, and B's retry with its nonce appends exactly once."""
    watchdog = front_pool(1)
    _slow_cancel(monkeypatch, 0.6)
    settings.DB_REQUEST_DEADLINE = 0.3
    store, secret = cast["store"], cast["secret"]
    path = f"/api/v1/memories/{store.pk}/note"
    with psycopg.connect(**pg_params()) as holder:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        status_a, _ = _note_ending_just_after_its_deadline(store, secret, holder, watchdog)
        settings.DB_REQUEST_DEADLINE = 7.0
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        started = time.monotonic()
        status_b, body_b = send("POST", path, secret, {"body_md": "b", "client_nonce": "b"})
        took_b = time.monotonic() - started
        holder.rollback()
        after = locked_counts(holder, store.pk)
    assert status_a == 201
    assert status_b == 503 and body_b["error"]["type"] == "overloaded_error", body_b
    assert took_b < 2.0  # the late cancel, not B's own deadline
    assert after == (1, 1)  # A's entry only
    assert send("POST", path, secret, {"body_md": "b", "client_nonce": "b"})[0] == 201
    assert Entry.objects.filter(store=store).count() == 2


def test_a_request_that_ends_before_its_cut_lands_is_not_counted_as_cut(cast, front_pool, settings, monkeypatch):
    """A note that appends and answers 201 while its cut's cancel is still on its way: the cut started, but no
    socket is shut down, so `cuts` (connections cut) stays 0 (xfail until 2026-12-03)."""
    watchdog = front_pool(1)
    _slow_cancel(monkeypatch, 0.4)
    settings.DB_REQUEST_DEADLINE = 0.3
    store, secret = cast["store"], cast["secret"]
    with psycopg.connect(**pg_params()) as holder:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        status, _ = _note_ending_just_after_its_deadline(store, secret, holder, watchdog)
    time.sleep(0.6)  # the cut thread finishes: cancel sent to an idle backend, shutdown skipped (disarmed)
    assert status == 201
    assert Entry.objects.filter(store=store).count() == 1
    assert watchdog.cuts == 0


def test_disarm_means_no_later_socket_shutdown(cast, front_pool, settings, monkeypatch):
    """After a request ended (disarmed) while its cut was in flight, the thread's connection is not shut:
    the next request on the thread runs on the same backend (no reconnect) and succeeds."""
    watchdog = front_pool(1)
    _slow_cancel(monkeypatch, 0.2)
    settings.DB_REQUEST_DEADLINE = 0.3
    store, secret = cast["store"], cast["secret"]
    with psycopg.connect(**pg_params()) as holder:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
        status, _ = _note_ending_just_after_its_deadline(store, secret, holder, watchdog)
    pid = front._pool.submit(lambda: connections["default"].connection.info.backend_pid).result()
    time.sleep(0.5)  # the cut thread is done
    settings.DB_REQUEST_DEADLINE = 7.0
    assert status == 201
    assert send("GET", f"/api/v1/memories/{store.pk}/wake", secret)[0] == 200
    assert front._pool.submit(lambda: connections["default"].connection.info.backend_pid).result() == pid


@pytest.fixture
def slow_commits():
    """Every commit in the test database sleeps 0.1 s inside its commit (``commit_delay``, with no siblings
    needed): a statement that got its lock is then committing, where a cancel cannot stop it, for a window
    wide enough to put the deadline's scan in. Applies to connections opened from now on."""
    dbname = pg_params()["dbname"]
    with psycopg.connect(**pg_params(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" SET commit_delay = 100000')
        admin.execute(f'ALTER DATABASE "{dbname}" SET commit_siblings = 0')
        try:
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{dbname}" RESET commit_delay')
            admin.execute(f'ALTER DATABASE "{dbname}" RESET commit_siblings')


def test_a_note_committing_as_the_deadline_falls_is_never_answered_503(cast, front_pool, settings, slow_commits):
    """A note whose commit is under way (0.1 s, `commit_delay`) when its deadline falls: the cancel cannot stop
    a commit, and the cut then waits its grace for the request to end instead of shutting the socket down
    under it, so the note answers 201 — never 503 for an entry that was appended (xfail until 2026-12-03)."""
    front_pool(1)
    store, secret = cast["store"], cast["secret"]
    assert send("GET", f"/api/v1/memories/{store.pk}/wake", secret)[0] == 200  # the thread's connection: slow commits
    settings.DB_REQUEST_DEADLINE = 0.5
    outcomes = []
    with psycopg.connect(**pg_params()) as holder:
        for attempt in range(6):  # the scan's phase varies: a few tries put it inside the 0.1 s commit
            before = locked_counts(holder, store.pk)[1]
            holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,))
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as clients:
                path = f"/api/v1/memories/{store.pk}/note"
                note = clients.submit(send, "POST", path, secret, {"body_md": f"edge {attempt}"})
                time.sleep(0.45)  # the note takes the row and commits across the deadline (0.45 s .. 0.55 s)
                holder.rollback()
                status, _ = note.result(timeout=10)
            outcomes.append((status, locked_counts(holder, store.pk)[1] - before))
    assert all(outcome in {(201, 1), (503, 0)} for outcome in outcomes), outcomes


# --- 2. pipelined store locks ---------------------------------------------------------------------


def _in_thread(fn):
    """Run `fn` on a thread of its own (its own Django connection, closed after); return its result."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:

        def run():
            try:
                return fn()
            finally:
                connections.close_all()

        return pool.submit(run).result(timeout=60)


def test_many_with_duplicates_and_unknown_ids_matches_first_per_id():
    stores = [StoreFactory(owner=UserFactory()) for _ in range(3)]
    ids = [stores[1].pk, uuid.uuid4(), stores[1].pk, stores[0].pk, stores[2].pk, uuid.uuid4()]
    with transaction.atomic():
        pipelined = _LOCK_STORE.many({"pk": pk} for pk in ids)
        one_by_one = [_LOCK_STORE.first(pk=pk) for pk in ids]
    assert [rows[0].pk if rows else None for rows in pipelined] == [s.pk if s else None for s in one_by_one]
    assert [len(rows) for rows in pipelined] == [1, 0, 1, 1, 1, 0]
    with transaction.atomic():
        assert lock_stores_in_order([str(stores[0].pk), stores[0].pk]).keys() == {stores[0].pk}


def test_parallel_lockers_over_overlapping_store_sets_never_deadlock():
    """Four threads, each repeatedly locking an overlapping set given in a different order and holding it
    a moment: every transaction commits (no deadlock_detected), within the test's time."""
    stores = [StoreFactory(owner=UserFactory()).pk for _ in range(5)]
    sets = [stores[0:4], stores[::-1], stores[1:5][::-1], [stores[4], stores[0], stores[2]]]
    barrier = threading.Barrier(len(sets))
    errors, done = [], []

    def locker(ids):
        try:
            for _ in range(15):
                barrier.wait(timeout=30)
                with transaction.atomic():
                    with connection.cursor() as cursor:
                        cursor.execute("SET LOCAL lock_timeout = '10s'")
                    locked = lock_stores_in_order(ids)
                    assert sorted(locked) == sorted(ids)
                    time.sleep(0.005)
                done.append(1)
        except Exception as exc:  # reported below
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=locker, args=(ids,)) for ids in sets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not errors, errors
    assert len(done) == 15 * len(sets)


def test_the_server_takes_the_pipelined_locks_in_id_order():
    """While the middle store of three is held elsewhere, the pipeline holds the first (lower id) and has
    not taken the last: the statements run one after another in id order."""
    first, middle, last = sorted(StoreFactory(owner=UserFactory()).pk for _ in range(3))
    with psycopg.connect(**pg_params()) as holder, psycopg.connect(**pg_params(), autocommit=True) as probe:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (middle,))

        def lock_all():
            with transaction.atomic():
                return sorted(lock_stores_in_order([last, middle, first]))

        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            job = pool.submit(lambda: _in_thread(lock_all))
            wait_until(lambda: waiting_for_lock(probe, "%FOR NO KEY UPDATE OF%") == 1, 5, "the pipeline to wait")
            nowait = "SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE NOWAIT"
            with pytest.raises(psycopg.errors.LockNotAvailable):
                probe.execute(nowait, (first,))
            assert probe.execute(nowait, (last,)).fetchone() == (1,)  # autocommit: released at once
            holder.rollback()
            assert job.result(timeout=10) == [first, middle, last]


@pytest.mark.parametrize("position", ["first", "middle"])
def test_a_lock_timeout_in_the_pipeline_is_a_clean_error_and_the_connection_stays_usable(position):
    """`lock_timeout` set in the transaction: the pipeline's wait on a held store raises OperationalError
    (LockNotAvailable), the transaction rolls back, and the same connection then runs the pipelined lock
    again (its prepared statement intact), on a fresh connection too (the failed pipeline was its first)."""
    ids = sorted(StoreFactory(owner=UserFactory()).pk for _ in range(3))
    held = ids[0] if position == "first" else ids[1]
    free = [pk for pk in ids if pk != held]

    def attempt():
        connections["default"].close()  # the failing pipeline is this connection's first use of the lock
        outcome = {}
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '200ms'")
                lock_stores_in_order(ids)
        except OperationalError as exc:
            outcome["error"] = type(exc.__cause__).__name__
        raw = connection.connection
        outcome["pipeline"] = raw._pipeline
        outcome["status"] = raw.info.transaction_status.name
        with transaction.atomic():
            outcome["again"] = sorted(lock_stores_in_order(free))
            outcome["one"] = _LOCK_STORE.first(pk=free[-1]).pk
        return outcome

    with psycopg.connect(**pg_params()) as holder:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (held,))
        outcome = _in_thread(attempt)
        holder.rollback()
    assert outcome["error"] == "LockNotAvailable", outcome
    assert outcome["pipeline"] is None and outcome["status"] == "IDLE"
    assert outcome["again"] == free
    assert outcome["one"] == free[-1]


def test_a_store_deleted_while_the_pipeline_waits_is_simply_missing():
    ids = sorted(StoreFactory(owner=UserFactory()).pk for _ in range(3))
    doomed = ids[1]
    with psycopg.connect(**pg_params()) as holder, psycopg.connect(**pg_params(), autocommit=True) as probe:
        holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (doomed,))

        def lock_all():
            with transaction.atomic():
                return sorted(lock_stores_in_order(ids))

        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            job = pool.submit(lambda: _in_thread(lock_all))
            wait_until(lambda: waiting_for_lock(probe, "%FOR NO KEY UPDATE OF%") == 1, 5, "the pipeline to wait")
            holder.execute("DELETE FROM stores_canonicalstore WHERE store_id = %s", (doomed,))
            holder.execute("DELETE FROM stores_store WHERE id = %s", (doomed,))
            holder.commit()
            assert job.result(timeout=10) == [ids[0], ids[2]]
    assert not Store.objects.filter(pk=doomed).exists()


def test_a_watchdog_cut_in_the_middle_of_the_pipeline_is_an_operational_error_and_locks_nothing_after():
    """The request deadline cutting a pipelined lock wait: OperationalError, every lock released."""
    ids = sorted(StoreFactory(owner=UserFactory()).pk for _ in range(3))
    watchdog = database.Watchdog(interval=0.02)

    def attempt():
        mine = connections["default"]
        mine.ensure_connection()
        token = watchdog.arm(mine, 0.3)
        try:
            with transaction.atomic():
                lock_stores_in_order(ids)
        except OperationalError as exc:
            return type(exc).__name__
        finally:
            watchdog.disarm(token)
        return "no error"

    try:
        with psycopg.connect(**pg_params()) as holder, psycopg.connect(**pg_params(), autocommit=True) as probe:
            holder.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (ids[1],))
            assert _in_thread(attempt) == "OperationalError"
            nowait = "SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE NOWAIT"
            assert probe.execute(nowait, (ids[0],)).fetchone() == (1,)
            holder.rollback()
            wait_until(lambda: waiting_for_lock(probe, "%FOR NO KEY UPDATE OF%") == 0, 5, "no queued lock")
            assert probe.execute(nowait, (ids[2],)).fetchone() == (1,)
    finally:
        watchdog.stop()
    assert watchdog.started == 1


def test_executemany_through_prepared_cursor_is_called_only_by_the_pipelined_lock():
    """The override returns every statement's rows by default; no other caller of `prepared_cursor` runs
    executemany, so nothing else changed (a grep of the code the server imports)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    callers = sorted(
        str(path.relative_to(root))
        for path in root.glob("*/**/*.py")
        if ".venv" not in path.parts and "tests" not in path.parts and "executemany(" in path.read_text()
    )
    assert callers == ["config/compiled.py"], callers


# --- 3. a bad Content-Type through real gunicorn --------------------------------------------------


SERVED_CONTENT_TYPES = [
    b"application/json; a*=bogus''%41",
    b"application/json; charset=rot13",
    b"application/json; charset=idna",
    b"application/json; charset=",
    b"application/json; charset=bogus",
    b"application/json; charset=\xfctf-8",  # a latin-1 byte on the wire
    b"application/json; charset=utf-8; charset=rot13",
    b"application/json; charset*0*=utf-8''rot; charset*1=13",
    b"application/json; charset=utf-16",
    b"application/json; charset=unicode_escape",
    b"application/x-www-form-urlencoded; charset=utf-32",
    b"multipart/form-data; boundary=",
    b"multipart/form-data; boundary=\xe9\xe9",
    b"multipart/form-data; boundary*=bogus''%41",
    b"text/plain; charset=" + b"a" * 4000,
    b"; charset=rot13",
    b"application/json;;;",
]


def _raw_request(port: int, method: str, path: str, headers: list[bytes], body: bytes) -> tuple[int, dict, bytes]:
    """One HTTP/1.1 request on a socket of its own, header bytes exactly as given; (status, headers, body)."""
    import socket

    head = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close", *headers]
    head.append(b"Content-Length: %d" % len(body))
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    top, _, payload = raw.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    status = int(lines[0].split()[1])
    answer_headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        answer_headers[name.strip().lower()] = value.strip()
    return status, answer_headers, payload


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_bad_content_types_through_gunicorn_are_4xx_json_with_request_id_and_write_nothing(cluster, owners):  # noqa: F811
    """`bin/serve`'s gunicorn against a cluster of its own: every method on lane and non-lane API routes,
    the back office and /mcp, with Content-Types the unit tests did not send: never a 5xx, a JSON error
    with Request-Id on API and /mcp (the back office may answer its own HTML), and nothing written."""
    owner = owners[0]
    auth = f"Authorization: Bearer {owner.secret}".encode()
    note = b'{"body_md": "never written"}'
    routes = [
        ("POST", f"/api/v1/memories/{owner.store}/note", note),
        ("GET", f"/api/v1/memories/{owner.store}/wake", b""),
        ("GET", "/api/v1/memories", b""),
        ("POST", "/api/v1/memories", b"{}"),
        ("PATCH", f"/api/v1/memories/{owner.store}", b'{"name": "renamed"}'),
        ("PUT", f"/api/v1/memories/{owner.store}", b'{"name": "renamed"}'),
        ("DELETE", f"/api/v1/memories/{owner.store}", b""),
        ("POST", f"/api/v1/memory_stores/{owner.store}/memories", b'{"path": "/x.md", "content": "x"}'),
        ("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'),
        ("POST", "/backoffice/login/", b"username=chaos-0&password=x"),
        ("GET", "/backoffice/", b""),
    ]
    count = (
        "SELECT (SELECT count(*) FROM memories_entry), (SELECT count(*) FROM stores_store),"
        " (SELECT count(*) FROM versions_memory), (SELECT string_agg(name, ',' ORDER BY id) FROM stores_store)"
    )
    from config.middleware import content_type_problem

    bad = []
    with Server(cluster, workers=1) as server, cluster.connect() as db:
        port = int(server.url.rsplit(":", 1)[1])
        for content_type in SERVED_CONTENT_TYPES:
            refused = content_type_problem(content_type.decode("latin-1")) is not None
            for method, path, body in routes if refused else routes[:3] + routes[-3:]:  # tolerated: no deletes
                headers = [b"Content-Type: " + content_type, b"Accept: application/json, text/event-stream"]
                if not path.startswith("/backoffice"):
                    headers.append(auth)
                before = db.execute(count).fetchone()
                status, answer, payload = _raw_request(port, method, path, headers, body)
                api = not path.startswith("/backoffice")
                json_error = answer.get(b"content-type", b"").startswith(b"application/json")
                if status >= 500 or b"request-id" not in answer or (api and status >= 400 and not json_error):
                    bad.append((content_type, method, path, status, payload[:120]))
                if refused and (status != 400 or db.execute(count).fetchone() != before):
                    bad.append(("not refused", content_type, method, path, status, payload[:120]))
        log = server.log()
    assert not bad, bad
    assert "Traceback" not in log, log[-3000:]
