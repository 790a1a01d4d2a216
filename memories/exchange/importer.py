"""The importer: verify an export line by line and write it into its target store (SPEC §8b).

`Importer` checks each line (`memories.exchange.verify`) and writes each section into the target store in
bounded batches (PostgreSQL COPY), so memory stays constant whatever the file size. What a single line
cannot tell — a client_nonce used twice, a summary whose `source_digest` does not match the children
before it, a file memory whose head is not the newest version of its history, a path under another
memory — is checked against the rows already written, in the same transaction. The end line's count and
chain prove the file complete and unchanged. Its state is JSON, so the HTTP import resumes it between
requests. The drivers (one transaction; resumable chunks) are in `memories.exchange.services`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone
from psycopg.types.json import Jsonb

from config.text import quoted
from memories import tree
from memories.exchange import verify
from memories.exchange.errors import ImportInvalid
from memories.exchange.format import Chain
from memories.exchange.verify import SECTION_OF_TYPE, SECTIONS, Header
from memories.models import Entry, Summary
from stores import selectors as stores_selectors
from stores import services as stores_services
from stores.models import ReaderGrant, Scope, Store
from versions.actors import ID_KEYS
from versions.models import Memory, Operation, Version

BATCH_LINES = 2000
# An HTTP import may not date anything later than now plus this (clock skew between servers).
FUTURE_SLACK = timedelta(minutes=5)
UNVOUCHED = (
    "{handle} may not write the target store on this server, so an HTTP import cannot make them its author "
    "(authors must be users who may write there: only you in your own user store, a project's members, a "
    "board's posters). To keep them as authors, import into a project or board where they may write (add them "
    "there first), or have an operator run manage.py import_store."
)
BATCH_BYTES = 8 * 1024 * 1024
ANALYZE_EVERY_ROWS = 20_000


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
        cls,
        *,
        store: Store,
        header: Header,
        header_line: bytes,
        users: dict[str, str],
        keep_ids: bool,
        vouched: dict[str, list[str]] | None = None,
    ) -> Importer:
        """Start an import of `header` into `store`. `users`: lowercase handle → user id (text).

        vouched: None (the operator's import: any author) or whom an HTTP import may name
        (`services._vouched`: ``writers`` as authors, redactors, forgetters, granters and version actors,
        ``active`` as active readers); such an import also refuses times in the future.
        """
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
            "vouched": vouched,
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
            raise ImportInvalid(number, f"has unknown type {quoted(kind)}.")
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

    def _vouch(self, number: int, row: dict[str, Any], *handle_keys: str) -> None:
        """For an HTTP import: each named handle must be a writer of the target, and no time in the future.

        A redactor, forgetter or granter is held to the same rule, not to the owner right the act needed: a
        file moves history to another subject (a user's store into a project), where the one who owned the
        source and redacted there is a member (docs/export-import.md "Who may be an author")."""
        vouched = self.s.get("vouched")
        if vouched is None:
            return
        for key in handle_keys:
            handle = row.get(key)
            if handle is not None and self.s["users"][handle] not in vouched["writers"]:
                raise ImportInvalid(number, f"{key}: {UNVOUCHED.format(handle=quoted(handle))}")
        latest = timezone.now() + FUTURE_SLACK
        for key, value in row.items():
            if isinstance(value, datetime) and value > latest:
                raise ImportInvalid(number, f"{key} is in the future.")

    def _check_entries(self, obj, number):
        row = verify.check_entry(obj, number, seq=self.s["seen"]["entries"], handles=self.handles)
        self._vouch(number, row, "author", "redacted_by")
        return row

    def _check_summaries(self, obj, number):
        row = verify.check_summary(
            obj, number, entries=self.s["counts"]["entries"], generation=self.s["generation"], handles=self.handles
        )
        self._vouch(number, row, "author", "invalidated_by")
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
        self._vouch(number, row)
        self._order(number, [obj["created_at"], obj["id"]], "versions come by created_at, then id")
        return row

    def _check_memories(self, obj, number):
        row = verify.check_memory(obj, number)
        self._vouch(number, row)
        self._order(number, [row["path"].encode().hex()], "memories come in bytewise path order, each path once")
        return row

    def _check_readers(self, obj, number):
        row = verify.check_reader(obj, number, handles=self.handles)
        self._vouch(number, row, "granted_by")
        vouched = self.s.get("vouched")
        if vouched is not None and row["active"] and self.s["users"][row["handle"]] not in vouched["active"]:
            raise ImportInvalid(
                number, f"grants reading to {quoted(row['handle'])}, an inactive user here (the API refuses that too)."
            )
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
        self._check_actors(rows, entries=True)
        nonces: dict[tuple[str, str], int] = {}
        for number, row in rows:
            if row["client_nonce"] is not None:
                key = (self._user(row["author"]), row["client_nonce"])
                if key in nonces:
                    raise ImportInvalid(
                        number, f"client_nonce {quoted(row['client_nonce'])} of this author repeats line {nonces[key]}."
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
                        f"client_nonce {quoted(nonce)} of this author was used by an earlier entry.",
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

    def _check_actors(self, rows, *, entries: bool = False) -> None:
        """For an HTTP import: no version actor — and no entry's `session_id` (`entries`) — may name a token,
        session or user of this server that belongs to someone outside the target's writers (ids from another
        server match nothing here and stay as they are). Up to three queries per batch."""
        vouched = self.s.get("vouched")
        if vouched is None:
            return
        from accounts.models import ApiToken, User
        from sessions.models import Session

        wanted: dict[str, dict[str, int]] = {key: {} for key in ID_KEYS.values()}
        for number, row in rows:
            if entries:
                if row["session_id"] is not None:
                    wanted["session_id"].setdefault(str(row["session_id"]), number)
                continue
            if row["redacted_by"] is not None and row["redacted_by"]["type"] == "session_actor":
                raise ImportInvalid(number, "redacted_by: a session (an agent) cannot redact; people redact.")
            for actor in (row["created_by"], row["redacted_by"]):
                if actor is not None:
                    key = ID_KEYS[actor["type"]]
                    wanted[key].setdefault(str(actor[key]), number)
        what = "an entry's" if entries else "a version actor's"
        owners = {
            "api_key_id": ApiToken.objects.filter(pk__in=list(wanted["api_key_id"])).values_list("pk", "user_id"),
            "session_id": Session.objects.filter(pk__in=list(wanted["session_id"])).values_list("pk", "owner_id"),
            "user_id": User.objects.filter(pk__in=list(wanted["user_id"])).values_list("pk", "pk"),
        }
        for key, found in owners.items():
            for pk, user_id in found:
                if str(user_id) not in vouched["writers"]:
                    raise ImportInvalid(
                        wanted[key][str(pk)],
                        f"{what} {key} {pk} belongs to someone who may not write the target store here.",
                    )

    def _write_versions(self, rows) -> None:
        self._check_actors(rows)
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
                problem = "is not the first of its memory" if previous else 'starts a history without "created"'
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
                raise ImportInvalid(number, f"path {quoted(row['path'])} lies under the memory {quoted(clash)}.")
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
            store = Store.objects.get(pk=self.store.pk)
            if stores_services.claim_canonical(store):  # one canonical store per subject (CanonicalStore)
                Store.objects.filter(pk=self.store.pk).update(canonical=True)
            else:
                existing = stores_selectors.canonical_store_id(scope=store.scope, subject_id=store.subject_id)
                self.s["warnings"].append(
                    f"The subject already has a canonical store ({existing}); "
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
