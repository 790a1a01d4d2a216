"""Hot paths stay single-shard (issue 21): every statement they send to store content names the store.

A statement is routed to one Citus shard when it filters (or inserts) store content by the distribution
column. This test records the SQL and parameters of every statement the hot paths send — note, wake, nap,
compact, zoom, recall and the file operations — through a Django execute wrapper (it sees the prepared
statements of config/compiled.py too) and fails on any statement that touches a store-content table
without the store's id among its values and a `store_id` / store `id` condition in its text.

Cross-store queries (the store list, the directory, search) are deliberately multi-shard; docs/scaling.md
names and measures them.
"""

from __future__ import annotations

import hashlib
import re
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from config.distribution import DISTRIBUTED
from tests.log.conftest import fill
from tests.log.conftest import summary_text as summarise

pytestmark = pytest.mark.django_db

_TABLES = re.compile(r'"?\b(' + "|".join(DISTRIBUTED) + r')\b"?')
_STORE_CONDITION = re.compile(r'store_id|"stores_store"\."id"|\bstores_store\b')


class Recorder:
    """A Django execute wrapper keeping (sql, params) of every statement."""

    def __init__(self):
        self.statements: list[tuple[str, object]] = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append((sql, params))
        return execute(sql, params, many, context)


def _values(params) -> list:
    if params is None:
        return []
    if isinstance(params, dict):
        return list(params.values())
    flat = []
    for value in params:
        flat.extend(value if isinstance(value, list | tuple) else [value])
    return flat


def _names_store(sql: str, params, store_id: uuid.UUID) -> bool:
    wanted = {store_id, str(store_id), store_id.hex}
    return str(store_id) in sql or any(
        value in wanted for value in _values(params) if isinstance(value, str | uuid.UUID)
    )


def _offenders(recorder: Recorder, store_id) -> list[str]:
    bad = []
    for sql, params in recorder.statements:
        if not _TABLES.search(sql):
            continue
        if not (_STORE_CONDITION.search(sql) and _names_store(sql, params, store_id)):
            bad.append(sql)
    return bad


def _record(client, method: str, path: str, data=None):
    recorder = Recorder()
    with connection.execute_wrapper(recorder):
        response = getattr(client, method)(path, data or {}, format="json")
    assert response.status_code < 300, (path, response.status_code, response.content[:300])
    return recorder, response.json()


def test_log_hot_paths_filter_every_store_content_statement_by_store(owner_client, private_store):
    store = fill(private_store, 6)
    base = f"/api/v1/memories/{store.pk}"
    calls = [
        ("post", f"{base}/note", {"body_md": "hello PostgreSQL", "client_nonce": "n-1"}),
        ("post", f"{base}/note", {"body_md": "hello PostgreSQL", "client_nonce": "n-1"}),  # replay
        ("get", f"{base}/wake", None),
        ("get", f"{base}/zoom", {"range": "3"}),
        ("get", f"{base}/zoom", {"range": "0-1"}),
        ("get", f"{base}/recall", {"pattern": "entry|hello", "limit": 2}),
    ]
    checked = 0
    for method, path, data in calls:
        recorder, body = _record(owner_client, method, path, data)
        assert not _offenders(recorder, store.pk), (path, _offenders(recorder, store.pk))
        checked += len(recorder.statements)
        if path.endswith("recall") and body.get("meta", {}).get("next_cursor"):
            calls.append(("get", path, {**data, "cursor": body["meta"]["next_cursor"]}))
    for _ in range(3):  # nap → compact, three jobs
        recorder, body = _record(owner_client, "get", f"{base}/nap", None)
        assert not _offenders(recorder, store.pk), ("nap", _offenders(recorder, store.pk))
        job = body["data"]["job"]
        submission = {
            "range": job["range"],
            "generation": job["generation"],
            "source_digest": job["source_digest"],
            "summary_md": summarise(job),
            "model": "test-summariser-1",
        }
        recorder, _ = _record(owner_client, "post", f"{base}/compact", submission)
        assert not _offenders(recorder, store.pk), ("compact", _offenders(recorder, store.pk))
        recorder, _ = _record(owner_client, "post", f"{base}/compact", submission)  # the idempotent replay
        assert not _offenders(recorder, store.pk), ("compact replay", _offenders(recorder, store.pk))
    recorder, _ = _record(owner_client, "get", f"{base}/zoom", {"range": "0-1"})
    assert not _offenders(recorder, store.pk)
    assert checked > 20


