"""Build a store that holds every kind of content an export carries (shared by tests and bench/exchange.py).

Entries with nonces, sessions and provenance; summaries at every level, some forgotten and rebuilt;
redacted entries (so redacted and invalidated summaries); file memories with several versions each —
renamed, deleted, redacted; explicit readers, active and revoked. Everything goes through the services
except where a benchmark needs 10⁵ rows fast (`fast=True`: entries and the first tree are bulk-written,
with real digests).
"""

from __future__ import annotations

import hashlib
import uuid

from django.db import transaction
from django.utils import timezone

from accounts import services as account_services
from memories import nap, services, tree
from memories.models import Entry, Summary
from stores import services as store_services
from stores.models import Store
from versions import services as version_services
from versions.actors import Actor
from versions.models import Version


def summary_of(range_label: str, texts: list[str]) -> str:
    """A deterministic 'model' that quotes a little of each child (so redaction has something to null)."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:10]
    quoted = " / ".join(text[:40] for text in texts)
    return f"[{range_label} {digest}] {quoted}"


def compact_everything(store: Store, author, summariser=None, prompts: list | None = None) -> int:
    """Run nap/compact through the services until the store needs no summary; returns how many were written.

    summariser(job) writes each summary (default: `summary_of` its children); prompts collects job prompts.
    """
    written = 0
    while True:
        store.refresh_from_db()
        job = nap.nap(store=store, claimant=None).data["job"]
        if job is None:
            return written
        if prompts is not None:
            prompts.append(job["prompt"])
        services.compact_range(
            store=store,
            author=author,
            block=tree.parse_range(job["range"], allow_entry=False),
            generation=job["generation"],
            source_digest=job["source_digest"],
            summary_md=summariser(job)
            if summariser
            else summary_of(job["range"], [c["text"] for c in job["children"]]),
            model="builder-model-1",
        )
        written += 1


def bulk_entries(store: Store, authors: list, count: int, *, batch: int = 5000) -> None:
    """Bulk-write `count` entries (nonces on every third, a session on some, provenance on every 50th)."""
    now = timezone.now()
    session = uuid.UUID("5e551011-0000-4000-8000-000000000001")
    rows = []
    for seq in range(count):
        body = f"entry {seq}: decided to keep step {seq % 97} of the plan; ticket #{seq * 7 % 1000}"
        rows.append(
            Entry(
                store=store,
                seq=seq,
                author=authors[seq % len(authors)],
                body_md=body,
                size_bytes=len(body.encode()),
                client_nonce=f"nonce-{seq}" if seq % 3 == 0 else None,
                session_id=session if seq % 10 == 0 else None,
                provenance={"source": "builder", "part": seq % 5, "note": "ü"} if seq % 50 == 0 else None,
                created_at=now + timezone.timedelta(microseconds=seq),
            )
        )
        if len(rows) >= batch:
            Entry.objects.bulk_create(rows)
            rows = []
    Entry.objects.bulk_create(rows)
    Store.objects.filter(pk=store.pk).update(entry_count=count)


def bulk_tree(store: Store, author) -> None:
    """Write every summary the store needs, bottom up, with real digests (fast path for big stores)."""
    store.refresh_from_db()
    n = store.entry_count
    texts = {
        seq: tree.child_text(body) for seq, body in Entry.objects.filter(store=store).values_list("seq", "body_md")
    }
    level_texts = {(seq, seq): text for seq, text in texts.items()}
    now = timezone.now()
    total = 0
    size = 2
    while size <= n:
        rows, nxt = [], {}
        for start in range(0, n - size + 1, size):
            left, right = tree.Block(start, size // 2), tree.Block(start + size // 2, size // 2)
            lt, rt = level_texts[(left.start, left.end)], level_texts[(right.start, right.end)]
            block = tree.Block(start, size)
            text = summary_of(block.label, [lt, rt])
            nxt[(block.start, block.end)] = text
            rows.append(
                Summary(
                    store=store,
                    start=block.start,
                    end=block.end,
                    level=block.level,
                    summary_md=text,
                    size_bytes=len(text.encode()),
                    model="builder-model-1",
                    author=author,
                    source_digest=tree.source_digest(left, lt, right, rt),
                    generation=store.generation,
                    created_at=now,
                )
            )
        Summary.objects.bulk_create(rows, batch_size=5000)
        total += len(rows)
        level_texts = nxt
        size *= 2
    Store.objects.filter(pk=store.pk).update(summary_count=total)


def build_files(store: Store, actor: Actor, *, files: int, versions_per_file: int) -> None:
    """`files` memories with `versions_per_file` versions each; every 7th renamed, every 11th deleted and
    re-created, every 5th has an old version redacted."""
    for i in range(files):
        path = f"/notes/topic-{i:04d}/summary.md"
        memory = version_services.create_memory(store=store, path=path, content=f"v0 of {i}\n", actor=actor).memory
        for v in range(1, versions_per_file):
            memory = version_services.update_memory(
                store=store, memory_id=memory.pk, actor=actor, content=f"v{v} of {i}\n" + "line\n" * (v * 3)
            )
        if i % 7 == 0:
            memory = version_services.update_memory(
                store=store, memory_id=memory.pk, actor=actor, path=f"/notes/topic-{i:04d}/renamed.md"
            )
        if i % 5 == 0:
            old = Version.objects.filter(memory_id=memory.pk).order_by("created_at").first()
            version_services.redact_version(store=store, version_id=old.pk, actor=actor)
        if i % 11 == 0:
            version_services.delete_memory(store=store, memory_id=memory.pk, actor=actor)
            version_services.create_memory(store=store, path=path, content=f"again {i} ✓\n", actor=actor)


def build_rich_store(
    owner,
    *,
    others: list,
    readers: list,
    entries: int = 40,
    files: int = 6,
    versions_per_file: int = 3,
    redact: tuple[int, ...] = (6, 21),
    fast: bool = False,
) -> Store:
    """A user store owned by `owner` holding every kind of exported content (see the module docstring).

    others: further authors of entries; readers: users granted read access (the last one revoked again).
    """
    store = store_services.create_store(owner=owner, name="Everything store", description="All *kinds* of rows")
    store_services.update_store(store=store, metadata_patch={"team": "infra", "tier": "gold"})
    authors = [owner, *others]
    if fast:
        bulk_entries(store, authors, entries)
        bulk_tree(store, owner)
    else:
        for seq in range(entries):
            services.append_entry(
                store=store,
                author=authors[seq % len(authors)],
                body_md=f"entry {seq} by {authors[seq % len(authors)].handle}: quote «{seq}»",
                client_nonce=f"n-{seq}" if seq % 3 == 0 else None,
            )
        Entry.objects.filter(store=store, seq=2).update(provenance={"source": "record", "source_id": 7, "parts": 2})
        Entry.objects.filter(store=store, seq=4).update(session_id=uuid.UUID("5e551011-0000-4000-8000-000000000002"))
        compact_everything(store, owner)
    store.refresh_from_db()
    # Forget one range and rebuild it: invalidated summaries sit beside live ones.
    services.forget_range(store=store, actor=owner, block=tree.Block(8, 4), generation=store.generation)
    compact_everything(store, owner)
    for seq in redact:
        store.refresh_from_db()
        services.redact_entry(store=store, actor=owner, seq=seq, reason="builder redaction")
    compact_everything(store, owner)
    token = account_services.issue_token(user=owner).token
    with transaction.atomic():
        build_files(store, Actor.api(token.pk), files=files, versions_per_file=versions_per_file)
    for reader in readers:
        store_services.set_reader(store=store, handle=reader.handle, active=True, granted_by=owner)
    if readers:
        store_services.set_reader(store=store, handle=readers[-1].handle, active=False, granted_by=owner)
    store.refresh_from_db()
    return store
