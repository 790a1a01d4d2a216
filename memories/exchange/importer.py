"""Recreate a store from its export (SPEC §8b; docs/export-import.md).

`Importer` verifies an export line by line (`memories.exchange.verify`) and writes each section into its
target store in bounded batches (PostgreSQL COPY), so memory stays constant whatever the file size. What
a single line cannot tell — a client_nonce used twice, a summary whose `source_digest` does not match the
children that precede it, a file memory whose head is not the last version of its history, a path under
another memory — is checked against the rows already written, in the same transaction. The end line's
count and chain prove the file complete and unchanged.

Two drivers share it:
- `import_file` (manage.py import_store): everything in one transaction; any error rolls all of it back.
- the resumable HTTP import (`start_upload`, `append_chunk`, `abort_upload`): the store is created hidden
  (`Store.importing`), each chunk of whole lines is verified and written in its own transaction (so every
  request stays short), the importer's state is saved in its `StoreImport`, and the chunk holding the
  end line makes the store visible. A failed chunk changes nothing; an abandoned import is deleted.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, BinaryIO

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Lower, Now
from psycopg.types.json import Jsonb

from accounts.models import Project, Section, User
from config.errors import Conflict, InvalidRequest, NotFound
from memories import tree
from memories.exchange import verify
from memories.exchange.format import Chain
from memories.exchange.verify import SECTION_OF_TYPE, SECTIONS, Header, ImportInvalid
from memories.models import Entry, ImportStatus, StoreImport, Summary
from stores.models import ReaderGrant, Scope, Store
from stores.selectors import Subject
from versions.actors import ID_KEYS
from versions.models import Memory, Operation, Version

BATCH_LINES = 2000
BATCH_BYTES = 8 * 1024 * 1024
ANALYZE_EVERY_ROWS = 20_000


class UnknownHandles(InvalidRequest):
    """Handles the file names that no user on this server has; reported all at once, nothing imported."""

    message = "The file names users that do not exist on this server."


class StoreNotEmpty(Conflict):
    reason = "store_not_empty"
    message = "An import can only fill an empty store."


class ImportNotFound(NotFound):
    message = "Import not found."


class ImportOffsetMismatch(Conflict):
    reason = "import_offset_mismatch"
    message = "from_line is not the next line this import expects; resume from details.next_line."


class ImportCommitted(Conflict):
    reason = "import_committed"
    message = "This import is complete; its store is details.store_id."


def _table(model) -> str:
    return model._meta.db_table


# The checks against rows already written (one indexed query per batch each), with table names filled in.
_SQL = {
    "nonces": "SELECT e.author_id::text, e.client_nonce FROM {entry} e "
    "JOIN unnest(%s::uuid[], %s::text[]) AS w(author, nonce) ON e.author_id = w.author AND e.client_nonce = w.nonce "
    "WHERE e.store_id = %s",
    "entry_texts": "SELECT seq, body_md FROM {entry} WHERE store_id = %s AND seq = ANY(%s)",
    "summary_texts": 'SELECT s.start, s."end", s.summary_md FROM {summary} s '
    'JOIN unnest(%s::bigint[], %s::bigint[]) AS w(start, stop) ON s.start = w.start AND s."end" = w.stop '
    "WHERE s.store_id = %s AND s.invalidated_at IS NULL",
    "version_taken": "SELECT id FROM {version} WHERE id = ANY(%s) LIMIT 1",
    "last_operation": "SELECT DISTINCT ON (memory_id) memory_id, operation FROM {version} "
    "WHERE store_id = %s AND memory_id = ANY(%s) ORDER BY memory_id, created_at DESC, id DESC",
    "heads": "SELECT id, memory_id, operation, path, content, content_sha256, content_size_bytes, redacted_at "
    "FROM {version} WHERE store_id = %s AND id = ANY(%s)",
    "newest_version": "SELECT DISTINCT ON (memory_id) memory_id, id FROM {version} "
    "WHERE store_id = %s AND memory_id = ANY(%s) ORDER BY memory_id, created_at DESC, id DESC",
    "paths": "SELECT path FROM {memory} WHERE store_id = %s AND path = ANY(%s)",
    "memory_taken": "SELECT id FROM {memory} WHERE id = ANY(%s) LIMIT 1",
    # File histories whose newest version is not a deletion: each must be a current memory.
    "alive_histories": "SELECT count(*) FROM (SELECT DISTINCT ON (memory_id) operation FROM {version} "
    "WHERE store_id = %s ORDER BY memory_id, created_at DESC, id DESC) AS t WHERE operation <> 'deleted'",
}


@functools.cache
def sql(name: str) -> str:
    """The statement `name` of `_SQL` with the real table names."""
    tables = {"entry": Entry, "summary": Summary, "version": Version, "memory": Memory}
    return _SQL[name].format(**{key: _table(model) for key, model in tables.items()})


def resolve_handles(
    handles: Iterable[str], *, create_missing: bool = False, created: list[str] | None = None
) -> dict[str, str]:
    """Map each handle (case-insensitively) to a user id: ``{lowercase handle: id}``.

    Raises UnknownHandles listing every handle that has no user (``details.unknown_handles``), unless
    `create_missing`, which creates each as an inactive user with no password (manage.py only) and
    appends its handle to `created`, so the caller reports it.
    """
    wanted = {handle.lower(): handle for handle in handles}
    found = {
        handle.lower(): str(pk)
        for pk, handle in User.objects.annotate(low=Lower("handle"))
        .filter(low__in=list(wanted))
        .values_list("pk", "handle")
    }
    missing = sorted(wanted[low] for low in wanted if low not in found)
    if missing and not create_missing:
        raise UnknownHandles(
            f"These handles have no user on this server: {', '.join(missing)}. Create them first"
            " (or, as an operator, import with --create-missing-users).",
            details={"unknown_handles": missing},
        )
    for handle in missing:
        found[handle.lower()] = str(User.objects.create_user(handle, is_active=False).pk)
        if created is not None:
            created.append(handle)
    return found


# ------------------------------------------------------------------------------------------ target


def _subject_of(header: Header) -> Subject:
    """The subject named in the header, on this server (the user, project or section must exist)."""
    scope, name = header.store["scope"], header.store["subject"]
    if scope == Scope.USER:
        user = User.objects.filter(handle__iexact=name).first()
        return Subject(scope=scope, user=user)
    model = Project if scope == Scope.PROJECT else Section
    found = model.objects.filter(slug__iexact=name).first()
    if found is None:
        noun = "project" if scope == Scope.PROJECT else "section"
        raise ImportInvalid(1, f"the {noun} {name!r} does not exist on this server; create it first.")
    return Subject(scope=scope, project=found) if scope == Scope.PROJECT else Subject(scope=scope, section=found)


def _store_fields(header: Header, users: dict[str, str]) -> dict[str, Any]:
    meta = header.store
    return {
        "name": meta["name"],
        "description": meta["description"],
        "metadata": meta["metadata"],
        "generation": meta["generation"],
        "created_by_id": users[meta["created_by"]] if meta["created_by"] else None,
        "created_at": meta["created_at"],
        "updated_at": meta["updated_at"],
        "archived_at": meta["archived_at"],
    }


def create_pending_store(*, header: Header, users: dict[str, str], subject: Subject) -> tuple[Store, bool]:
    """Create the hidden store an import fills: the header's id when it is free (ids kept), else a new one.

    Returns ``(store, keep_ids)``. The store stays non-canonical and `importing` until `finish` commits.
    """
    visibility = (header.store["visibility"] or "private") if subject.scope == Scope.USER else None
    fields = {
        "scope": subject.scope,
        "canonical": False,
        "importing": True,
        "visibility": visibility,
        **subject.store_filter(),
        **_store_fields(header, users),
    }
    wanted = header.store["id"]
    if not Store.objects.filter(pk=wanted).exists():
        try:
            with transaction.atomic():
                return Store.objects.create(id=wanted, **fields), True
        except IntegrityError:  # a parallel import of the same file took the id first
            pass
    return Store.objects.create(id=uuid.uuid4(), **fields), False


def prepare_into(*, store: Store, header: Header, users: dict[str, str]) -> Store:
    """Lock the existing, empty store `store` for a whole-file import into it (`--into`).

    It keeps its id, scope, subject, visibility and canonical flag; name, description, metadata, times
    and generation come from the file. Raises StoreNotEmpty (409) when it holds any entry, summary,
    file version or reader grant, or is itself being imported.
    """
    locked = Store.objects.select_for_update(of=("self",)).get(pk=store.pk)
    occupied = (
        locked.importing
        or locked.entry_count
        or Summary.objects.filter(store=locked).exists()
        or Version.objects.filter(store=locked).exists()
        or ReaderGrant.objects.filter(store=locked).exists()
    )
    if occupied:
        raise StoreNotEmpty(details={"store_id": str(locked.pk)})
    for key, value in _store_fields(header, users).items():
        setattr(locked, key, value)
    locked.save()
    return locked


# ---------------------------------------------------------------------------------------- importer


class Importer:
    """Verify and write the lines after the header into `store`; resumable through `state`.

    `state` is JSON: the next line number, the chain so far, the current section, per-section counts,
    the header's counts and generation, the user map, whether ids are kept, the last sort key seen and
    the live-summary count. `feed` takes raw lines (bytes without newline); `done` turns true at the end
    line, after `finish` has written the store's counters and made it visible.
    """

    def __init__(self, store: Store, state: dict[str, Any]) -> None:
        self.store = store
        self.s = state
        self.handles = set(state["users"])
        self.pending: list[tuple[int, dict[str, Any]]] = []
        self.pending_bytes = 0
        self.chain = Chain(state["chain"])

    @classmethod
    def begin(
        cls, *, store: Store, header: Header, header_line: bytes, users: dict[str, str], keep_ids: bool
    ) -> Importer:
        chain = Chain()
        chain.update(header_line)
        state = {
            "line": 1,
            "chain": chain.state,
            "section": 0,
            "seen": dict.fromkeys(SECTIONS, 0),
            "counts": header.counts,
            "generation": header.store["generation"],
            "canonical": header.store["canonical"],
            "users": users,
            "keep_ids": keep_ids,
            "last": None,
            "live": 0,
            "done": False,
            "source_id": str(header.store["id"]),
            "warnings": [],
        }
        return cls(store, state)

    @property
    def done(self) -> bool:
        return self.s["done"]

    @property
    def next_line(self) -> int:
        return self.s["line"] + 1

    def state(self) -> dict[str, Any]:
        self.s["chain"] = self.chain.state
        return self.s

    # ------------------------------------------------------------------------------ line dispatch

    def feed(self, lines: Iterable[bytes]) -> None:
        """Verify and buffer each line; batches are written as they fill and at the end of the call."""
        for raw in lines:
            number = self.s["line"] + 1
            if self.s["done"]:
                raise ImportInvalid(number, "comes after the end line; nothing may follow it.")
            obj = verify.decode_line(raw, number)
            kind = obj.get("type")
            if kind == "end":
                self._end(obj, number)
            else:
                self._content(obj, kind, number)
                self.chain.update(raw)
            self.s["line"] = number
        self._flush()

    def _content(self, obj: dict[str, Any], kind: object, number: int) -> None:
        section = SECTION_OF_TYPE.get(kind) if isinstance(kind, str) else None
        if section is None:
            raise ImportInvalid(number, f"has unknown type {kind!r}.")
        index = SECTIONS.index(section)
        if index < self.s["section"]:
            raise ImportInvalid(
                number, f"a {kind} line after the {SECTIONS[self.s['section']]}: sections come in order."
            )
        while self.s["section"] < index:
            self._close_section(number)
            self.s["section"] += 1
            self.s["last"] = None
        seen = self.s["seen"][section]
        if seen >= self.s["counts"][section]:
            raise ImportInvalid(number, f"is {section} line {seen + 1}; the header counts {self.s['counts'][section]}.")
        row = getattr(self, f"_check_{section}")(obj, number)
        self.s["seen"][section] = seen + 1
        self.pending.append((number, row))
        self.pending_bytes += len(str(row.get("content") or "")) + 200
        if len(self.pending) >= BATCH_LINES or self.pending_bytes >= BATCH_BYTES:
            self._flush()

    def _close_section(self, number: int) -> None:
        self._flush()
        section = SECTIONS[self.s["section"]]
        seen, expected = self.s["seen"][section], self.s["counts"][section]
        if seen != expected:
            raise ImportInvalid(number, f"the file holds {seen} {section}; its header counts {expected}.")

    def _order(self, number: int, key: list, what: str, *, strict: bool = True) -> None:
        last = self.s["last"]
        if last is not None and (key <= last if strict else key < last):
            raise ImportInvalid(number, f"is out of order: {what}.")
        self.s["last"] = key

    # ------------------------------------------------------------------------------ per-line checks

    def _check_entries(self, obj, number):
        return verify.check_entry(obj, number, seq=self.s["seen"]["entries"], handles=self.handles)

    def _check_summaries(self, obj, number):
        row = verify.check_summary(
            obj, number, entries=self.s["counts"]["entries"], generation=self.s["generation"], handles=self.handles
        )
        block = row["block"]
        key = [block.level, block.start, obj["created_at"]]  # fixed-width UTC text: compares as time
        self._order(number, key, "summaries come by level, start, then created_at", strict=False)
        group = self.s.get("group")
        if group is None or group[:2] != key[:2]:
            group = [block.level, block.start, False]
        if row["invalidated_at"] is None:
            if group[2]:
                raise ImportInvalid(number, f"a second live summary of {block.label}; a range has at most one.")
            group[2] = True
            self.s["live"] += 1
        self.s["group"] = group
        return row

    def _check_versions(self, obj, number):
        row = verify.check_version(obj, number)
        self._order(number, [obj["created_at"], obj["id"]], "versions come by created_at, then id")
        return row

    def _check_memories(self, obj, number):
        row = verify.check_memory(obj, number)
        self._order(number, [row["path"].encode().hex()], "memories come in bytewise path order, each path once")
        return row

    def _check_readers(self, obj, number):
        row = verify.check_reader(obj, number, handles=self.handles)
        if self.store.scope != Scope.USER:
            raise ImportInvalid(number, "explicit readers belong to user stores; this store's access is by membership.")
        if self.s["users"][row["handle"]] == str(self.store.owner_id):
            raise ImportInvalid(number, "names the store's owner as a reader.")
        self._order(number, [row["handle"]], "readers come by handle, each once")
        return row

    # ------------------------------------------------------------------------------ writing

    def _new_id(self, old: uuid.UUID) -> uuid.UUID:
        """Kept ids keep their value; otherwise a stable new id per (store, old id)."""
        return old if self.s["keep_ids"] else uuid.uuid5(self.store.pk, str(old))

    def _flush(self) -> None:
        if not self.pending:
            return
        rows, self.pending, self.pending_bytes = self.pending, [], 0
        section = SECTIONS[self.s["section"]]
        getattr(self, f"_write_{section}")(rows)
        self.s["unanalysed"] = self.s.get("unanalysed", 0) + len(rows)
        if self.s["unanalysed"] >= ANALYZE_EVERY_ROWS:
            self._analyze(section)

    def _analyze(self, section: str) -> None:
        """Refresh the planner's statistics of the tables this section writes and checks against.

        Inside one long transaction (manage.py) autovacuum cannot see our rows, so the planner keeps
        believing the store is empty and picks nested loops that rescan every row written so far for each
        batch (measured: quadratic, 4 s per summary batch at 50,000 rows). ANALYZE in the transaction does
        count our own uncommitted rows, and samples at most ~30,000 rows whatever the table size.
        """
        self.s["unanalysed"] = 0
        tables = {"entries": [Entry], "summaries": [Entry, Summary], "versions": [Version], "memories": [Version]}
        with connection.cursor() as cursor:
            for model in tables.get(section, []):
                cursor.execute(f"ANALYZE {_table(model)}")

    def _user(self, handle: str | None) -> str | None:
        return self.s["users"][handle] if handle else None

    def _copy(self, model, columns: list[str], rows: Iterable[tuple]) -> None:
        names = ", ".join(f'"{column}"' for column in columns)
        with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {_table(model)} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def _query(self, sql: str, params) -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def _write_entries(self, rows) -> None:
        nonces: dict[tuple[str, str], int] = {}
        for number, row in rows:
            if row["client_nonce"] is not None:
                key = (self._user(row["author"]), row["client_nonce"])
                if key in nonces:
                    raise ImportInvalid(
                        number, f"client_nonce {row['client_nonce']!r} of this author repeats line {nonces[key]}."
                    )
                nonces[key] = number
        if nonces:
            clash = self._query(
                sql("nonces"),
                [[author for author, _ in nonces], [nonce for _, nonce in nonces], self.store.pk],
            )
            for author_id, nonce in clash:
                if (author_id, nonce) in nonces:
                    raise ImportInvalid(
                        nonces[(author_id, nonce)],
                        f"client_nonce {nonce!r} of this author was used by an earlier entry.",
                    )
        columns = ["store_id", "seq", "author_id", "body_md", "size_bytes", "client_nonce", "session_id"]
        columns += ["provenance", "created_at", "redacted_at", "redacted_by_id"]
        self._copy(
            Entry,
            columns,
            (
                (
                    self.store.pk,
                    row["seq"],
                    self._user(row["author"]),
                    row["body_md"],
                    row["size_bytes"],
                    row["client_nonce"],
                    row["session_id"],
                    None if row["provenance"] is None else Jsonb(row["provenance"]),
                    row["created_at"],
                    row["redacted_at"],
                    self._user(row["redacted_by"]),
                )
                for _, row in rows
            ),
        )

    def _write_summaries(self, rows) -> None:
        live = [(number, row) for number, row in rows if row["invalidated_at"] is None]
        self._check_digests(live)
        columns = ["store_id", "start", "end", "level", "summary_md", "size_bytes", "model", "author_id"]
        columns += ["source_digest", "generation", "created_at", "invalidated_at", "invalidated_by_id", "redacted_at"]
        self._copy(
            Summary,
            columns,
            (
                (
                    self.store.pk,
                    row["block"].start,
                    row["block"].end,
                    row["block"].level,
                    row["summary_md"],
                    row["size_bytes"],
                    row["model"],
                    self._user(row["author"]),
                    row["source_digest"],
                    row["generation"],
                    row["created_at"],
                    row["invalidated_at"],
                    self._user(row["invalidated_by"]),
                    row["redacted_at"],
                )
                for _, row in rows
            ),
        )

    def _check_digests(self, live: list[tuple[int, dict[str, Any]]]) -> None:
        """Every live summary must be built from the children before it: recompute each `source_digest`."""
        if not live:
            return
        seqs, ranges = [], []
        for _, row in live:
            for half in row["block"].halves():
                (seqs if half.is_entry else ranges).append(half)
        texts: dict[tuple[int, int], str] = {}
        if seqs:
            for seq, body in self._query(
                sql("entry_texts"),
                [self.store.pk, [half.start for half in seqs]],
            ):
                texts[(seq, seq)] = tree.child_text(body)
        if ranges:
            for start, end, text in self._query(
                sql("summary_texts"),
                [[half.start for half in ranges], [half.end for half in ranges], self.store.pk],
            ):
                texts[(start, end)] = text
        for number, row in live:  # in file order: a child later in this batch is already in `texts`
            block = row["block"]
            left, right = block.halves()
            left_text, right_text = texts.get((left.start, left.end)), texts.get((right.start, right.end))
            if left_text is None or right_text is None:
                raise ImportInvalid(number, f"the live summary of {block.label} has no live child before it.")
            if tree.source_digest(left, left_text, right, right_text) != row["source_digest"]:
                raise ImportInvalid(
                    number, f"the source_digest of {block.label} does not match its children: the file was changed."
                )
            texts[(block.start, block.end)] = row["summary_md"]

    def _write_versions(self, rows) -> None:
        ids = [self._new_id(row["id"]) for _, row in rows]
        if len(set(ids)) != len(ids):
            raise ImportInvalid(rows[0][0], "a version id appears twice.")
        taken = self._query(sql("version_taken"), [ids])
        if taken:
            number = rows[ids.index(taken[0][0])][0]
            raise ImportInvalid(number, f"version id {taken[0][0]} already exists on this server.")
        memory_ids = sorted({self._new_id(row["memory_id"]) for _, row in rows})
        last_op = dict(
            self._query(
                sql("last_operation"),
                [self.store.pk, memory_ids],
            )
        )
        for number, row in rows:
            memory_id, previous = self._new_id(row["memory_id"]), last_op.get(self._new_id(row["memory_id"]))
            if (row["operation"] == Operation.CREATED) != (previous is None):
                problem = "is not the first of its memory" if previous else "starts a history without 'created'"
                raise ImportInvalid(number, f"a {row['operation']} version {problem}.")
            if previous == Operation.DELETED:
                raise ImportInvalid(number, "follows the deletion of its memory (a re-created path gets a new id).")
            last_op[memory_id] = row["operation"]
        columns = ["id", "store_id", "memory_id", "operation", "path", "content", "content_sha256"]
        columns += ["content_size_bytes", "created_by", "api_key_id", "session_id", "user_id", "created_at"]
        columns += ["redacted_at", "redacted_by"]

        def actor_columns(actor):
            kind = actor["type"] if actor else None
            return [actor[key] if actor and ID_KEYS[kind] == key else None for key in ID_KEYS.values()]

        self._copy(
            Version,
            columns,
            (
                (
                    new_id,
                    self.store.pk,
                    self._new_id(row["memory_id"]),
                    row["operation"],
                    row["path"],
                    row["content"],
                    row["content_sha256"],
                    row["content_size_bytes"],
                    None if row["created_by"] is None else Jsonb(row["created_by"]),
                    *actor_columns(row["created_by"]),
                    row["created_at"],
                    row["redacted_at"],
                    None if row["redacted_by"] is None else Jsonb(row["redacted_by"]),
                )
                for new_id, (_, row) in zip(ids, rows, strict=True)
            ),
        )

    def _write_memories(self, rows) -> None:
        heads = {self._new_id(row["current_version_id"]): (number, row) for number, row in rows}
        found = {
            vid: (memory_id, operation, path, content, sha, size, redacted)
            for vid, memory_id, operation, path, content, sha, size, redacted in self._query(
                sql("heads"),
                [self.store.pk, list(heads)],
            )
        }
        latest = dict(
            self._query(
                sql("newest_version"),
                [self.store.pk, [self._new_id(row["id"]) for _, row in rows]],
            )
        )
        ancestors = {a for _, row in rows for a in _ancestors(row["path"])}
        occupied = (
            {
                p
                for (p,) in self._query(
                    sql("paths"),
                    [self.store.pk, list(ancestors)],
                )
            }
            if ancestors
            else set()
        )
        out = []
        for number, row in rows:
            memory_id, head_id = self._new_id(row["id"]), self._new_id(row["current_version_id"])
            head = found.get(head_id)
            if head is None or head[0] != memory_id:
                raise ImportInvalid(number, "current_version_id is not a version of this memory in the file.")
            _, operation, path, content, sha, size, redacted = head
            if operation == Operation.DELETED or redacted is not None:
                raise ImportInvalid(number, "current_version_id names a deleted or redacted version.")
            if latest.get(memory_id) != head_id:
                raise ImportInvalid(number, "current_version_id is not the newest version of this memory.")
            if path != row["path"] or sha != row["content_sha256"]:
                raise ImportInvalid(number, "path or content_sha256 differs from its current version.")
            clash = next((a for a in _ancestors(row["path"]) if a in occupied), None)
            if clash is not None:
                raise ImportInvalid(number, f"path {row['path']!r} lies under the memory {clash!r}.")
            occupied.add(row["path"])
            out.append(
                (memory_id, self.store.pk, path, content, sha, size, head_id, row["created_at"], row["updated_at"])
            )
        taken = self._query(sql("memory_taken"), [[r[0] for r in out]])
        if taken:
            raise ImportInvalid(rows[0][0], f"memory id {taken[0][0]} already exists on this server.")
        columns = ["id", "store_id", "path", "content", "content_sha256", "content_size_bytes"]
        self._copy(Memory, [*columns, "current_version_id", "created_at", "updated_at"], out)

    def _write_readers(self, rows) -> None:
        self._copy(
            ReaderGrant,
            ["store_id", "user_id", "active", "granted_by_id", "created_at", "updated_at"],
            (
                (
                    self.store.pk,
                    self._user(row["handle"]),
                    row["active"],
                    self._user(row["granted_by"]),
                    row["created_at"],
                    row["updated_at"],
                )
                for _, row in rows
            ),
        )

    # ------------------------------------------------------------------------------ the end line

    def _end(self, obj: dict[str, Any], number: int) -> None:
        verify.check_end(obj, number, lines=self.s["line"], chain=self.chain.state)
        while self.s["section"] < len(SECTIONS):
            self._close_section(number)
            self.s["section"] += 1
        self.s["section"] = len(SECTIONS) - 1
        self._finish(number)
        self.s["done"] = True

    def _finish(self, number: int) -> None:
        """Check what only the whole file can show, then write the counters and make the store visible."""
        alive = self._query(
            sql("alive_histories"),
            [self.store.pk],
        )[0][0]
        if alive != self.s["counts"]["memories"]:
            raise ImportInvalid(
                number,
                f"{alive} file histories end in a live version but the file holds {self.s['counts']['memories']} "
                "memories: a current memory is missing or extra.",
            )
        counts = self.s["counts"]
        updates = {
            "entry_count": counts["entries"],
            "summary_count": self.s["live"],
            "memory_count": counts["memories"],
            "importing": False,
        }
        Store.objects.filter(pk=self.store.pk).update(**updates)
        if self.store.importing and self.s["canonical"]:
            try:
                with transaction.atomic():  # one canonical store per subject (partial unique constraint)
                    Store.objects.filter(pk=self.store.pk).update(canonical=True)
            except IntegrityError:
                existing = Store.objects.filter(canonical=True, scope=self.store.scope).filter(
                    owner_id=self.store.owner_id, project_id=self.store.project_id, section_id=self.store.section_id
                )
                self.s["warnings"].append(
                    "The subject already has a canonical store "
                    f"({', '.join(str(pk) for pk in existing.values_list('pk', flat=True))}); "
                    "this import is an ordinary (non-canonical) store of the same subject."
                )
        if not self.s["keep_ids"] and self.store.importing and str(self.store.pk) != self.s["source_id"]:
            self.s["warnings"].append(
                f"Store id {self.s['source_id']} is taken on this server; the import got new ids ({self.store.pk})."
            )
        self.store.refresh_from_db()


def _ancestors(path: str) -> list[str]:
    segments = path[1:].split("/")
    return ["/" + "/".join(segments[:n]) for n in range(1, len(segments))]


# ------------------------------------------------------------------------------------------ drivers


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    """The file's lines without their newline characters (split on LF only: U+2028 inside text is data)."""
    for raw in stream:
        yield raw[:-1] if raw.endswith(b"\n") else raw


