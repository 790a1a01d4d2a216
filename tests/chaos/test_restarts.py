"""PostgreSQL restarts and killed server processes under write load (SPEC §2, issue 16).

16 clients (4 per store) append notes, each with its own `Idempotency-Key`, retrying the same key after
a network error or a 503 (honouring Retry-After) until it is acknowledged. Meanwhile: a fast restart
of PostgreSQL, an immediate one (crash recovery), and `kill -9` of a server worker, twice. Then every
acknowledged note is in the database exactly once, every store's seq is contiguous, no answer was a
500, every 503 carried Retry-After, and the service took notes again within 2 s of the database.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import httpx
import pytest

from tests.chaos.harness import wait_until

pytestmark = [pytest.mark.timeout(240), pytest.mark.serial]  # recovery timed

CLIENTS = 16


class Writer(threading.Thread):
    """One client: notes `w<k>-<i>`, each retried with the same key until acknowledged (bounded)."""

    def __init__(self, k: int, url: str, owner, stop: threading.Event):
        super().__init__(daemon=True)
        self.k, self.url, self.owner, self.stop = k, url, owner, stop
        self.acked: list[str] = []
        self.statuses: Counter = Counter()
        self.missing_retry_after = 0
        self.acks_at: list[float] = []
        self.error: str | None = None

    def run(self) -> None:
        path = f"/api/v1/memories/{self.owner.store}/note"
        with httpx.Client(base_url=self.url, timeout=15) as client:
            i = 0
            while not self.stop.is_set():
                key = f"w{self.k}-{i}"
                deadline = time.monotonic() + 60
                while True:
                    if time.monotonic() > deadline:
                        self.error = f"{key} not acknowledged within 60 s"
                        return
                    try:
                        response = client.post(
                            path, json={"body_md": f"note {key}"}, headers={**self.owner.auth, "Idempotency-Key": key}
                        )
                    except httpx.HTTPError as exc:
                        self.statuses[type(exc).__name__] += 1
                        time.sleep(0.1)
                        continue
                    self.statuses[response.status_code] += 1
                    if response.status_code in (200, 201):
                        assert response.json()["data"]["client_nonce"] == key
                        self.acked.append(key)
                        self.acks_at.append(time.monotonic())
                        break
                    if response.status_code != 503:
                        self.error = f"{key}: {response.status_code} {response.text[:300]}"
                        return
                    retry_after = response.headers.get("Retry-After")
                    if retry_after is None:
                        self.missing_retry_after += 1
                    time.sleep(min(float(retry_after or 1), 1.0) / 4)  # shortened: the test's time is bounded
                i += 1


def _back_within(writers: list[Writer], since: float) -> float:
    """Seconds from `since` until some writer got its next acknowledgement."""
    firsts = [t for w in writers for t in w.acks_at if t >= since]
    return min(firsts) - since if firsts else float("inf")


def test_restarts_and_kills_lose_and_duplicate_nothing(server, cluster, owners):
    stop = threading.Event()
    writers = [Writer(k, server.url, owners[k % len(owners)], stop) for k in range(CLIENTS)]
    for writer in writers:
        writer.start()
    recovery = {}
    try:
        time.sleep(3)
        for mode in ("fast", "immediate"):
            cluster.restart(mode)  # returns once PostgreSQL accepts connections again
            back = time.monotonic()
            wait_until(lambda b=back: _back_within(writers, b) < float("inf"), 10, 0.05, f"a note after {mode}")
            recovery[mode] = _back_within(writers, back)
            time.sleep(2)
        workers_before = server.worker_pids()
        for round_ in range(2):
            victim = workers_before[0]
            os.kill(victim, signal.SIGKILL)
            killed = time.monotonic()
            wait_until(lambda k=killed: _back_within(writers, k) < float("inf"), 10, 0.05, "a note after kill -9")
            recovery[f"kill {round_ + 1}"] = _back_within(writers, killed)
            wait_until(lambda v=victim: len(server.worker_pids()) == 2 and v not in server.worker_pids(), 20, 0.1,
                       "gunicorn to replace the killed worker")  # fmt: skip
            # The next fault only once the replacement serves: killing the only serving worker while the
            # replacement boots (under a second here, more when the machine is overloaded) would measure
            # that boot.
            (replacement,) = set(server.worker_pids()) - {w for w in workers_before if w != victim}
            wait_until(lambda r=replacement: f"[{r}] [INFO] ASGI server listening" in server.log(), 20, 0.1,
                       "the replacement worker to serve")  # fmt: skip
            workers_before = server.worker_pids()
            time.sleep(2)
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=70)

    assert [w.error for w in writers if w.error] == []
    statuses = sum((w.statuses for w in writers), Counter())
    assert 500 not in statuses, statuses
    assert sum(w.missing_retry_after for w in writers) == 0
    for what, seconds in recovery.items():
        assert seconds <= 2.0, (what, seconds, recovery)

    # Every acknowledged note exactly once; seq contiguous per store; nothing but our notes.
    acked = Counter(key for w in writers for key in w.acked)
    assert all(n == 1 for n in acked.values())  # each key acknowledged once by its own writer
    assert len(acked) > CLIENTS * 5, statuses
    with cluster.connect() as conn:
        rows = conn.execute(
            "SELECT e.store_id::text, e.seq, e.client_nonce, s.entry_count FROM memories_entry e "
            "JOIN stores_store s ON s.id = e.store_id ORDER BY e.store_id, e.seq"
        ).fetchall()
    stored = Counter(nonce for _, _, nonce, _ in rows)
    assert all(stored[key] == 1 for key in acked), [k for k in acked if stored[k] != 1][:5]
    assert all(n == 1 for n in stored.values())  # unacknowledged attempts were retried to one entry, too
    by_store: dict[str, list[int]] = {}
    for store, seq, _, entry_count in rows:
        by_store.setdefault(store, []).append(seq)
        assert entry_count == len([r for r in rows if r[0] == store])
    for store, seqs in by_store.items():
        assert seqs == list(range(len(seqs))), store
