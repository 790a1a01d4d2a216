"""The connection health check without a round trip (config/postgresql, issue 17).

A persistent connection is checked before each request's first query. The backend answers from the
socket when the connection is idle and quiet, and falls back to Django's `SELECT 1` otherwise; a
connection the server has ended must still be replaced before the request uses it.
"""

from __future__ import annotations

import pytest
from django.db import connections

from config.postgresql.base import idle_and_quiet


def _fresh(alias: str = "default"):
    """A second Django connection wrapper to the test database (closed by the caller)."""
    return connections.create_connection(alias)


def _sent(wrapper) -> list[str]:
    """Record every statement psycopg sends on `wrapper`'s raw connection (including Django's SELECT 1)."""
    sent: list[str] = []
    raw = wrapper.connection
    original = raw.cursor

    def cursor(*args, **kwargs):
        cur = original(*args, **kwargs)
        execute = cur.execute

        def recording(query, *a, **k):
            sent.append(str(query))
            return execute(query, *a, **k)

        cur.execute = recording
        return cur

    raw.cursor = cursor
    return sent


@pytest.mark.django_db(transaction=True)
def test_an_idle_healthy_connection_is_checked_without_a_query():
    wrapper = _fresh()
    try:
        wrapper.ensure_connection()
        assert wrapper.health_check_enabled
        assert idle_and_quiet(wrapper.connection)
        sent = _sent(wrapper)
        wrapper.health_check_done = False  # what the start of each request does (close_old_connections)
        wrapper.close_if_health_check_failed()
        assert wrapper.connection is not None
        assert sent == []  # Django's own check would have sent "SELECT 1"
    finally:
        wrapper.close()


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_ended_is_replaced_before_the_request_uses_it():
    wrapper = _fresh()
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        # The server has sent its FATAL message and closed: the socket is readable, so the real check runs.
        assert not idle_and_quiet(wrapper.connection)
        wrapper.health_check_done = False
        wrapper.close_if_health_check_failed()
        with wrapper.cursor() as cursor:  # a new connection, not an error
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] != pid
    finally:
        wrapper.close()


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_or_after_an_error_the_full_check_runs():
    wrapper = _fresh()
    try:
        wrapper.ensure_connection()
        sent = _sent(wrapper)
        wrapper.errors_occurred = True
        assert wrapper.is_usable()
        assert sent == ["SELECT 1"]
        wrapper.errors_occurred = False
        with wrapper.cursor() as cursor:
            wrapper.set_autocommit(False)
            cursor.execute("SELECT 1 + 1")
            assert not idle_and_quiet(wrapper.connection)  # in a transaction: not "idle"
            wrapper.rollback()
            wrapper.set_autocommit(True)
    finally:
        wrapper.close()


def test_a_missing_connection_is_not_quiet():
    assert not idle_and_quiet(None)
