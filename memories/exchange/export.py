"""Stream a store out as the JSON Lines of SPEC §8b, in constant memory, from one consistent snapshot.

`export_lines` runs in one REPEATABLE READ, READ ONLY transaction (every section sees the same instant)
and reads each section through a server-side cursor in bounded batches, so a store of any size costs the
same Python memory. Redaction reasons are never read (they live in audit events); redacted entries,
summaries and versions are exported as redacted (their text is already gone from the database).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction

from accounts.models import User
from memories import tree
from memories.exchange.format import FORMAT, SQL_TIMESTAMP, VERSION, Chain, dump_line, timestamp
from memories.models import Entry, Summary
from stores.errors import StoreNotFound
from stores.models import ReaderGrant, Scope, Store
from versions.models import Memory, Version

_TABLES = {
    "entry": Entry._meta.db_table,
    "summary": Summary._meta.db_table,
    "user": User._meta.db_table,
    "store": Store._meta.db_table,
    "grant": ReaderGrant._meta.db_table,
    "memory": Memory._meta.db_table,
    "version": Version._meta.db_table,
}

_ENTRIES_SQL = """
SELECT e.seq, a.handle, {ts:e.created_at}, e.body_md, e.size_bytes, e.client_nonce, e.session_id::text,
       e.provenance, {ts:e.redacted_at}, r.handle
FROM {entry} e JOIN {user} a ON a.id = e.author_id LEFT JOIN {user} r ON r.id = e.redacted_by_id
WHERE e.store_id = %s ORDER BY e.seq
"""

_SUMMARIES_SQL = """
SELECT s.start, s."end", a.handle, {ts:s.created_at}, s.model, s.generation, s.source_digest, s.size_bytes,
       s.summary_md, {ts:s.invalidated_at}, i.handle, {ts:s.redacted_at}
FROM {summary} s JOIN {user} a ON a.id = s.author_id LEFT JOIN {user} i ON i.id = s.invalidated_by_id
WHERE s.store_id = %s ORDER BY s.level, s.start, s.created_at, s.id
"""

_VERSIONS_SQL = """
SELECT id::text, memory_id::text, operation, path, content, content_sha256, content_size_bytes, created_by,
       {ts:created_at}, {ts:redacted_at}, redacted_by
FROM {version} WHERE store_id = %s ORDER BY created_at, id
"""

_MEMORIES_SQL = """
SELECT id::text, path, content_sha256, current_version_id::text, {ts:created_at}, {ts:updated_at}
FROM {memory} WHERE store_id = %s ORDER BY path
"""

_READERS_SQL = """
SELECT u.handle, g.active, b.handle, {ts:g.created_at}, {ts:g.updated_at}
FROM {grant} g JOIN {user} u ON u.id = g.user_id LEFT JOIN {user} b ON b.id = g.granted_by_id
WHERE g.store_id = %s ORDER BY lower(u.handle) COLLATE "C"
"""

# Every handle the file names, so an import can check them all before it writes anything.
_HANDLES_SQL = """
SELECT handle FROM {user} WHERE id IN (
    SELECT author_id FROM {entry} WHERE store_id = %(s)s
    UNION SELECT redacted_by_id FROM {entry} WHERE store_id = %(s)s AND redacted_by_id IS NOT NULL
    UNION SELECT author_id FROM {summary} WHERE store_id = %(s)s
    UNION SELECT invalidated_by_id FROM {summary} WHERE store_id = %(s)s AND invalidated_by_id IS NOT NULL
    UNION SELECT user_id FROM {grant} WHERE store_id = %(s)s
    UNION SELECT granted_by_id FROM {grant} WHERE store_id = %(s)s AND granted_by_id IS NOT NULL
    UNION SELECT owner_id FROM {store} WHERE id = %(s)s AND owner_id IS NOT NULL
    UNION SELECT created_by_id FROM {store} WHERE id = %(s)s AND created_by_id IS NOT NULL
) ORDER BY handle COLLATE "C"
"""

_COUNTS_SQL = """
SELECT now(),
       (SELECT count(*) FROM {summary} WHERE store_id = %(s)s),
       (SELECT count(*) FROM {version} WHERE store_id = %(s)s),
       (SELECT count(*) FROM {memory} WHERE store_id = %(s)s),
       (SELECT count(*) FROM {grant} WHERE store_id = %(s)s)
"""


class _Timestamp:
    def __format__(self, column: str) -> str:
        return SQL_TIMESTAMP.format(column)


@functools.cache
def _sql(template: str) -> str:
    """A statement above with the real table names filled in and timestamps rendered by PostgreSQL."""
    return template.format(ts=_Timestamp(), **_TABLES)


BATCH_ROWS = {"entries": 2000, "summaries": 2000, "versions": 50, "memories": 500, "readers": 500}


def _subject(store: Store) -> dict[str, str]:
    if store.scope == Scope.PROJECT:
        return {"project": store.project.slug}
    if store.scope == Scope.BOARD:
        return {"section": store.section.slug}
    return {"handle": store.owner.handle}


def _rows(template: str, store_id, section: str) -> Iterator[tuple]:
    """Rows of one section's statement through a server-side cursor, a bounded batch at a time."""
    with connection.chunked_cursor() as cursor:
        cursor.execute(_sql(template), [store_id])
        while rows := cursor.fetchmany(BATCH_ROWS[section]):
            yield from rows


def _json(value):
    """A jsonb column as read by a raw cursor (Django's psycopg setup hands jsonb over as text)."""
    return json.loads(value) if isinstance(value, str) else value


