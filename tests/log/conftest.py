"""Fixtures for the Memories log tests: URL helpers, bulk-filled stores and a deterministic summariser."""

from __future__ import annotations

import hashlib

import pytest
from django.utils import timezone

from memories.models import Entry, Summary
from memories.tree import child_text, parse_range, source_digest
from stores.models import Store


def url(store, action: str) -> str:
    """`/api/v1/memories/<id>/<action>`."""
    return f"/api/v1/memories/{getattr(store, 'pk', store)}/{action}"


def fill(store: Store, count: int, *, author=None, body=lambda seq: f"entry {seq}") -> Store:
    """Bulk-insert `count` more entries (as an import would) and bump entry_count; returns the fresh store."""
    store.refresh_from_db()
    author = author or store.owner
    now = timezone.now()
    start = store.entry_count
    Entry.objects.bulk_create(
        [
            Entry(
                store=store,
                seq=seq,
                author=author,
                body_md=body(seq),
                size_bytes=len(body(seq).encode()),
                created_at=now,
            )
            for seq in range(start, start + count)
        ],
        batch_size=5000,
    )
    Store.objects.filter(pk=store.pk).update(entry_count=start + count)
    store.refresh_from_db()
    return store


def summary_text(job: dict) -> str:
    """The deterministic 'model': a short text derived from the job's children."""
    digest = hashlib.sha256("|".join(child["text"] for child in job["children"]).encode()).hexdigest()[:12]
    return f"Summary of {job['range']} ({digest})"


def put_summary(store: Store, label: str, text: str | None = None, *, author=None) -> Summary:
    """Insert a live summary directly (children texts are not checked) and bump summary_count."""
    block = parse_range(label, allow_entry=False)
    left, right = block.halves()
    summary = Summary.objects.create(
        store=store,
        start=block.start,
        end=block.end,
        level=block.level,
        summary_md=text or f"summary {label}",
        size_bytes=len((text or f"summary {label}").encode()),
        model="test-model",
        author=author or store.owner,
        source_digest=source_digest(left, "x", right, "y"),
        generation=store.generation,
    )
    Store.objects.filter(pk=store.pk).update(summary_count=store.summary_count + 1)
    store.refresh_from_db()
    return summary


def compact_all(client, store, *, snapshot=None, summariser=summary_text, prompts: list | None = None) -> int:
    """Drive nap/compact over the API until complete; returns the number of summaries submitted.

    summariser(job) writes each summary; every job's prompt is appended to `prompts` when given.
    """
    submitted = 0
    query = {} if snapshot is None else {"snapshot": snapshot}
    while True:
        nap = client.get(url(store, "nap"), query)
        assert nap.status_code == 200, nap.json()
        data = nap.json()["data"]
        if data["complete"]:
            return submitted
        job = data["job"]
        if prompts is not None:
            prompts.append(job["prompt"])
        response = client.post(
            url(store, "compact"),
            {
                "range": job["range"],
                "generation": job["generation"],
                "source_digest": job["source_digest"],
                "summary_md": summariser(job),
                "model": "test-summariser-1",
            },
        )
        assert response.status_code == 201, response.json()
        submitted += 1


@pytest.fixture
def filled_store(private_store):
    """The owner's private store with 8 entries 'entry 0'..'entry 7'."""
    return fill(private_store, 8)


def quoting_summary(job: dict) -> str:
    """A 'model' that quotes its children verbatim (as a real LLM may), cut to 1,024 bytes."""
    quoted = " | ".join(child["text"] for child in job["children"])
    return f"[{job['range']}] {quoted}".encode()[:1000].decode("utf-8", "ignore")


def assert_tree_consistent(store: Store) -> None:
    """Every live summary has live children whose recomputed digest is its source_digest; counters agree.

    Also: seqs are exactly 0..entry_count-1 and no redacted text survives in a live summary's children.
    """
    store.refresh_from_db()
    seqs = list(Entry.objects.filter(store=store).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(store.entry_count))
    bodies = dict(Entry.objects.filter(store=store).values_list("seq", "body_md"))
    live = {(s.start, s.end): s for s in Summary.objects.filter(store=store, invalidated_at=None)}
    assert store.summary_count == len(live)
    for (start, end), summary in live.items():
        assert summary.summary_md is not None and summary.redacted_at is None
        block = parse_range(f"{start}-{end}", allow_entry=False)
        left, right = block.halves()
        if block.size == 2:
            texts = [child_text(bodies[left.start]), child_text(bodies[right.start])]
        else:
            assert (left.start, left.end) in live and (right.start, right.end) in live, f"orphan {start}-{end}"
            texts = [live[(left.start, left.end)].summary_md, live[(right.start, right.end)].summary_md]
        assert source_digest(left, texts[0], right, texts[1]) == summary.source_digest, f"{start}-{end}"