def test_file_hot_paths_filter_every_store_content_statement_by_store(owner_client, private_store):
    base = f"/api/v1/memory_stores/{private_store.pk}"
    recorder, created = _record(owner_client, "post", f"{base}/memories", {"path": "/a/b.md", "content": "one"})
    assert not _offenders(recorder, private_store.pk), _offenders(recorder, private_store.pk)
    memory_id = created["id"]
    first_version = created["memory_version_id"]
    calls = [
        ("get", f"{base}/memories/{memory_id}", None),
        ("post", f"{base}/memories", {"path": "/a/b.md", "content": "one"}),  # the idempotent replay
        ("post", f"{base}/memories/{memory_id}", {"content": "two"}),
        ("post", f"{base}/memories/{memory_id}", {"content": "two"}),  # no-op
        (
            "post",
            f"{base}/memories/{memory_id}",
            {"content": "three", "precondition": {"type": "content_sha256", "content_sha256": _sha("two")}},
        ),
        ("post", f"{base}/memories/{memory_id}", {"path": "/a/c.md"}),
        ("get", f"{base}/memories", None),
        ("get", f"{base}/memories", {"path_prefix": "/a/"}),
        ("get", f"{base}/memory_versions", None),
        ("get", f"{base}/memory_versions", {"memory_id": memory_id}),
        ("get", f"{base}/memory_versions/{first_version}", None),
        ("post", f"{base}/memory_versions/{first_version}/redact", None),
        ("delete", f"{base}/memories/{memory_id}", None),
    ]
    for method, path, data in calls:
        recorder, _ = _record(owner_client, method, path, data)
        assert not _offenders(recorder, private_store.pk), (method, path, _offenders(recorder, private_store.pk))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_file_writes_under_a_fence_filter_every_statement_by_store(private_store, owner):
    """The locked path of a file write (a fence, or a first run that waited for the lock): the store lock,
    the fence, then the same one statement; each names the store and locks only its row."""
    from versions import services
    from versions.actors import Actor

    actor = Actor.api(uuid.uuid4())
    recorder = Recorder()
    with connection.execute_wrapper(recorder):
        memory = services.create_memory(
            store=private_store, path="/f.md", content="one", actor=actor, fence=timezone.now
        ).memory
        services.update_memory(
            store=private_store, memory_id=memory.pk, content="two", expected_sha256=_sha("one"), actor=actor,
            fence=timezone.now,
        )  # fmt: skip
    assert len(recorder.statements) >= 4
    assert not _offenders(recorder, private_store.pk), _offenders(recorder, private_store.pk)
    for sql, _ in recorder.statements:
        if "FOR NO KEY UPDATE" in sql:
            assert sql.count("FOR NO KEY UPDATE") == 1, sql


def test_the_check_catches_a_statement_without_the_store(private_store):
    """The recorder is not vacuous: a lookup of a version by id alone is reported."""
    from versions.models import Version

    recorder = Recorder()
    with connection.execute_wrapper(recorder):
        list(Version.objects.filter(pk=uuid.uuid4()))
        list(Version.objects.filter(store_id=private_store.pk, pk=uuid.uuid4()))
    assert len(_offenders(recorder, private_store.pk)) == 1


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/memories", {}),
        ("/api/v1/memories", {"scope": "user"}),
        ("/api/v1/memory_stores", {}),
        ("/api/v1/search", {"q": "notes"}),
    ],
)
def test_cross_store_queries_read_only_the_store_table(owner_client, private_store, path, query):
    """The named cross-store queries (lists, search) are multi-shard on Citus, but they fan out over the
    store rows only: no statement of theirs reads entries, summaries, files or versions without a store."""
    fill(private_store, 3)
    recorder, _ = _record(owner_client, "get", path, query)
    unrouted = _offenders(recorder, private_store.pk)
    content = set(DISTRIBUTED) - {"stores_store", "stores_readergrant"}
    for sql in unrouted:
        touched = {table for table in _TABLES.findall(sql)}
        assert not touched & content, (path, sql)