def _header(raw: bytes | None) -> Header:
    if raw is None:
        raise ImportInvalid(1, "the file is empty.")
    return verify.check_header(verify.decode_line(raw, 1), max_memories=settings.MEMORY_STORE_MAX_MEMORIES)


@dataclass(frozen=True)
class Imported:
    """Result of `import_file`: the store, the lines read, the handles created as inactive users, and
    what the import could not keep as it was (a taken id, a subject that already has a canonical store)."""

    store: Store
    lines: int
    created_users: list[str]
    warnings: list[str]


@transaction.atomic
def import_file(
    stream: BinaryIO,
    *,
    into: Store | None = None,
    create_missing_users: bool = False,
    progress=None,
) -> Imported:
    """Import one export file in one transaction (manage.py import_store; SPEC §8b).

    stream: the file opened in binary mode. into: an existing empty store to fill (StoreNotEmpty 409
    otherwise); else a new store for the header's subject, with the header's id when it is free (then
    file ids are kept; otherwise new ones are given). create_missing_users: create unknown handles as
    inactive users instead of raising UnknownHandles. progress(lines_done) is called every batch.
    Raises ImportInvalid (400, with the line number) for a malformed, truncated or tampered file;
    on any error nothing at all is imported. When the subject already has a canonical store (or the
    store id is taken) the import still succeeds, as an ordinary store, and says so in `warnings`.
    """
    lines = _lines(stream)
    first = next(lines, None)
    header = _header(first)
    created: list[str] = []
    users = resolve_handles(header.handles, create_missing=create_missing_users, created=created)
    if into is not None:
        store, keep_ids = prepare_into(store=into, header=header, users=users), False
    else:
        subject = _subject_of(header)
        store, keep_ids = create_pending_store(header=header, users=users, subject=subject)
    importer = Importer.begin(store=store, header=header, header_line=first, users=users, keep_ids=keep_ids)
    batch: list[bytes] = []
    for raw in lines:
        batch.append(raw)
        if len(batch) >= BATCH_LINES:
            importer.feed(batch)
            batch = []
            if progress:
                progress(importer.s["line"])
    importer.feed(batch)
    if not importer.done:
        raise ImportInvalid(
            importer.next_line, f"the file ends after line {importer.s['line']} without its end line: it is truncated."
        )
    if progress:
        progress(importer.s["line"])
    return Imported(
        store=importer.store, lines=importer.s["line"], created_users=created, warnings=importer.s["warnings"]
    )


