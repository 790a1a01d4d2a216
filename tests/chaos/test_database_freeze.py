"""A database that stops answering (SIGSTOP of every PostgreSQL process for 8 s; SPEC §2, issue 16).

While frozen: `/healthz` answers 200 throughout (it never touches the database), `/readyz` answers 503
within 2 s, API reads and writes answer 503 `overloaded_error` with `Retry-After` within their 10 s
budget — no 500, no hang. After SIGCONT everything recovers without restarting the server. A note cut
by the request deadline while the server was frozen is not appended after the thaw.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.chaos.harness import Server, wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.serial]  # answers timed against budgets

FREEZE_S = 8.0
API_BUDGET_S = 10.0


def timed(client: httpx.Client, method: str, path: str, **kwargs) -> tuple[int | str, float, httpx.Response | None]:
    started = time.monotonic()
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        return type(exc).__name__, time.monotonic() - started, None
    return response.status_code, time.monotonic() - started, response


def test_frozen_database_gives_503_in_budget_and_recovers_without_restart(server, cluster, owners):
    owner = owners[0]
    workers_before = sorted(server.worker_pids())
    client = httpx.Client(base_url=server.url, timeout=API_BUDGET_S + 5)
    # Warm: every worker thread has a live connection the freeze will strand.
    for i in range(20):
        body = {"body_md": f"before {i}", "client_nonce": f"before-{i}"}
        assert client.post(f"/api/v1/memories/{owner.store}/note", headers=owner.auth, json=body).status_code == 201

    health: list[tuple[int | str, float]] = []
    stop = threading.Event()

    def probe_health():
        with httpx.Client(base_url=server.url, timeout=5) as probe:
            while not stop.is_set():
                status, took, _ = timed(probe, "GET", "/healthz")
                health.append((status, took))
                time.sleep(0.2)

    prober = threading.Thread(target=probe_health, daemon=True)
    prober.start()
    cluster.freeze()
    frozen_at = time.monotonic()
    try:
        time.sleep(0.3)
        ready_status, ready_took, ready = timed(client, "GET", "/readyz")

        def api_call(i: int):
            if i % 2:
                return timed(client, "GET", f"/api/v1/memories/{owner.store}", headers=owner.auth)
            body = {"body_md": f"during {i}", "client_nonce": f"during-{i}"}
            return timed(client, "POST", f"/api/v1/memories/{owner.store}/note", headers=owner.auth, json=body)

        with ThreadPoolExecutor(max_workers=6) as pool:
            during = list(pool.map(api_call, range(6)))
        remaining = FREEZE_S - (time.monotonic() - frozen_at)
        if remaining > 0:
            time.sleep(remaining)
    finally:
        cluster.thaw()
    thawed_at = time.monotonic()
    time.sleep(1.0)
    stop.set()
    prober.join(timeout=10)

    # /healthz answered throughout.
    assert len(health) >= 20
    assert all(status == 200 and took < 1.0 for status, took in health), [
        h for h in health if h[0] != 200 or h[1] >= 1
    ][:5]
    # /readyz said 503 within 2 s.
    assert ready_status == 503 and ready_took < 2.0, (ready_status, ready_took)
    assert ready.json()["error"]["type"] == "overloaded_error"
    assert int(ready.headers["Retry-After"]) >= 1
    # API calls answered 503 overloaded_error with Retry-After within the budget.
    for status, took, response in during:
        assert status == 503, (status, took, response.text if response is not None else None)
        assert took <= API_BUDGET_S, took
        doc = response.json()
        assert doc["error"]["type"] == "overloaded_error"
        assert doc["request_id"] == response.headers["Request-Id"]
        assert int(response.headers["Retry-After"]) >= 1

    # Recovery without a restart: the same workers answer ready and take notes again.
    wait_until(lambda: client.get("/readyz").status_code == 200, 10, 0.2, "/readyz after SIGCONT")

    def note_ok():
        body = {"body_md": "after the freeze", "client_nonce": "after-1"}
        response = client.post(f"/api/v1/memories/{owner.store}/note", headers=owner.auth, json=body)
        return response.status_code in (200, 201)

    wait_until(note_ok, 10, 0.2, "a note after SIGCONT")
    assert time.monotonic() - thawed_at < 15
    assert sorted(server.worker_pids()) == workers_before
    client.close()

    # One WARNING line per fault, no traceback.
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
    assert "503 POST" in log or "503 GET" in log


def test_a_note_cut_while_the_database_is_frozen_is_not_appended_after_the_thaw(cluster, owners):
    """A note waits on its store row (another transaction holds it) when the database freezes. The request
    deadline (2 s here) cuts it: its cancel request gets no answer from the frozen server, so the watchdog
    shuts the socket down and the client gets 503. After SIGCONT the lock is released; the note's backend,
    still queued for the row, finds its client gone at its next client check (`DB_CLIENT_CHECK_INTERVAL`)
    and aborts instead of appending (with the check off, `DB_CLIENT_CHECK_INTERVAL=0`, it appends)."""
    owner = owners[1]
    note_path = f"/api/v1/memories/{owner.store}/note"

    def counts(holder) -> tuple[int, int]:
        """(entry_count, entries) of the store, read after whoever holds or waits for its row (the lock)."""
        [entry_count] = holder.execute(
            "SELECT entry_count FROM stores_store WHERE id = %s FOR UPDATE", (owner.store,)
        ).fetchone()
        [entries] = holder.execute("SELECT count(*) FROM memories_entry WHERE store_id = %s", (owner.store,)).fetchone()
        return entry_count, entries  # two statements: the second's snapshot is taken after the lock was granted

    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
    budgets = {"DB_REQUEST_DEADLINE": "2", "DB_LOCK_TIMEOUT": "30", "DB_STATEMENT_TIMEOUT": "30"}
    with (
        Server(cluster, workers=1, env=budgets) as server,
        httpx.Client(base_url=server.url, timeout=API_BUDGET_S + 5) as client,
        cluster.connect() as holder,
        cluster.connect() as probe,
    ):
        # Warm: the thread that takes the note has its connection and prepared statements, so the 2 s
        # deadline finds the note waiting for the row, not still setting up.
        warm = {"body_md": "warm", "client_nonce": "warm"}
        assert client.post(note_path, headers=owner.auth, json=warm).status_code == 201
        holder.autocommit = False
        before = counts(holder)
        with ThreadPoolExecutor(max_workers=1) as pool:
            note = pool.submit(
                timed, client, "POST", note_path, headers=owner.auth, json={"body_md": "cut while frozen"}
            )
            wait_until(
                lambda: probe.execute(waiting, ("%memories_entry%",)).fetchone()[0] == 1,
                5,
                0.02,
                "the note to wait for the store row",
            )
            cluster.freeze()
            try:
                status, took, response = note.result(timeout=API_BUDGET_S + 5)
            finally:
                cluster.thaw()
        holder.rollback()  # releases the row: the queued append, were it alive, would take it now and commit
        after = counts(holder)
        holder.rollback()
    assert status == 503, (status, took, response.text if response is not None else None)
    assert response.json()["error"]["type"] == "overloaded_error"
    assert took < 5, took  # 2 s deadline + a scan + the cancel's 0.5 s
    assert before == (1, 1)
    assert after == before
