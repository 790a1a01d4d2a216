"""Demo agents: each is a separate user with its own token, talking to the Memories API over HTTP only.

`Agent.call` retries what is safe to retry — connection errors, 429 and 5xx — with backoff; every note
carries a `client_nonce`, so a retried note that had in fact been stored comes back as a replay (200,
``meta.replayed``) instead of a duplicate (SPEC §4 Entries). Everything else (4xx) is raised at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rog.client import ApiError, Client, NetworkError, new_idempotency_key

RETRY_ATTEMPTS = 6
RETRY_BASE_DELAY_S = 0.1


@dataclass
class LoadStats:
    """What one agent's notes did: `created` (201), `replayed` (200, nonce seen), `retries` (re-sends)."""

    created: int = 0
    replayed: int = 0
    retries: int = 0


@dataclass
class CompactStats:
    """What one agent's compaction loop did: summaries `created` (201); `already` (200: the same text was
    already stored — an identical resubmission, wasted LLM work); `conflicts` (409: the job was stale, nap
    again); `naps`; `waits` (naps that found every ready job claimed by another agent); `llm_calls`
    (one per nap that returned jobs: the batch is summarised at once); `retries`."""

    naps: int = 0
    created: int = 0
    already: int = 0
    conflicts: int = 0
    waits: int = 0
    llm_calls: int = 0
    retries: int = 0


@dataclass
class Agent:
    """One demo agent: `handle`, its bearer `token` (secret) and an HTTP client for `base_url`."""

    handle: str
    token: str
    base_url: str
    load: LoadStats = field(default_factory=LoadStats)
    compact: CompactStats = field(default_factory=CompactStats)

    def __post_init__(self) -> None:
        self.client = Client(self.base_url, self.token, timeout=60.0, retries=0)  # call() retries itself
        self._lock = threading.Lock()

    def call(
        self, method: str, path: str, *, params: dict | None = None, json: Any = None, key: str | None = None
    ) -> tuple[dict, int]:
        """One API call with retries; returns ``(body, retries used)``. Raises ApiError for other 4xx.

        A write carries the `Idempotency-Key` `key` (a fresh one when None) on every attempt.
        """
        if method.upper() not in ("GET", "HEAD") and key is None:
            key = new_idempotency_key()
        for attempt in range(RETRY_ATTEMPTS):
            try:
                return self.client.request(method, path, params=params, json=json, idempotency_key=key), attempt
            except NetworkError:
                if attempt == RETRY_ATTEMPTS - 1:
                    raise
            except ApiError as error:
                if (error.status < 500 and error.status != 429) or attempt == RETRY_ATTEMPTS - 1:
                    raise
            time.sleep(RETRY_BASE_DELAY_S * 2**attempt)
        raise AssertionError("unreachable")

    def note(self, store_id: str, body_md: str, nonce: str) -> dict:
        """Append one note with its nonce; returns the entry. Counts created/replayed/retries."""
        body, retries = self.call(
            "POST", f"memories/{store_id}/note", json={"body_md": body_md, "client_nonce": nonce}, key=nonce
        )
        self.load.retries += retries
        if body["meta"]["replayed"]:
            self.load.replayed += 1
        else:
            self.load.created += 1
        return body["data"]

    def compact_until_complete(
        self,
        store_id: str,
        summariser,
        on_summary=None,
        *,
        limit: int = 1,
        snapshot: int | None = None,
        poll_seconds: float = 0.25,
    ) -> None:
        """Loop `nap?limit=` → `summariser.summarise_all(jobs)` → `compact` each until nap says complete.

        SPEC §4 nap / compact, Claims: every job nap returns is claimed for this agent, so no other agent
        works on it. summariser: has ``summarise_all(jobs) -> [summary_md]`` (one "LLM call" per batch)
        and a `model` id. snapshot: compact only what that snapshot needs (None: the current entries).
        When every ready job is claimed by other agents (``job`` null, ``meta.retry_after``), wait
        ``min(retry_after, poll_seconds)`` and nap again: a claimant usually finishes long before its
        claim would lapse. A 409 means the job went stale (a forget): nap again. A 200 from compact
        means the same summary was already stored. on_summary: called with no argument after each 201.
        """
        params = {"limit": limit, "snapshot": snapshot}
        while True:
            nap, retries = self.call("GET", f"memories/{store_id}/nap", params=params)
            self.compact.naps += 1
            self.compact.retries += retries
            if nap["data"]["complete"]:
                return
            jobs = nap["data"]["jobs"]
            if not jobs:
                self.compact.waits += 1
                time.sleep(min(nap["meta"].get("retry_after", poll_seconds), poll_seconds))
                continue
            self.compact.llm_calls += 1
            for job, summary_md in zip(jobs, summariser.summarise_all(jobs), strict=True):
                self._submit(store_id, job, summary_md, summariser.model, snapshot, on_summary)

    def _submit(self, store_id: str, job: dict, summary_md: str, model: str, snapshot, on_summary) -> None:
        payload = {
            "range": job["range"],
            "generation": job["generation"],
            "source_digest": job["source_digest"],
            "summary_md": summary_md,
            "model": model,
        }
        if snapshot is not None:
            payload["snapshot"] = snapshot
        try:
            done, retries = self.call("POST", f"memories/{store_id}/compact", json=payload)
        except ApiError as error:
            if error.status != 409:
                raise
            self.compact.conflicts += 1
            return
        self.compact.retries += retries
        if done["meta"]["created"]:
            self.compact.created += 1
            if on_summary:
                on_summary()
        else:
            self.compact.already += 1

    def close(self) -> None:
        self.client.close()
