"""Django's PostgreSQL backend, with a connection health check that costs no round trip (issue 17).

With `CONN_HEALTH_CHECKS`, Django runs ``SELECT 1`` on a persistent connection before the first query of
every request (`is_usable`): one extra round trip per request, a quarter of a note's. This backend
checks the idle connection locally first: when libpq reports the connection OK and idle, and its socket
has nothing to read, the connection is healthy. A server that restarted, crashed or closed the
connection (idle timeout, `pg_terminate_backend`) has sent a FATAL message or a FIN, so the socket
is readable — and then the full ``SELECT 1`` check runs as before and the connection is replaced when
it fails. A host that vanished without a word (partition, freeze) is caught by neither check; the
request deadline of `config.database` bounds that case, as it did before.

It also parses ``timestamptz`` values with psycopg's C parser instead of Django's Python subclass of
psycopg's Python loader (`config.postgresql.loaders`): the same values, a few microseconds less each.

Nothing else differs from `django.db.backends.postgresql`.
"""

from __future__ import annotations

import functools
import select
from typing import Any

from django.db.backends.postgresql import base
from psycopg import adapt, pq

from config.postgresql.loaders import register_timestamptz_loader


@functools.cache
def _adapters(template: adapt.AdaptersMap, timezone: Any) -> adapt.AdaptersMap:
    """Django's adapters map for its time zone, with our timestamptz loader; one per (map, zone)."""
    adapters = adapt.AdaptersMap(template)
    register_timestamptz_loader(timezone, adapters)
    return adapters


def idle_and_quiet(connection) -> bool:
    """True when psycopg `connection` is open, idle outside a transaction and its socket has no pending input.

    Never blocks and never sends anything. False means "unknown": run the real check.
    """
    try:
        pgconn = connection.pgconn
        if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status != pq.TransactionStatus.IDLE:
            return False
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except Exception:  # closed, or the socket is gone: let the real check decide
        return False


class DatabaseWrapper(base.DatabaseWrapper):
    """`django.db.backends.postgresql` with `is_usable` answering from the socket when it can, and
    timestamptz values parsed by psycopg's C loader (same values as Django's loader)."""

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if isinstance(params.get("context"), adapt.AdaptersMap):  # Django's per-time-zone map
            params["context"] = _adapters(params["context"], self.timezone)
        return params

    def is_usable(self) -> bool:
        if self.connection is None:
            return False
        if not self.errors_occurred and idle_and_quiet(self.connection):
            return True
        return super().is_usable()
