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
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg._queries
import psycopg.sql
from django.db import connections
from django.db.models import QuerySet
from django.db.models.query import get_related_populators
from django.db.transaction import TransactionManagementError
from psycopg import pq

_NO_AUTOMATIC_PREPARE = 2**31 - 1

# psycopg caches the conversion of a query's placeholders (%s -> $n) only for queries up to 4,096 bytes;
# longer ones are re-parsed on every execution. The token + store statement (`CompiledLateral`) is about
# 9 KB, all of it fixed text, so the limit is raised for the process. The cache is an LRU of 128 entries
# shared by every query with parameters, so the only cost is memory for a few long strings. A private
# constant of psycopg (pinned exactly in requirements.txt); tests/foundation/test_compiled.py checks it.
PSYCOPG_CACHED_QUERY_BYTES = 64 * 1024
psycopg._queries.MAX_CACHED_STATEMENT_LENGTH = max(
    psycopg._queries.MAX_CACHED_STATEMENT_LENGTH, PSYCOPG_CACHED_QUERY_BYTES
)


STALE_PLAN_MESSAGE = "cached plan must not change result type"


class _AlwaysPreparedCursor(psycopg.Cursor):
    """A server-side-binding psycopg cursor whose statements are always prepared (once per connection).

    A table whose columns changed type under a prepared statement (`ALTER TABLE … ALTER COLUMN … TYPE`, a
    migration run while servers serve) makes PostgreSQL refuse the statement on this connection until it
    is re-prepared ("cached plan must not change result type"; nothing ran). The connection is closed and
    the refusal raised as a psycopg OperationalError, which Django wraps and the API answers as a 503 with
    Retry-After (a database fault, SPEC §2): the retry gets a new connection, which prepares afresh.
    Without this, every request on that connection was a 500 until `DB_CONN_MAX_AGE` replaced it.
    """

    def execute(self, query, params=None, *, prepare=None, binary=None):
        try:
            return super().execute(query, params, prepare=True, binary=binary)
        except psycopg.errors.FeatureNotSupported as exc:
            self._raise_if_stale(exc)
            raise

    def executemany(self, query, params_seq, *, returning=True):
        # Django's cursor wrapper calls executemany(sql, param_list): keep every statement's rows (psycopg
        # sends them all in one pipeline, each prepared; `fetchall()` / `nextset()` walk the results).
        try:
            return super().executemany(query, params_seq, returning=returning)
        except psycopg.errors.FeatureNotSupported as exc:
            self._raise_if_stale(exc)
            raise

    def _raise_if_stale(self, exc: psycopg.errors.FeatureNotSupported) -> None:
        if STALE_PLAN_MESSAGE in str(exc):
            self.connection.close()  # its prepared statements are stale; Django opens a new connection next
            raise psycopg.OperationalError(f"a prepared statement went stale (a table changed); retry: {exc}") from exc

    def _send_query_prepared(self, name, pgq, *, binary=None):
        # psycopg records the last query only on the unprepared path; Django's query log (and
        # CaptureQueriesContext) reads it from `_query`, so record it here too ($n placeholders).
        self._query = pgq
        super()._send_query_prepared(name, pgq, binary=binary)


_IDLE_CURSORS = "_compiled_idle_cursors"  # on Django's connection wrapper: (psycopg connection, [cursors])


