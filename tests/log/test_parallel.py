"""Parallel agents over real HTTP (SPEC §4 Entries): no gap, no duplicate, nonces hold under concurrent retries.

The live server (pytest-django `live_server`, a threaded WSGI server) runs the real stack against
PostgreSQL; each request thread has its own database connection, so the appends truly race.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from accounts import services as account_services
from memories.models import Entry
from tests.factories import StoreFactory, UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CLIENTS = 16
NOTES_EACH = 200


@pytest.fixture
def agent():
    """A store owner and a bearer secret for it (committed, so the live server sees both)."""
    owner = UserFactory(handle="parallel-owner")
    store = StoreFactory(owner=owner)
    secret = account_services.issue_token(user=owner, scopes=account_services.ALL_SCOPES).secret
    return store, {"Authorization": f"Bearer {secret}"}


def test_sixteen_parallel_clients_append_3200_notes_without_gap_or_duplicate(live_server, agent):
    store, headers = agent
    note_url = f"{live_server.url}/api/v1/memories/{store.pk}/note"
    start = threading.Barrier(CLIENTS)

    def client_run(client_no: int) -> list[int]:
        seqs = []
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for i in range(NOTES_EACH):
                response = http.post(note_url, json={"body_md": f"client {client_no} note {i}"})
                assert response.status_code == 201, response.text
                seqs.append(response.json()["data"]["seq"])
        return seqs

    with ThreadPoolExecutor(CLIENTS) as pool:
        returned = [seq for seqs in pool.map(client_run, range(CLIENTS)) for seq in seqs]

    total = CLIENTS * NOTES_EACH
    assert sorted(returned) == list(range(total))
    rows = list(Entry.objects.filter(store=store).values_list("seq", "body_md"))
    assert sorted(seq for seq, _ in rows) == list(range(total))
    bodies = sorted(body for _, body in rows)
    assert bodies == sorted(f"client {c} note {i}" for c in range(CLIENTS) for i in range(NOTES_EACH))
    store.refresh_from_db()
    assert store.entry_count == total


def test_concurrent_retries_of_one_nonce_store_one_entry(live_server, agent):
    store, headers = agent
    note_url = f"{live_server.url}/api/v1/memories/{store.pk}/note"
    start = threading.Barrier(CLIENTS)

    def retry(_: int) -> tuple[int, int, bool]:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            response = http.post(note_url, json={"body_md": "exactly once", "client_nonce": "retry-42"})
        body = response.json()
        return response.status_code, body["data"]["seq"], body["meta"]["replayed"]

    with ThreadPoolExecutor(CLIENTS) as pool:
        outcomes = list(pool.map(retry, range(CLIENTS)))

    assert sorted(status for status, _, _ in outcomes) == [200] * (CLIENTS - 1) + [201]
    assert {seq for _, seq, _ in outcomes} == {0}
    assert sum(1 for _, _, replayed in outcomes if not replayed) == 1
    assert list(Entry.objects.filter(store=store).values_list("seq", "body_md")) == [(0, "exactly once")]
    store.refresh_from_db()
    assert store.entry_count == 1

    conflict = httpx.post(note_url, headers=headers, json={"body_md": "different", "client_nonce": "retry-42"})
    assert conflict.status_code == 409
    assert conflict.json()["error"]["details"]["reason"] == "nonce_conflict"
    assert Entry.objects.filter(store=store).count() == 1


def test_concurrent_same_nonce_with_different_bodies_stores_one_and_conflicts_the_rest(live_server, agent):
    store, headers = agent
    note_url = f"{live_server.url}/api/v1/memories/{store.pk}/note"
    start = threading.Barrier(8)

    def attempt(i: int) -> int:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            return http.post(note_url, json={"body_md": f"body {i}", "client_nonce": "contested"}).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(attempt, range(8)))

    assert statuses == [201] + [409] * 7
    assert Entry.objects.filter(store=store).count() == 1
    store.refresh_from_db()
    assert store.entry_count == 1


def test_parallel_notes_interleaved_with_nonce_retries_keep_seq_contiguous(live_server, agent):
    store, headers = agent
    note_url = f"{live_server.url}/api/v1/memories/{store.pk}/note"
    start = threading.Barrier(8)

    def run(client_no: int) -> None:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for i in range(25):
                nonce = f"shared-{i}"  # every client retries the same 25 nonces
                response = http.post(note_url, json={"body_md": f"note {i}", "client_nonce": nonce})
                assert response.status_code in (200, 201), response.text
                fresh = http.post(note_url, json={"body_md": f"fresh {client_no}-{i}"})
                assert fresh.status_code == 201

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(run, range(8)))

    rows = list(Entry.objects.filter(store=store).values_list("seq", "body_md"))
    assert sorted(seq for seq, _ in rows) == list(range(25 + 8 * 25))
    assert sorted(body for _, body in rows if body.startswith("note ")) == sorted(f"note {i}" for i in range(25))


def test_parallel_compactors_and_appenders_leave_one_live_summary_per_range(live_server, agent):
    """Four agents run nap/compact loops (each with its own wording) while another appends notes."""
    from memories.models import Summary

    store, headers = agent
    base = f"{live_server.url}/api/v1/memories/{store.pk}"
    with httpx.Client(headers=headers, timeout=60) as http:
        for i in range(64):
            assert http.post(f"{base}/note", json={"body_md": f"seed {i}"}).status_code == 201
    start = threading.Barrier(5)
    conflicts: list[str] = []

    def compactor(worker: int) -> int:
        created = 0
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for _ in range(400):
                data = http.get(f"{base}/nap", params={"snapshot": 64}).json()["data"]
                if data["complete"]:
                    return created
                job = data["job"]
                response = http.post(
                    f"{base}/compact",
                    json={
                        "range": job["range"],
                        "generation": job["generation"],
                        "source_digest": job["source_digest"],
                        "summary_md": f"worker {worker} summary of {job['range']}",
                        "model": f"worker-{worker}",
                    },
                )
                if response.status_code == 201:
                    created += 1
                else:
                    assert response.status_code == 409, response.text
                    conflicts.append(response.json()["error"]["details"]["reason"])
        raise AssertionError("compaction did not converge")

    def appender(_: int) -> int:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for i in range(40):
                assert http.post(f"{base}/note", json={"body_md": f"late {i}"}).status_code == 201
        return 0

    with ThreadPoolExecutor(5) as pool:
        created = sum(pool.map(lambda i: appender(i) if i == 4 else compactor(i), range(5)))

    assert created == 63  # every aligned range of size ≥ 2 inside [0, 64), each created exactly once
    assert set(conflicts) <= {"summary_conflict"}
    live = list(Summary.objects.filter(store=store, invalidated_at=None).values_list("start", "end"))
    assert len(live) == len(set(live)) == 63
    store.refresh_from_db()
    assert (store.entry_count, store.summary_count) == (104, 63)