def header(store: Store, *, handles: list[str], counts: dict[str, int]) -> dict[str, Any]:
    """The first line: format, version, the store's metadata, section counts and every handle named."""
    return {
        "type": FORMAT,
        "version": VERSION,
        "store": {
            "id": str(store.pk),
            "scope": store.scope,
            "subject": _subject(store),
            "canonical": store.canonical,
            "name": store.name,
            "description_md": store.description,
            "metadata": store.metadata,
            "visibility": store.visibility,
            "generation": store.generation,
            "created_by": store.created_by.handle if store.created_by_id else None,
            "created_at": timestamp(store.created_at),
            "updated_at": timestamp(store.updated_at),
            "archived_at": timestamp(store.archived_at),
        },
        "counts": counts,
        "handles": handles,
    }


def _content_lines(store_id) -> Iterator[dict[str, Any]]:
    for seq, author, created_at, body, size, nonce, session_id, provenance, redacted_at, redacted_by in _rows(
        _ENTRIES_SQL, store_id, "entries"
    ):
        yield {
            "type": "entry",
            "seq": seq,
            "author": author,
            "created_at": created_at,
            "body_md": body,
            "size_bytes": size,
            "client_nonce": nonce,
            "session_id": session_id,
            "provenance": _json(provenance),
            "redacted_at": redacted_at,
            "redacted_by": redacted_by,
        }
    for row in _rows(_SUMMARIES_SQL, store_id, "summaries"):
        start, end, author, created_at, model, generation, digest, size, text, invalidated_at, by, redacted_at = row
        yield {
            "type": "summary",
            "range": tree.Block(start, end - start + 1).label,
            "author": author,
            "created_at": created_at,
            "model": model,
            "generation": generation,
            "source_digest": digest,
            "size_bytes": size,
            "summary_md": text,
            "invalidated_at": invalidated_at,
            "invalidated_by": by,
            "redacted_at": redacted_at,
        }
    for vid, mid, operation, path, content, sha, size, created_by, created_at, redacted_at, redacted_by in _rows(
        _VERSIONS_SQL, store_id, "versions"
    ):
        yield {
            "type": "version",
            "id": vid,
            "memory_id": mid,
            "operation": operation,
            "path": path,
            "content": content,
            "content_sha256": sha,
            "content_size_bytes": size,
            "created_by": _json(created_by),
            "created_at": created_at,
            "redacted_at": redacted_at,
            "redacted_by": _json(redacted_by),
        }
    for mid, path, sha, version_id, created_at, updated_at in _rows(_MEMORIES_SQL, store_id, "memories"):
        yield {
            "type": "memory",
            "id": mid,
            "path": path,
            "content_sha256": sha,
            "current_version_id": version_id,
            "created_at": created_at,
            "updated_at": updated_at,
        }
    for handle, active, granted_by, created_at, updated_at in _rows(_READERS_SQL, store_id, "readers"):
        yield {
            "type": "reader",
            "handle": handle,
            "active": active,
            "granted_by": granted_by,
            "created_at": created_at,
            "updated_at": updated_at,
        }


def export_lines(store: Store) -> Iterator[bytes]:
    """Yield the export of `store` line by line (each line ends with a newline; SPEC §8b).

    The caller checked the owner right. One REPEATABLE READ, READ ONLY transaction: the header's counts
    and every section describe the same instant, however long the client takes to read. Queries: one for
    the store, two for counts and handles, one server-side cursor per section.
    """
    outer = connection.in_atomic_block  # inside a caller's transaction (tests), its snapshot rules
    with transaction.atomic():
        if not outer:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        # a store deleted since the caller's access check is gone here too (its rows may wait for the purge)
        snapshot = (
            Store.objects.select_related("owner", "project", "section", "created_by")
            .filter(pk=store.pk, deleted_at__isnull=True)
            .first()
        )
        if snapshot is None:
            raise StoreNotFound()
        with connection.cursor() as cursor:
            cursor.execute(_sql(_COUNTS_SQL), {"s": snapshot.pk})
            # now() is the transaction's start: the instant of the snapshot every section shows.
            snapshot_at, summaries, versions, memories, readers = cursor.fetchone()
            cursor.execute(_sql(_HANDLES_SQL), {"s": snapshot.pk})
            handles = [handle for (handle,) in cursor.fetchall()]
        counts = {
            "entries": snapshot.entry_count,
            "summaries": summaries,
            "versions": versions,
            "memories": memories,
            "readers": readers,
        }
        chain = Chain()
        lines = 0
        for obj in itertools.chain([header(snapshot, handles=handles, counts=counts)], _content_lines(snapshot.pk)):
            line = dump_line(obj)
            chain.update(line[:-1])
            lines += 1
            yield line
        yield dump_line({"type": "end", "lines": lines, "sha256": chain.state, "exported_at": timestamp(snapshot_at)})


def export_chunks(store: Store, *, chunk_bytes: int = 64 * 1024) -> Iterator[bytes]:
    """`export_lines` grouped into blocks of about `chunk_bytes`, for a streaming HTTP response."""
    pending: list[bytes] = []
    size = 0
    lines = export_lines(store)
    try:
        for line in lines:
            pending.append(line)
            size += len(line)
            if size >= chunk_bytes:
                yield b"".join(pending)
                pending, size = [], 0
    finally:
        lines.close()  # closed early (the stream was cut): leave the transaction here, on this thread
    if pending:
        yield b"".join(pending)
