"""Statements per request on the hot endpoints of the log and the file Memory Stores, pinned exactly (issue 17).

Each row is one request by the store's owner with a warm API token (its `last_used_at` already recorded).
A change that adds a round trip to a hot path fails here; one that removes one must lower the pin (and
say why in bench/RESULTS.md). The token and the store's access check are one statement
(`accounts.authentication`, `config.compiled.CompiledLateral`).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.log.conftest import fill

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as in production: no savepoints


def _count(client, method: str, path: str, data=None) -> tuple[int, dict, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = getattr(client, method)(path, data, format="json")
    assert response.status_code < 300, (path, response.status_code, response.content[:300])
    return len(queries), response.json(), [q["sql"][:120] for q in queries]


@pytest.fixture
def log(owner_client, private_store):
    store = fill(private_store, 40)
    owner_client.get(f"/api/v1/memories/{store.pk}")  # warm the token
    return f"/api/v1/memories/{store.pk}"


LOG = [
    # (name, method, suffix, data, statements)
    ("note", "post", "/note", {"body_md": "hello", "client_nonce": "q-1"}, 2),  # token+store, append
    ("note without nonce", "post", "/note", {"body_md": "hello"}, 2),
    ("store", "get", "", None, 1),  # token+store
    ("wake", "get", "/wake", None, 2),  # token+store, the cover
    ("zoom", "get", "/zoom", {"range": "0-7"}, 2),  # token+store, the range
    ("recall", "get", "/recall", {"pattern": "entry 3", "limit": 5}, 2),  # token+store, one page of rows
]


@pytest.mark.parametrize(("name", "method", "suffix", "data", "statements"), LOG, ids=[row[0] for row in LOG])
def test_log_endpoints(owner_client, log, name, method, suffix, data, statements):
    count, _, sql = _count(owner_client, method, log + suffix, data)
    assert count == statements, sql


@pytest.fixture
def files(owner_client, private_store):
    base = f"/api/v1/memory_stores/{private_store.pk}"
    made = owner_client.post(f"{base}/memories", {"path": "/a/b.md", "content": "one"}, format="json").json()
    return base, made


FILES = [
    ("memory store", "get", "", None, 1),  # token+store
    ("memory list", "get", "/memories", None, 2),  # token+store, the page
    ("memory", "get", "/memories/{id}", None, 2),  # token+store, the memory
    ("version list", "get", "/memory_versions", None, 2),  # token+store, the page
    ("create", "post", "/memories", {"path": "/c.md", "content": "two"}, 2),  # token+store, the write
    ("update", "post", "/memories/{id}", {"content": "three"}, 2),  # token+store, the write
    ("delete", "delete", "/memories/{id}", None, 2),  # token+store, the write
]


@pytest.mark.parametrize(("name", "method", "suffix", "data", "statements"), FILES, ids=[row[0] for row in FILES])
def test_memory_store_endpoints(owner_client, files, name, method, suffix, data, statements):
    base, made = files
    count, _, sql = _count(owner_client, method, base + suffix.format(id=made["id"]), data)
    assert count == statements, sql
