"""Compile a hot QuerySet once per process, then run it with new values (issue 9: the request path).

Building and compiling a QuerySet with many Q objects costs milliseconds of Python per request (the
store access query: several EXISTS subqueries and joins; bench/RESULTS.md has the profile). Its SQL
only changes with the values bound into it, so `CompiledQuery` builds the QuerySet ONCE with sentinel
values, keeps the SQL Django compiled, finds where each sentinel landed among the parameters, and on
every call executes that SQL with the real values in those places. Rows become model instances exactly
as `QuerySet.__iter__` makes them (same converters, `select_related` objects and annotations), so the
query stays the single source of truth: nothing is rewritten by hand.

The SQL runs as a server-side prepared statement (`prepared_cursor`): PostgreSQL plans it once per
connection instead of on every request (planning the access query took several milliseconds, far more
than running it). Django's own cursors bind parameters client-side and never prepare.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.db import connections
from django.db.models import QuerySet
from django.db.models.query import get_related_populators

_NO_AUTOMATIC_PREPARE = 2**31 - 1


class _AlwaysPreparedCursor(psycopg.Cursor):
    """A server-side-binding psycopg cursor whose statements are always prepared (once per connection)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)

    def _send_query_prepared(self, name, pgq, *, binary=None):
        # psycopg records the last query only on the unprepared path; Django's query log (and
        # CaptureQueriesContext) reads it from `_query`, so record it here too ($n placeholders).
        self._query = pgq
        super()._send_query_prepared(name, pgq, binary=binary)


@contextlib.contextmanager
def prepared_cursor(using: str = "default") -> Iterator[Any]:
    """A Django cursor (query logging, error wrapping, health checks and transactions as usual) whose
    statements PostgreSQL prepares once per connection and then only executes.

    Use it for hot, fixed SQL with `%s` / `%(name)s` placeholders whose parameters have unambiguous
    types (server-side binding: PostgreSQL, not psycopg, types each parameter).
    """
    connection = connections[using]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django opens connections with prepare_threshold=None, which disables even explicit prepares.
        # Its own cursors bind client-side and can never prepare, so a finite threshold changes nothing
        # for them; a huge one keeps psycopg from auto-preparing anything we did not ask for.
        raw.prepare_threshold = _NO_AUTOMATIC_PREPARE
    with connection.wrap_database_errors:
        cursor = connection._prepare_cursor(_AlwaysPreparedCursor(raw))
    try:
        yield cursor
    finally:
        cursor.close()


class _Compiled:
    def __init__(self, queryset: QuerySet, sentinels: dict[str, Any], using: str):
        compiler = queryset.query.get_compiler(using=using)
        self.sql, params = compiler.as_sql()  # also fills compiler.select / klass_info / annotation_col_map
        self.params = list(params)
        self.slots: list[tuple[int, str]] = []
        for index, value in enumerate(self.params):
            for name, sentinel in sentinels.items():
                if type(value) is type(sentinel) and value == sentinel:
                    self.slots.append((index, name))
        missing = set(sentinels) - {name for _, name in self.slots}
        if missing:
            raise ValueError(f"sentinel(s) {sorted(missing)} do not appear among the query's parameters")
        self.compiler = compiler
        self.model = compiler.klass_info["model"]
        select_fields = compiler.klass_info["select_fields"]
        self.start, self.end = select_fields[0], select_fields[-1] + 1
        self.init_list = [f[0].target.attname for f in compiler.select[self.start : self.end]]
        self.related = get_related_populators(compiler.klass_info, compiler.select, using)
        self.annotations = dict(compiler.annotation_col_map or {})
        self.using = using

    def run(self, values: dict[str, Any]) -> list:
        params = list(self.params)
        for index, name in self.slots:
            params[index] = values[name]
        with prepared_cursor(self.using) as cursor:
            cursor.execute(self.sql, params)
            rows = cursor.fetchall()
        out = []
        for row in self.compiler.results_iter([rows]):
            obj = self.model.from_db(self.using, self.init_list, row[self.start : self.end])
            for populator in self.related:
                populator.populate(row, obj)
            for attr, position in self.annotations.items():
                setattr(obj, attr, row[position])
            out.append(obj)
        return out


class CompiledQuery:
    """A QuerySet built by `build(**values)`, compiled once per database alias and re-run per call.

    build: returns a QuerySet of model instances (no `values()`/`values_list()`); it must bind every
    value only as a query parameter (never to choose the query's shape). sentinels: one distinctive
    value per keyword, of the type the real values have (e.g. a fixed UUID); each must appear among the
    compiled parameters. `all(**values)` returns the list of instances; `first(**values)` the first or
    None. Thread-safe (a race compiles twice, harmlessly).
    """

    def __init__(self, build: Callable[..., QuerySet], **sentinels: Any):
        self.build = build
        self.sentinels = sentinels
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def _get(self, using: str) -> _Compiled:
        compiled = self._compiled.get(using)
        if compiled is None:
            compiled = _Compiled(self.build(**self.sentinels), self.sentinels, using)
            with self._lock:
                self._compiled[using] = compiled
        return compiled

    def all(self, using: str = "default", **values: Any) -> list:
        return self._get(using).run(values)

    def first(self, using: str = "default", **values: Any):
        found = self.all(using, **values)
        return found[0] if found else None
