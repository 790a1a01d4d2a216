"""The 0041 migration: archive the legacy rows, then import each record into its author's private store.

SPEC §7. Entry point: `migrate_0041` (the `migrate_0041_memories` command is a thin wrapper). Steps:

1. `archive_legacy_rows`: one ``INSERT … SELECT to_jsonb(row) … ON CONFLICT DO NOTHING`` per legacy
   table, so every column of every row is copied losslessly, once (re-runs add only new rows).
2. `import_records`: records in chronological order (created_at, then id), in batches, on `workers`
   connections at once, each the records of its own group of authors (so each store still receives its
   author's records in that order; docs/migration-0041.md "Workers"). Per batch, in
   one transaction: ensure each author's canonical user store, lock the affected stores once, in pk
   order (`select_for_update`), drop records already imported (their part-1 nonce exists, on an entry
   this migration wrote) and those whose part nonces another entry holds (reported), then
   `bulk_create` the entries with contiguous seqs from `entry_count` and `bulk_update` the counters.

Nothing here creates a reader grant or a membership: imported entries are readable by their author
only (price and project never grant access). A store that is shared (public, or with an active reader
grant) or archived receives nothing; its records are counted as skipped and imported by a later run
once the owner makes the store private again (see docs/migration-0041.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, Count
from django.db.models.expressions import RawSQL
from django.utils import timezone

from accounts.models import User, Visibility
from legacy.models import ArchivedAssessment, ArchivedRecord, ArchivedRevision, Assessment, Record, Revision
from legacy.splitting import ENTRY_MAX_BYTES, split_document
from memories.models import Entry
from stores.models import CanonicalStore, ReaderGrant, Scope, Store
from stores.services import ensure_canonical_store, lock_stores_in_order

logger = logging.getLogger("memories.legacy")

NONCE_PREFIX = "legacy-0041"
DEFAULT_BATCH_SIZE = 2000
DEFAULT_WORKERS = 2  # connections importing at once: one prepares a batch while PostgreSQL writes another
ARCHIVES = ((Record, ArchivedRecord), (Assessment, ArchivedAssessment), (Revision, ArchivedRevision))


def record_document(label: str, description: str) -> str:
    """The text a record becomes: ``label + "\\n\\n" + description`` (SPEC §7), never empty."""
    return f"{label}\n\n{description}"


def part_nonce(source_id: int, part: int) -> str:
    """The client_nonce of part `part` (1-based) of record `source_id`: ``legacy-0041:<id>:<part>``."""
    return f"{NONCE_PREFIX}:{source_id}:{part}"


@dataclass
class ImportSummary:
    """What a run did (or, with ``dry_run``, would do). Counts, and `duration_s` in seconds.

    records / entries: imported now; authors: distinct authors of those records; stores_created:
    canonical stores created; skipped_*: records not imported, by reason (`nonce_taken`: an entry that is
    not this migration's holds one of the record's part nonces — a user's note with such a `client_nonce`);
    archived_*: archive rows added for each legacy table.
    """

    dry_run: bool = False
    records: int = 0
    entries: int = 0
    authors: int = 0
    stores_created: int = 0
    skipped_already_imported: int = 0
    skipped_shared_store: int = 0
    skipped_archived_store: int = 0
    skipped_nonce_taken: int = 0
    archived_records: int = 0
    archived_assessments: int = 0
    archived_revisions: int = 0
    duration_s: float = 0.0
    _authors: set = field(default_factory=set, repr=False)
    _stores_created: set = field(default_factory=set, repr=False)

    @property
    def skipped(self) -> int:
        return (
            self.skipped_already_imported
            + self.skipped_shared_store
            + self.skipped_archived_store
            + self.skipped_nonce_taken
        )

    @property
    def records_per_second(self) -> float:
        return (self.records + self.skipped) / self.duration_s if self.duration_s else 0.0

    def add(self, other: ImportSummary) -> None:
        """Add the record, entry and skip counts, authors and created stores of `other` (a worker's)."""
        counts = (
            "records",
            "entries",
            "skipped_already_imported",
            "skipped_shared_store",
            "skipped_archived_store",
            "skipped_nonce_taken",
        )
        for name in counts:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self._authors |= other._authors
        self._stores_created |= other._stores_created

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_authors")
        data.pop("_stores_created")
        data["skipped"] = self.skipped
        return data


def archive_legacy_rows(*, dry_run: bool = False) -> dict[str, int]:
    """Copy every legacy record, assessment and revision not yet archived into its archive table.

    Returns ``{"records": n, "assessments": n, "revisions": n}``: rows added (with `dry_run`: rows that
    would be added; nothing is written). Idempotent: a row already archived (same source id) keeps its
    first copy. `data` is ``to_jsonb(row)``: every column under its database name, timestamps as ISO
    8601 strings, integers exact.
    """
    added: dict[str, int] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        for source, archive in ARCHIVES:
            # Table names come from our own models (quoted), never from input.
            src, dst = (connection.ops.quote_name(model._meta.db_table) for model in (source, archive))
            missing = f"FROM {src} AS src WHERE NOT EXISTS (SELECT 1 FROM {dst} AS a WHERE a.source_id = src.id)"  # noqa: S608
            if dry_run:
                cursor.execute(f"SELECT count(*) {missing}")
                added[source._meta.model_name + "s"] = cursor.fetchone()[0]
            else:
                cursor.execute(
                    f"INSERT INTO {dst} (source_id, data, archived_at) "
                    f"SELECT src.id, to_jsonb(src), statement_timestamp() {missing} ORDER BY src.id "
                    "ON CONFLICT (source_id) DO NOTHING"
                )
                added[source._meta.model_name + "s"] = cursor.rowcount
    return added


def _author_partitions(parts: int) -> list[list[Any]]:
    """Split the authors of every legacy record into at most `parts` groups of about equal record counts.

    Greedy, largest author first, each to the group with the fewest records so far. Authors never share a
    canonical store, so groups write disjoint stores: imported in parallel, each store still receives its
    author's records in (created_at, id) order. Returns the non-empty groups (lists of author ids).
    """
    counts = Record.objects.values_list("author_id").annotate(n=Count("id")).order_by("-n", "author_id")
    groups: list[tuple[int, list[Any]]] = [(0, []) for _ in range(parts)]
    for author_id, n in counts:
        index = min(range(parts), key=lambda k: groups[k][0])
        total, authors = groups[index]
        authors.append(author_id)
        groups[index] = (total + n, authors)
    return [authors for _, authors in groups if authors]


def _record_batches(batch_size: int, authors: list[Any] | None = None) -> Iterator[list[dict[str, Any]]]:
    """Yield legacy records as dicts in (created_at, id) order, `batch_size` at a time; only the records
    of `authors` (author ids) when given.

    The order is read once from the (created_at, id) index as a list of ids (8 bytes a record), then
    each batch is fetched by primary key: no repeated sort of wide rows. Records added while the run
    is going are left for the next run.
    """
    columns = ("id", "author_id", "project_id", "key", "label", "description", "status")
    records = Record.objects.all()
    if authors is not None:  # one array parameter, however many authors (an IN list has a 65,535 cap)
        column = connection.ops.quote_name(Record._meta.get_field("author").column)  # our column, quoted
        in_group = RawSQL(f"{column} = ANY(%s::uuid[])", (authors,), output_field=BooleanField())  # noqa: S611
        records = records.filter(in_group)
    order = list(records.order_by("created_at", "id").values_list("id", flat=True))
    for start in range(0, len(order), batch_size):
        ids = order[start : start + batch_size]
        rows = {row["id"]: row for row in Record.objects.filter(pk__in=ids).values(*columns)}
        yield [rows[pk] for pk in ids if pk in rows]


def _canonical_stores(author_ids: set, *, create: bool) -> tuple[dict[Any, Store | None], set]:
    """Map each author id to its canonical user store, creating missing ones when `create`.

    Returns ``(stores, created_for)``: the author ids whose store was (or, with ``create=False``, would
    be) created; without `create` a missing store maps to None (dry run). An existing store is used as
    it is (its name, description, metadata and visibility are kept).
    """
    canonical = CanonicalStore.objects.filter(scope=Scope.USER, subject_id__in=author_ids).values("store_id")
    stores: dict[Any, Store | None] = {store.owner_id: store for store in Store.objects.filter(pk__in=canonical)}
    missing = [author_id for author_id in author_ids if author_id not in stores]
    created: set = set()
    if missing and not create:
        return {**stores, **dict.fromkeys(missing)}, set(missing)
    for author in User.objects.filter(pk__in=missing).order_by("pk"):
        store, was_created = ensure_canonical_store(scope=Scope.USER, user=author)
        stores[author.pk] = store
        if was_created:
            created.add(author.pk)
    return stores, created


def _import_batch(batch: list[dict[str, Any]], summary: ImportSummary, *, dry_run: bool) -> None:
    """Import one batch of records (one transaction; each affected store locked once, in pk order)."""
    author_ids = {row["author_id"] for row in batch}
    # Missing stores are created (and committed) before the batch transaction, so a batch never holds
    # uncommitted new store rows while it waits for locks: parallel runs cannot deadlock on them.
    stores, created_for = _canonical_stores(author_ids, create=not dry_run)
    summary._stores_created.update(created_for)
    with transaction.atomic():
        if not dry_run:
            # A crash can lose only the last unflushed batches, which a re-run imports again (nonces):
            # waiting for the WAL flush on every batch commit would buy nothing here.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit = off")
        store_ids = sorted(store.pk for store in stores.values() if store is not None)
        # Lock first, then read counters, sharing state and existing nonces: all exact under the lock.
        # A dry run only reads (no lock), so it never waits for or blocks live writers.
        locked = (
            {store.pk: store for store in Store.objects.filter(pk__in=store_ids)}
            if dry_run
            else lock_stores_in_order(store_ids)
        )
        shared = set(ReaderGrant.objects.filter(store_id__in=store_ids, active=True).values_list("store_id", flat=True))
        parts_of = {
            row["id"]: split_document(record_document(row["label"], row["description"]), limit=ENTRY_MAX_BYTES)
            for row in batch
        }
        taken = _taken_nonces(
            [
                (stores[row["author_id"]].pk, row["author_id"], part_nonce(row["id"], number))
                for row in batch
                if stores[row["author_id"]] is not None
                for number in range(1, len(parts_of[row["id"]]) + 1)
            ]
        )
        now = timezone.now()
        entries: list[tuple] = []
        touched: dict[Any, Store] = {}
        for row in batch:
            store = stores[row["author_id"]]
            store = locked.get(store.pk) if store is not None else None
            if store is not None:
                if store.archived_at is not None:
                    summary.skipped_archived_store += 1
                    continue
                if store.visibility != Visibility.PRIVATE or store.pk in shared:
                    summary.skipped_shared_store += 1
                    continue
                if taken.get(part_nonce(row["id"], 1)) == row["id"]:
                    summary.skipped_already_imported += 1
                    continue
                squatted = [n for n in range(1, len(parts_of[row["id"]]) + 1) if part_nonce(row["id"], n) in taken]
                if squatted:
                    # Not this migration's entry (a note whose client_nonce looks like a part's): inserting the
                    # part would break the unique nonce and fail the whole batch, on every run (a breaker).
                    summary.skipped_nonce_taken += 1
                    logger.warning(
                        "record %s not imported: its part nonce %s is taken by an entry of store %s that this "
                        "migration did not write",
                        row["id"],
                        part_nonce(row["id"], squatted[0]),
                        store.pk,
                    )
                    continue
            parts = parts_of[row["id"]]
            provenance = {
                "source": "record",
                "source_id": row["id"],
                "project": str(row["project_id"]) if row["project_id"] else None,
                "key": row["key"],
                "status": row["status"],
                "parts": len(parts),
                "label_length": len(row["label"]),
            }
            summary.records += 1
            summary.entries += len(parts)
            summary._authors.add(row["author_id"])
            if dry_run:
                continue
            # Serialise once per record; each part only differs by its number (an int, no escaping).
            head = json.dumps(provenance, ensure_ascii=False)[:-1] + ', "part": '
            for number, body in enumerate(parts, start=1):
                size = len(body.encode("utf-8"))
                nonce = part_nonce(row["id"], number)
                part_provenance = f"{head}{number}}}"
                entries.append((store.pk, store.entry_count, row["author_id"], body, size, nonce, part_provenance, now))
                store.entry_count += 1
            touched[store.pk] = store
        if dry_run or not entries:
            return
        _copy_entries(entries)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {connection.ops.quote_name(Store._meta.db_table)} AS s "  # noqa: S608 (our table name)
                "SET entry_count = v.entry_count, updated_at = %s "
                "FROM unnest(%s::uuid[], %s::bigint[]) AS v(id, entry_count) WHERE s.id = v.id",
                [now, list(touched), [store.entry_count for store in touched.values()]],
            )


def _taken_nonces(keys: list[tuple]) -> dict[str, int | None]:
    """Which of the (store_id, author_id, client_nonce) keys already exist as entries: each found nonce with
    the legacy record id its entry was imported from (`provenance.source_id` of a `record` entry), or None
    for an entry this migration did not write.

    A join against an unnested array probes the unique (store, author, client_nonce) index once per
    key; a plain ``IN`` list over a table that grows during the run gets planned as a scan.
    """
    if not keys:
        return {}
    table = connection.ops.quote_name(Entry._meta.db_table)
    store_ids, author_ids, nonces = (list(column) for column in zip(*keys, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.client_nonce, CASE WHEN e.provenance ->> 'source' = 'record' "  # noqa: S608 (our table name)
            "THEN e.provenance ->> 'source_id' END "
            "FROM unnest(%s::uuid[], %s::uuid[], %s::text[]) AS k(store_id, author_id, nonce) "
            f"JOIN LATERAL (SELECT client_nonce, provenance FROM {table} WHERE store_id = k.store_id "
            "AND author_id = k.author_id AND client_nonce = k.nonce) AS e ON true",
            [store_ids, author_ids, nonces],
        )
        return {nonce: int(source) if source and source.isdigit() else None for nonce, source in cursor.fetchall()}


ENTRY_COPY_FIELDS = ("store", "seq", "author", "body_md", "size_bytes", "client_nonce", "provenance", "created_at")


def _copy_entries(rows: list[tuple]) -> None:
    """Insert entry rows (in ENTRY_COPY_FIELDS order, provenance as JSON text) with PostgreSQL COPY.

    COPY is several times faster than a multi-row INSERT for thousands of rows with long text: values
    go over the wire without client-side quoting. It runs inside the caller's transaction, so the
    unique constraints (store, seq) and (store, author, client_nonce) still guard every row.
    """
    table = connection.ops.quote_name(Entry._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(Entry._meta.get_field(name).column) for name in ENTRY_COPY_FIELDS)
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def import_records(
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    summary: ImportSummary | None = None,
    on_batch: Callable[[int], None] | None = None,
    workers: int = DEFAULT_WORKERS,
) -> ImportSummary:
    """Import every legacy record's current label and description into its author's private store.

    batch_size: records per transaction (≥ 1). on_batch(n) is called after each batch with its size
    (progress bars; from the workers' threads, one call at a time). Records are taken in (created_at, id)
    order, so each store receives its author's records chronologically; a record's parts get consecutive
    seqs, part 1 first. Each entry gets ``client_nonce = legacy-0041:<source_id>:<part>`` and `provenance`
    ``{source: "record", source_id, project, key, status, part, parts, label_length}`` (label_length in
    code points: ``document[:label_length] == label``).

    workers: connections importing at once (≥ 1), each the records of its own group of authors
    (`_author_partitions`): while PostgreSQL writes one worker's batch, another's is being prepared.
    Authors never share a store, so the workers lock disjoint stores and the result is the same as with
    one worker. Inside a transaction (a caller's `atomic`, a test's) the import runs on the caller's
    connection alone, since other connections could not see what that transaction wrote. When a worker
    fails, the others stop after their current batch, and its exception is raised; committed batches stay
    (a re-run skips them). Returns the (updated) summary. Raises ValueError for a bad batch size or count.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    if workers < 1:
        raise ValueError("workers must be at least 1.")
    summary = summary or ImportSummary(dry_run=dry_run)
    if workers == 1 or connection.in_atomic_block:
        _import_group(None, batch_size, summary, dry_run, on_batch, threading.Event())
    else:
        _import_in_parallel(_author_partitions(workers), batch_size, summary, dry_run, on_batch)
    summary.authors = len(summary._authors)
    summary.stores_created = len(summary._stores_created)
    return summary


def _import_group(
    authors: list[Any] | None,
    batch_size: int,
    summary: ImportSummary,
    dry_run: bool,
    on_batch: Callable[[int], None] | None,
    stop: threading.Event,
) -> None:
    """Import the records of `authors` (all when None) batch by batch until done or `stop` is set."""
    for batch in _record_batches(batch_size, authors):
        if stop.is_set():
            return
        _import_batch(batch, summary, dry_run=dry_run)
        if on_batch is not None:
            on_batch(len(batch))


def _import_in_parallel(
    groups: list[list[Any]],
    batch_size: int,
    summary: ImportSummary,
    dry_run: bool,
    on_batch: Callable[[int], None] | None,
) -> None:
    """One thread and one database connection per author group; their counts are added to `summary`."""
    if not groups:  # no legacy record at all
        return
    stop, progress = threading.Event(), threading.Lock()
    parts = [ImportSummary(dry_run=dry_run) for _ in groups]

    def report(n: int) -> None:
        with progress:
            on_batch(n)

    def run(authors: list[Any], part: ImportSummary) -> None:
        try:
            _import_group(authors, batch_size, part, dry_run, report if on_batch else None, stop)
        except BaseException:
            stop.set()
            raise
        finally:
            connection.close()  # this thread's own connection

    with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="import-0041") as pool:
        futures = [pool.submit(run, authors, part) for authors, part in zip(groups, parts, strict=True)]
    for part in parts:
        summary.add(part)
    for future in futures:
        future.result()  # the first failure, once every worker has stopped


def migrate_0041(
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    workers: int = DEFAULT_WORKERS,
) -> ImportSummary:
    """Run the whole 0041 migration: archive every legacy row, then import the records (SPEC §7).

    on_start(total_records) is called once before the import; on_batch(n) after each batch; `workers`
    as in `import_records`.
    With `dry_run` the same numbers are computed and nothing is written (no archive row, store,
    entry or counter). Safe to re-run: archives and entries are never duplicated.
    """
    started = time.monotonic()
    summary = ImportSummary(dry_run=dry_run)
    archived = archive_legacy_rows(dry_run=dry_run)
    summary.archived_records = archived["records"]
    summary.archived_assessments = archived["assessments"]
    summary.archived_revisions = archived["revisions"]
    if on_start is not None:
        on_start(Record.objects.count())
    import_records(batch_size=batch_size, dry_run=dry_run, summary=summary, on_batch=on_batch, workers=workers)
    summary.duration_s = time.monotonic() - started
    return summary