# ----------------------------------------------------------------------------------- HTTP: chunks


def split_chunk(body: bytes, first_line: int) -> list[bytes]:
    """A request body of whole lines, each ending with LF, into lines without it (ImportInvalid otherwise)."""
    if not body:
        raise ImportInvalid(first_line, "the request body is empty; send whole lines of the file.")
    if not body.endswith(b"\n"):
        count = body.count(b"\n")
        raise ImportInvalid(first_line + count, "the chunk must end with a newline: send whole lines only.")
    return body[:-1].split(b"\n")


def expire_idle_imports() -> int:
    """Delete the stores of open imports idle longer than IMPORT_IDLE_SECONDS (database time); returns how many."""
    idle = Now() - timedelta(seconds=settings.IMPORT_IDLE_SECONDS)
    stale = StoreImport.objects.filter(updated_at__lt=idle)
    abandoned = list(stale.filter(status=ImportStatus.OPEN).values_list("store_id", flat=True))
    deleted = Store.objects.filter(pk__in=abandoned, importing=True).delete()[1].get(Store._meta.label, 0)
    stale.filter(status=ImportStatus.COMMITTED).delete()
    return deleted


def start_upload(*, actor: User, body: bytes, subject: Subject | None = None) -> StoreImport:
    """Start a resumable import with the first chunk (header first); SPEC §8b, docs/export-import.md.

    subject: where the new store goes (the caller has the owner right on it), default the header's —
    whose owner right the caller must then hold too (checked by the caller). Creates the hidden store,
    verifies and writes the chunk's other lines; a chunk that already ends with the end line completes
    the import. Raises UnknownHandles, ImportInvalid (400); then nothing remains.
    """
    expire_idle_imports()
    lines = split_chunk(body, 1)
    header = _header(lines[0])
    with transaction.atomic():
        users = resolve_handles(header.handles)
        store, keep_ids = create_pending_store(header=header, users=users, subject=subject or _subject_of(header))
        importer = Importer.begin(store=store, header=header, header_line=lines[0], users=users, keep_ids=keep_ids)
        importer.feed(lines[1:])
        upload = StoreImport.objects.create(
            store=store,
            created_by=actor,
            status=ImportStatus.COMMITTED if importer.done else ImportStatus.OPEN,
            next_line=importer.next_line,
            state=importer.state(),
            created_at=Now(),  # database time, like the idle expiry that reads it
            updated_at=Now(),
        )
        upload.refresh_from_db(fields=["created_at", "updated_at"])
    return upload


