"""Writes racing the deletion of their store are 404, never 500 (issue 15 defect 1, SPEC §2).

Real parallel clients on PostgreSQL: a transaction deletes the store and holds its row lock; every write
is sent over HTTP while it is held, passes its access check (the store still reads as present) and queues
on the store lock inside `stores.services.lock_store`. Once every write is seen waiting in
`pg_stat_activity`, the deletion commits: each write must then answer the domain 404, not a 500.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection, connections, transaction

from accounts import services as account_services
from stores.models import Store
from tests.factories import StoreFactory, UserFactory
from tests.log.conftest import fill, put_summary
from versions import services as version_services
from versions.actors import Actor
from versions.models import Version

pytestmark = [pytest.mark.django_db(transaction=True)]
JSONL = "application/jsonl"


def writes(store, memory, old_version) -> dict[str, tuple[str, str, dict | None]]:
    """Each racing write: name → (method, path, json body)."""
    log = f"/api/v1/memories/{store.pk}"
    files = f"/api/v1/memory_stores/{store.pk}"
    return {
        "update_store (memories)": ("PATCH", log, {"name": "renamed"}),
        "update_store (memory_stores)": ("POST", files, {"name": "renamed"}),
        "archive_store": ("POST", f"{files}/archive", None),
        "set_reader": ("POST", f"{log}/share", {"handle": "race-reader"}),
        "create_memory": ("POST", f"{files}/memories", {"path": "/new.md", "content": "new"}),
        "update_memory": ("POST", f"{files}/memories/{memory.pk}", {"content": "changed"}),
        "delete_memory": ("DELETE", f"{files}/memories/{memory.pk}", None),
        "redact_version": ("POST", f"{files}/memory_versions/{old_version.pk}/redact", None),
        "compact_range": (
            "POST",
            f"{log}/compact",
            {"range": "2-3", "generation": 1, "source_digest": "a" * 64, "summary_md": "s", "model": "m"},
        ),
        "forget_range": ("POST", f"{log}/forget", {"range": "0-1", "generation": 1}),
        "note (already 404 before)": ("POST", f"{log}/note", {"body_md": "late"}),
    }


def waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def queued_on_a_held_lock(live_server, secret: str, requests: dict, hold) -> tuple[int, list]:
    """Send every request of `requests` (name → (method, path, body[, its own secret])) over HTTP with
    `secret` (or the request's own) — a body as JSON, or bytes as `application/jsonl` — while
    `hold()` runs in a transaction of its own thread (it takes the lock); once all of them wait on a lock in
    `pg_stat_activity` (at most 60 s), let the holder commit. Returns (how many were seen waiting,
    [(name, status, body), …] in order)."""
    holding, release = threading.Event(), threading.Event()

    def hold_then_wait() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                release.wait(60)
        finally:
            connections.close_all()

    def send(item):
        name, (method, path, body, *own) = item
        with httpx.Client(base_url=live_server.url, timeout=60) as http:
            headers = {"Authorization": f"Bearer {own[0] if own else secret}"}
            if isinstance(body, bytes):  # an import's lines
                response = http.request(method, path, content=body, headers={**headers, "Content-Type": JSONL})
            else:
                response = http.request(method, path, json=body, headers=headers)
        return name, response.status_code, response.json()

    with ThreadPoolExecutor(len(requests) + 1) as pool:
        holder = pool.submit(hold_then_wait)
        assert holding.wait(30)
        answers = [pool.submit(send, item) for item in requests.items()]
        deadline = time.monotonic() + 60
        while waiting_on_locks() < len(requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        blocked = waiting_on_locks()
        release.set()
        holder.result()
        return blocked, [answer.result() for answer in answers]


def test_every_write_racing_the_deletion_of_its_store_is_a_404(live_server):
    owner = UserFactory(handle="race-owner")
    UserFactory(handle="race-reader")
    store = fill(StoreFactory(owner=owner), 4, author=owner)
    put_summary(store, "0-1")
    actor = Actor.user(owner.pk)
    created = version_services.create_memory(store=store, actor=actor, path="/a.md", content="one")
    memory = created.memory
    old_version = Version.objects.filter(memory_id=memory.pk).order_by("created_at").first()
    version_services.update_memory(store=store, memory_id=memory.pk, actor=actor, content="two")
    secret = account_services.issue_token(user=owner, scopes=account_services.ALL_SCOPES).secret
    requests = writes(store, memory, old_version)
    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, lambda: Store.objects.get(pk=store.pk).delete()
    )

    assert blocked >= len(requests), f"only {blocked} of {len(requests)} writes queued on the store lock"
    for name, status, body in results:
        assert status == 404, (name, status, body)
        assert body["error"]["type"] == "not_found_error", (name, body)
    assert not Store.objects.filter(pk=store.pk).exists()