@contextlib.contextmanager
def prepared_cursor(using: str = "default", *, binary: bool = False) -> Iterator[Any]:
    """A Django cursor (query logging, error wrapping, health checks and transactions as usual) whose
    statements PostgreSQL prepares once per connection and then only executes.

    Use it for hot, fixed SQL with `%s` / `%(name)s` placeholders whose parameters have unambiguous
    types (server-side binding: PostgreSQL, not psycopg, types each parameter). `binary`: results in
    PostgreSQL's binary format (every column type must have a binary loader; Django's converters and
    JSON fields expect text). The psycopg cursor under it is reused by the connection's next
    `prepared_cursor` (nested blocks each get their own): a cursor only holds its last result, and
    creating one (with its copy of the adapters) cost more than a short statement's own Python. A closed
    cursor, one of a replaced connection, one whose settings (adapters included) a caller changed, or one
    made before its connection's adapters changed is never reused.
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
    idle = connection.__dict__.get(_IDLE_CURSORS)
    if idle is None or idle[0] is not raw:
        idle = connection.__dict__[_IDLE_CURSORS] = (raw, [])
    with connection.wrap_database_errors:
        psycopg_cursor = idle[1].pop() if idle[1] else None
        while psycopg_cursor is not None and not _as_made(psycopg_cursor):  # the connection's adapters changed
            psycopg_cursor.close()
            psycopg_cursor = idle[1].pop() if idle[1] else None
        if psycopg_cursor is None:
            psycopg_cursor = _AlwaysPreparedCursor(raw)
        psycopg_cursor.format = pq.Format.BINARY if binary else pq.Format.TEXT
        cursor = connection._prepare_cursor(psycopg_cursor)
    try:
        yield cursor
    finally:
        if psycopg_cursor.closed or raw.closed or not _as_made(psycopg_cursor):
            psycopg_cursor.close()
        else:
            idle[1].append(psycopg_cursor)


def _as_made(cursor: _AlwaysPreparedCursor) -> bool:
    """True when `cursor`'s settings are those a new cursor of its connection would get now, its format aside
    (set on every use): row factory, arraysize and adapters. psycopg's adapters maps are copy-on-write: a
    cursor shares its connection's loader and dumper tables until a loader or dumper is registered on either,
    so the tables compare by identity (about 0.3 µs) unless a caller registered one on the cursor or the
    connection's changed since the cursor was made. Private attributes of psycopg (pinned in
    requirements.txt; tests/foundation/test_compiled.py checks both cases)."""
    connection = cursor.connection
    mine, theirs = cursor.adapters, connection.adapters
    return (
        cursor.row_factory is connection.row_factory
        and cursor.arraysize == 1
        and mine._loaders == theirs._loaders
        and mine._dumpers == theirs._dumpers
        and mine._dumpers_by_oid == theirs._dumpers_by_oid
    )


_PLACEHOLDER = re.compile(r"%%|%s")


def _literal(value: Any) -> str | None:
    """`value` as an SQL literal when it is a plain constant (bool, int, str and their subclasses, such as
    the policy's TextChoices), else None. Quoting is psycopg's (`psycopg.sql.Literal`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return psycopg.sql.Literal(str.__str__(value)).as_string(None)
    return None


def _inline_constants(sql: str, params: list, slots: list[tuple[int, str]]) -> tuple[str, list, list]:
    """Write the constant parameters of a compiled query into its text; keep the slots as parameters.

    A policy query carries its constants (scope and role names, visibility, ``EXISTS (SELECT 1 …)``) as
    parameters: the access query had 27 of them, each typed and sent on every call, for two values
    that change. Returns (sql, params, slots) with only non-constant values and the slots left, slot
    indexes renumbered. The statement means the same; PostgreSQL plans it with the constants in view.
    """
    slot_names = dict(slots)
    kept, kept_slots, position = [], [], 0

    def substitute(match: re.Match) -> str:
        nonlocal position
        if match.group() == "%%":
            return "%%"
        index, position = position, position + 1
        value = params[index]
        literal = None if index in slot_names else _literal(value)
        if literal is not None:
            return literal.replace("%", "%%")
        if index in slot_names:
            kept_slots.append((len(kept), slot_names[index]))
        kept.append(value)
        return "%s"

    return _PLACEHOLDER.sub(substitute, sql), kept, kept_slots


def _fetch(using: str, sql: str, params: list, slots: list[tuple[int, str]], values: dict[str, Any]) -> list:
    """Run prepared `sql` with `params`, each (index, name) of `slots` replaced by ``values[name]``."""
    params = list(params)
    for index, name in slots:
        params[index] = values[name]
    with prepared_cursor(using) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _fetch_many(using: str, sql: str, params: list, slots: list[tuple[int, str]], values_seq: list[dict]) -> list:
    """Run prepared `sql` once per mapping of `values_seq`, all in ONE round trip (a psycopg pipeline);
    return each execution's rows, in order. The server runs them one after another, in that order."""
    batches = []
    for values in values_seq:
        batch = list(params)
        for index, name in slots:
            batch[index] = values[name]
        batches.append(batch)
    if not batches:
        return []
    with prepared_cursor(using) as cursor:
        cursor.executemany(sql, batches)  # Django's wrapper: query log, error wrapping
        results = [cursor.fetchall()]
        while cursor.nextset():
            results.append(cursor.fetchall())
    return results


class _Compiled:
    def __init__(self, queryset: QuerySet, sentinels: dict[str, Any], using: str, lock_clause: str = ""):
        compiler = queryset.query.get_compiler(using=using)
        self.sql, params = compiler.as_sql()  # also fills compiler.select / klass_info / annotation_col_map
        self.sql += lock_clause
        self.params = list(params)
        self.slots: list[tuple[int, str]] = []
        for index, value in enumerate(self.params):
            for name, sentinel in sentinels.items():
                if type(value) is type(sentinel) and value == sentinel:
                    self.slots.append((index, name))
        missing = set(sentinels) - {name for _, name in self.slots}
        if missing:
            raise ValueError(f"sentinel(s) {sorted(missing)} do not appear among the query's parameters")
        self.sql, self.params, self.slots = _inline_constants(self.sql, self.params, self.slots)
        self.compiler = compiler
        self.model = compiler.klass_info["model"]
        select_fields = compiler.klass_info["select_fields"]
        self.start, self.end = select_fields[0], select_fields[-1] + 1
        self.init_list = [f[0].target.attname for f in compiler.select[self.start : self.end]]
        self.related = get_related_populators(compiler.klass_info, compiler.select, using)
        self.annotations = dict(compiler.annotation_col_map or {})
        self.using = using
        fields = [column[0] for column in compiler.select[0 : compiler.col_count]]
        if compiler.has_composite_fields(fields):
            raise ValueError("composite primary keys are not supported by CompiledQuery")
        self.converters = compiler.get_converters(fields)
        self.for_update = queryset.query.select_for_update or bool(lock_clause)

    def _check_transaction(self) -> None:
        """Django refuses `select_for_update()` in autocommit mode when it compiles the query; a compiled
        query skips that step, so the same refusal is made here: a row lock outside a transaction would
        be released as soon as the statement ends, silently protecting nothing."""
        if self.for_update and connections[self.using].get_autocommit():
            raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")

    def run(self, values: dict[str, Any]) -> list:
        self._check_transaction()
        rows = _fetch(self.using, self.sql, self.params, self.slots, values)
        return [self.instance(row) for row in self.convert(rows)]

    def run_many(self, values_seq: list[dict[str, Any]]) -> list[list]:
        self._check_transaction()
        return [
            [self.instance(row) for row in self.convert(rows)]
            for rows in _fetch_many(self.using, self.sql, self.params, self.slots, values_seq)
        ]

    def convert(self, rows: list) -> list:
        """Apply the fields' database converters to raw `rows` (what `results_iter` does, with the
        converters looked up once per process instead of once per call)."""
        if self.converters:
            return list(self.compiler.apply_converters(rows, self.converters))
        return rows

    def instance(self, row) -> Any:
        """The model instance (with its `select_related` objects and annotations) of one converted row."""
        obj = self.model.from_db(self.using, self.init_list, row[self.start : self.end])
        for populator in self.related:
            populator.populate(row, obj)
        for attr, position in self.annotations.items():
            setattr(obj, attr, row[position])
        return obj


class _Lateral:
    """`outer` LEFT JOIN LATERAL `inner` in one statement; some of inner's parameters are outer's columns."""

    def __init__(self, outer: _Compiled, inner: _Compiled, bind: dict[str, str]):
        self.outer, self.inner, self.using = outer, inner, outer.using
        self.width = outer.compiler.col_count
        columns = {name: outer.start + outer.init_list.index(attname) for name, attname in bind.items()}
        bound = {index: name for index, name in inner.slots if name in columns}
        missing = set(bind) - set(bound.values())
        if missing:
            raise ValueError(f"bound name(s) {sorted(missing)} are not parameters of the inner query")
        params, slots, position = list(outer.params), list(outer.slots), 0

        def substitute(match: re.Match) -> str:
            nonlocal position
            if match.group() == "%%":
                return "%%"
            index, position = position, position + 1
            if index in bound:
                return f"compiled_outer.c{columns[bound[index]]}"
            slot = [name for i, name in inner.slots if i == index]
            if slot:
                slots.append((len(params), slot[0]))
            params.append(inner.params[index])
            return "%s"

        inner_sql = _PLACEHOLDER.sub(substitute, inner.sql)
        outer_names = ", ".join(f"c{i}" for i in range(self.width))
        inner_names = ", ".join(f"d{i}" for i in range(inner.compiler.col_count))
        # Both sides are SQL Django compiled from QuerySets; values stay parameters.
        self.sql = (
            f"SELECT * FROM ({outer.sql}) AS compiled_outer({outer_names}) "  # noqa: S608
            f"LEFT JOIN LATERAL ({inner_sql}) AS compiled_inner({inner_names}) ON true"
        )
        self.params, self.slots = params, slots
        self.inner_pk = inner.start + inner.init_list.index(inner.model._meta.pk.attname)

    def run(self, values: dict[str, Any]) -> list[tuple[Any, Any]]:
        rows = _fetch(self.using, self.sql, self.params, self.slots, values)
        out = []
        for row in rows:
            head, tail = row[: self.width], row[self.width :]
            first = self.outer.instance(self.outer.convert([head])[0])
            second = None if tail[self.inner_pk] is None else self.inner.instance(self.inner.convert([tail])[0])
            out.append((first, second))
        return out


class CompiledQuery:
    """A QuerySet built by `build(**values)`, compiled once per database alias and re-run per call.

    build: returns a QuerySet of model instances (no `values()`/`values_list()`); it must bind every
    value only as a query parameter (never to choose the query's shape). sentinels: one distinctive
    value per keyword, of the type the real values have (e.g. a fixed UUID); each must appear among the
    compiled parameters. `all(**values)` returns the list of instances; `first(**values)` the first or
    None. Thread-safe (a race compiles twice, harmlessly).
    """

    lock_clause = ""  # appended to the compiled SQL (`CompiledSharedLock`)

    def __init__(self, build: Callable[..., QuerySet], **sentinels: Any):
        self.build = build
        self.sentinels = sentinels
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def _get(self, using: str) -> _Compiled:
        compiled = self._compiled.get(using)
        if compiled is None:
            compiled = _Compiled(self.build(**self.sentinels), self.sentinels, using, self.lock_clause)
            with self._lock:
                self._compiled[using] = compiled
        return compiled

    def all(self, using: str = "default", **values: Any) -> list:
        return self._get(using).run(values)

    def first(self, using: str = "default", **values: Any):
        found = self.all(using, **values)
        return found[0] if found else None

    def many(self, values_seq, using: str = "default") -> list[list]:
        """Run the query once per mapping in `values_seq` (each as `all`'s keywords), in order, in ONE round
        trip: the executions are pipelined, each a prepared statement of its own. Returns one list of
        instances per mapping. The server runs them sequentially in that order, so row locks
        (``select_for_update``) are taken in it, each waiting as a statement of its own would; the first
        error ends the batch (inside a transaction, the transaction is then aborted, as usual)."""
        return self._get(using).run_many(list(values_seq))


class CompiledSharedLock(CompiledQuery):
    """A `CompiledQuery` whose rows are locked ``FOR SHARE`` or ``FOR KEY SHARE`` (`strength` ``"share"`` or
    ``"key share"``), the two strengths Django's ORM has no spelling for: the clause is appended to the SQL
    Django compiled, which must not lock rows itself. Like a compiled `select_for_update`, it refuses to run
    outside a transaction (TransactionManagementError)."""

    def __init__(self, build: Callable[..., QuerySet], strength: str, **sentinels: Any):
        if strength not in ("share", "key share"):
            raise ValueError(f"strength must be 'share' or 'key share', not {strength!r}")
        super().__init__(build, **sentinels)
        self.lock_clause = f" FOR {strength.upper()}"


class CompiledLateral:
    """Two compiled queries in ONE statement: each row of `outer` (``LEFT JOIN LATERAL``) the first row of
    `inner`, where some of inner's parameters are taken from outer's columns — e.g. a token looked up by
    digest, and the store its user may read, in one round trip instead of two.

    bind: inner's keyword -> the attname of outer's model column that supplies it (``{"user_id":
    "user_id"}``). The other keywords of both queries are passed to `all`/`first` as values. Inner should
    be sliced to one row (``[:1]``). `all(**values)` returns ``[(outer instance, inner instance or None)]``;
    `first(**values)` the first pair or ``(None, None)``. Each side's SQL is its QuerySet's own, so
    neither policy is written twice; only the glue (the join and the bound parameter) is ours.
    Raises ValueError at first use when a bound keyword is not among inner's parameters.
    """

    def __init__(self, outer: CompiledQuery, inner: CompiledQuery, *, bind: dict[str, str]):
        self.outer, self.inner, self.bind = outer, inner, bind
        self._compiled: dict[str, _Lateral] = {}

    def _get(self, using: str) -> _Lateral:
        compiled = self._compiled.get(using)
        if compiled is None:
            compiled = self._compiled[using] = _Lateral(self.outer._get(using), self.inner._get(using), self.bind)
        return compiled

    def all(self, using: str = "default", **values: Any) -> list[tuple[Any, Any]]:
        return self._get(using).run(values)

    def first(self, using: str = "default", **values: Any) -> tuple[Any, Any]:
        found = self.all(using, **values)
        return found[0] if found else (None, None)