def header_subject(body: bytes) -> tuple[str, str]:
    """(scope, subject) named by the header at the start of `body` (for the caller's access check)."""
    first = body.split(b"\n", 1)[0] if body else None
    header = _header(first or None)
    return header.store["scope"], header.store["subject"]


def get_upload(*, actor: User, import_id: object, lock: bool = False) -> StoreImport:
    """The caller's own import `import_id`, else ImportNotFound (404; someone else's looks missing)."""
    try:
        pk = uuid.UUID(str(import_id))
    except ValueError:
        raise ImportNotFound() from None
    uploads = StoreImport.objects.select_related("store")
    if lock:
        uploads = uploads.select_for_update(of=("self",))
    upload = uploads.filter(pk=pk, created_by=actor).first()
    if upload is None:
        raise ImportNotFound()
    return upload


@transaction.atomic
def append_chunk(*, actor: User, import_id: object, from_line: int, body: bytes) -> StoreImport:
    """Verify and write the next chunk of whole lines, which must start at line `from_line`.

    Locks the import (parallel chunks of one import are serialised). Raises ImportNotFound (404),
    ImportCommitted (409, details.store_id), ImportOffsetMismatch (409, details.next_line: a retried chunk
    that already landed, or a gap), ImportInvalid (400). A failed chunk changes nothing.
    """
    upload = get_upload(actor=actor, import_id=import_id, lock=True)
    if upload.status == ImportStatus.COMMITTED:
        raise ImportCommitted(details={"store_id": str(upload.store_id)})
    if from_line != upload.next_line:
        raise ImportOffsetMismatch(details={"next_line": upload.next_line})
    importer = Importer(Store.objects.get(pk=upload.store_id), upload.state)
    importer.feed(split_chunk(body, from_line))
    upload.state = importer.state()
    upload.next_line = importer.next_line
    upload.status = ImportStatus.COMMITTED if importer.done else ImportStatus.OPEN
    upload.updated_at = Now()
    upload.save(update_fields=["state", "next_line", "status", "updated_at"])
    upload.refresh_from_db(fields=["updated_at"])
    return upload


@transaction.atomic
def abort_upload(*, actor: User, import_id: object) -> uuid.UUID:
    """Abandon an open import: delete its hidden store and everything written so far. Returns the import id.

    Raises ImportNotFound (404), ImportCommitted (409: a finished import is an ordinary store; delete that).
    """
    upload = get_upload(actor=actor, import_id=import_id, lock=True)
    if upload.status == ImportStatus.COMMITTED:
        raise ImportCommitted(details={"store_id": str(upload.store_id)})
    pk = upload.pk
    Store.objects.filter(pk=upload.store_id, importing=True).delete()
    return pk


def upload_progress(upload: StoreImport) -> dict[str, Any]:
    """The import as the API shows it: status, store id, the next line, lines and sections received."""
    state = upload.state or {}
    return {
        "id": str(upload.pk),
        "status": upload.status,
        "store_id": str(upload.store_id),
        "next_line": upload.next_line,
        "lines_received": upload.next_line - 1,
        "counts": state.get("counts"),
        "received": state.get("seen"),
        "warnings": state.get("warnings", []),
        "created_at": upload.created_at,
        "updated_at": upload.updated_at,
    }
