"""List endpoints of agent access cost a fixed number of queries, whatever the page holds (STYLE)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.services import environments as environment_services
from tests.factories import StoreFactory

pytestmark = pytest.mark.django_db


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(captured)


def test_session_lists_cost_the_same_for_one_or_many_sessions_and_stores(owner_api, make_session, owner):
    owner_api.get("/api/v1/sessions")  # warm up: the token's last_used_at write happens once
    make_session(StoreFactory(owner=owner, canonical=False))
    one = queries(owner_api, "/api/v1/sessions")
    for _ in range(5):
        make_session(*[StoreFactory(owner=owner, canonical=False) for _ in range(3)])
    many = queries(owner_api, "/api/v1/sessions")
    assert one == many <= 4


def test_environment_key_and_work_lists_cost_a_fixed_number_of_queries(
    owner_api, key_api, environment, owner, make_session
):
    env = f"/api/v1/environments/{environment.pk}"
    owner_api.get("/api/v1/environments")
    key_api.get(f"{env}/work")
    make_session()
    counts = [
        queries(owner_api, "/api/v1/environments"),
        queries(owner_api, f"{env}/keys"),
        queries(key_api, f"{env}/work"),
    ]
    for i in range(4):
        environment_services.create_environment(owner=owner, name=f"more {i}")
        environment_services.issue_environment_key(environment=environment)
        make_session()
    again = [
        queries(owner_api, "/api/v1/environments"),
        queries(owner_api, f"{env}/keys"),
        queries(key_api, f"{env}/work"),
    ]
    assert counts == again and max(again) <= 5  # work: auth, the lapsed-lease settle (3 with its savepoint), the page


def assert_prepared(*wanted: tuple[str, str]) -> list[str]:
    """Every (table, marker) pair is in a statement this connection prepared; returns the statements."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    for table, marker in wanted:
        assert any(table in statement and marker in statement for statement in prepared), (table, marker)
    return prepared


def test_a_per_work_file_write_runs_its_lookups_as_prepared_statements(run_session, notes_store):
    """Every request a worker's sync or flush makes carries the per-work credential: its claim, the
    session's attachment of the store and the fence's lock of the work row are compiled queries
    (config/compiled.py) — building them with the ORM was most of such a write's CPU (bench/RESULTS.md,
    2026-12-06). Each runs as a prepared statement, and the write takes a fixed number of statements."""
    running = run_session(notes_store)
    files = f"/api/v1/memory_stores/{notes_store.pk}/memories"
    created = running.api.post(files, {"path": "/plan.md", "content": "one"}, format="json")
    assert created.status_code == 200, created.content
    memory = f"{files}/{created.json()['id']}"
    with CaptureQueriesContext(connection) as captured:
        updated = running.api.post(memory, {"content": "two"}, format="json")
    assert updated.status_code == 200, updated.content
    statements = [q["sql"] for q in captured.captured_queries]
    # claim, attachment, store access; BEGIN, store lock, work lock, database time, the write, COMMIT
    assert len(statements) <= 9, statements
    assert_prepared(
        ("agent_sessions_workclaim", '"agent_sessions_workclaim"."digest" = $1'),
        ("agent_sessions_attachment", '"agent_sessions_attachment"."store_id" = $2'),
        ("agent_sessions_work", "FOR UPDATE OF"),
    )


def test_a_poll_runs_its_lookups_as_prepared_statements(key_api, environment):
    """An idle worker's poll tries again every `POLL_STEP_SECONDS` while it waits: the key lookup, the lapsed
    leases, the key's share lock, the owner check and the claimable item are compiled queries run as
    prepared statements (building them with the ORM cost about 65 ms of CPU per waiting poll)."""
    poll = f"/api/v1/environments/{environment.pk}/work/poll"
    assert key_api.get(poll).status_code == 200
    with CaptureQueriesContext(connection) as captured:
        answered = key_api.get(poll)
    assert answered.status_code == 200 and answered.json() is None
    assert len(captured) <= 14, [q["sql"][:90] for q in captured.captured_queries]
    prepared = assert_prepared(
        ("agent_sessions_environmentkey", '"agent_sessions_environmentkey"."digest" = $1'),
        ("agent_sessions_environmentkey", "FOR SHARE"),
        ("agent_sessions_work", "SKIP LOCKED"),
        ("accounts_user", '"accounts_user"."is_active"'),
    )
    assert sum("SKIP LOCKED" in s and "agent_sessions_work" in s for s in prepared) == 2  # lapsed, claimable
