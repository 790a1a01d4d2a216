"""Redaction under fire (SPEC §4): parallel notes and compactions over real HTTP while entries are redacted.

Clients run in threads against the live server (one database connection per request thread), so notes,
nap/compact rounds and redactions truly interleave on PostgreSQL. Whatever the interleaving: seqs stay
contiguous, every live summary matches its children, and no summary anywhere keeps a redacted text —
a job handed out before a redaction is refused when it comes back.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from accounts import services as account_services
from memories.models import Entry, Summary
from tests.factories import StoreFactory, UserFactory
from tests.log.conftest import assert_tree_consistent, fill, quoting_summary

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TO_REDACT = [3, 17, 40, 70]


def body(seq: int) -> str:
    return f"SECRET-{seq}-do-not-keep" if seq in TO_REDACT else f"entry {seq}"


@pytest.fixture
def setup():
    owner = UserFactory(handle="redact-owner")
    store = fill(StoreFactory(owner=owner), 64, author=owner, body=body)
    secret = account_services.issue_token(user=owner, scopes=account_services.ALL_SCOPES).secret
    return store, {"Authorization": f"Bearer {secret}"}


def test_notes_compactions_and_redactions_in_parallel_keep_seq_and_summaries_consistent(live_server, setup):
    store, headers = setup
    base = f"{live_server.url}/api/v1/memories/{store.pk}"
    stop = threading.Event()
    start = threading.Barrier(8)
    outcomes: dict[str, list[int]] = {"note": [], "compact": [], "redact": []}
    lock = threading.Lock()

    def record(kind: str, status: int) -> None:
        with lock:
            outcomes[kind].append(status)

    def noter(client_no: int) -> None:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for i in range(12):
                # Seqs 64.. are appended here; the one that lands on 70 must be redactable like the rest.
                response = http.post(f"{base}/note", json={"body_md": f"note {client_no}-{i}"})
                record("note", response.status_code)
                time.sleep(0.03)

    def compactor(_: int) -> None:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            while not stop.is_set():
                data = http.get(f"{base}/nap").json()["data"]
                if data["complete"]:
                    time.sleep(0.02)
                    continue
                record("compact", submit(http, base, data["job"]).status_code)

    def redactor(_: int) -> None:
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for seq in TO_REDACT:
                pair = f"{seq - seq % 2}-{seq - seq % 2 + 1}"
                deadline = time.monotonic() + 30
                # Wait until the compactors have summarised the secret (then the redaction has work to undo).
                while time.monotonic() < deadline:
                    zoom = http.get(f"{base}/zoom", params={"range": pair})
                    if zoom.status_code == 200 and zoom.json()["data"]["line"]["kind"] == "summary":
                        break
                    time.sleep(0.01)
                time.sleep(0.05)
                response = http.post(f"{base}/entries/{seq}/redact", json={"reason": "leak"})
                record("redact", response.status_code)

    with ThreadPoolExecutor(8) as pool:
        note_runs = [pool.submit(noter, n) for n in range(4)]
        compact_runs = [pool.submit(compactor, n) for n in range(3)]
        redact_run = pool.submit(redactor, 0)
        for future in [*note_runs, redact_run]:
            future.result(timeout=120)
        time.sleep(0.3)  # let the compactors race the last redaction
        stop.set()
        for future in compact_runs:
            future.result(timeout=60)

    assert outcomes["note"] == [201] * 48
    assert outcomes["redact"] == [200] * len(TO_REDACT)
    # Compactions either land or are refused as stale; never a 5xx, never a summary_conflict.
    assert set(outcomes["compact"]) <= {200, 201, 409}
    assert_tree_consistent(store)
    assert store.entry_count == 64 + 48
    redacted = dict(Entry.objects.filter(store=store, redacted_at__isnull=False).values_list("seq", "body_md"))
    assert redacted == {seq: None for seq in TO_REDACT}
    for seq in TO_REDACT:
        assert not Summary.objects.filter(summary_md__contains=f"SECRET-{seq}-").exists()
    # Every pre-redaction summary over a redacted seq was nulled; later ones were built from "".
    for summary in Summary.objects.filter(store=store, redacted_at__isnull=False):
        assert summary.summary_md is None and summary.invalidated_at is not None
    for seq in TO_REDACT:  # the race really compacted over each secret before its redaction
        assert Summary.objects.filter(store=store, redacted_at__isnull=False, start__lte=seq, end__gte=seq).exists()
    compact_all_http(base, headers)
    wake = httpx.get(f"{base}/wake", params={"budget": 32}, headers=headers).json()["data"]
    assert wake["complete"] and not [line for line in wake["lines"] if line["kind"] == "missing"]
    assert not any(f"SECRET-{seq}-" in httpx.get(f"{base}/wake", headers=headers).text for seq in TO_REDACT)
    assert_tree_consistent(store)


def submit(http: httpx.Client, base: str, job: dict) -> httpx.Response:
    """Compact `job` with a summariser that quotes its children (so a leak would show)."""
    fields = {"range": job["range"], "generation": job["generation"], "source_digest": job["source_digest"]}
    return http.post(f"{base}/compact", json={**fields, "summary_md": quoting_summary(job), "model": "quoting-model"})


def compact_all_http(base: str, headers: dict) -> None:
    with httpx.Client(headers=headers, timeout=60) as http:
        while not (data := http.get(f"{base}/nap").json()["data"])["complete"]:
            response = submit(http, base, data["job"])
            assert response.status_code == 201, response.text
