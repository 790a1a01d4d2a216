"""Import use-cases (SPEC §8b; docs/export-import.md): the two drivers of `memories.exchange.importer.Importer`.

- `import_file` (manage.py import_store): the whole file in one transaction; any error rolls all of it back.
- the resumable HTTP import (`start_upload`, `append_chunk`, `abort_upload`): the store is created hidden
  (`Store.importing`), each chunk of whole lines is verified and written in its own transaction (so every
  request stays short), the importer's state is saved in its `StoreImport`, and the chunk holding the
  end line makes the store visible. A failed chunk changes nothing; an abandoned import is deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, BinaryIO

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.db.models.functions import Lower, Now
from django.utils import timezone

from accounts import selectors as account_selectors
from accounts.models import Project, Section, User
from config.constraints import violates
from config.fields import canonical_uuid
from config.text import quoted
from memories.exchange import verify
from memories.exchange.errors import (
    ImportCommitted,
    ImportForbidden,
    ImportInvalid,
    ImportNotFound,
    ImportOffsetMismatch,
    ImportWritersChanged,
    StoreNotEmpty,
    UnknownHandles,
)
from memories.exchange.format import MAX_LINE_BYTES
from memories.exchange.importer import BATCH_LINES, FUTURE_SLACK, UNVOUCHED, Importer
from memories.exchange.verify import Header
from memories.models import ImportStatus, StoreImport, Summary
from stores.models import ReaderGrant, Scope, Store, owner_q, read_right_q, write_q
from stores.selectors import Subject, hold_parent_rights
from stores.services import lock_store, mark_deleted, purge_after_deletion, purge_deleted_stores
from versions.models import Version


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
    found = account_selectors.by_slug(model.objects.all(), name)
    if found is None:
        noun = "project" if scope == Scope.PROJECT else "section"
        raise ImportInvalid(1, f"the {noun} {quoted(name)} does not exist on this server; create it first.")
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
    Keeping ids lets links and agent configurations survive a move; the price is that an importer learns
    whether an id it already knows is taken (docs/export-import.md "Ids").
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
    if Store.objects.filter(pk=wanted, deleted_at__isnull=False).exists():
        # a deleted store whose rows wait for the purge holds the id: purge it now (within the request's
        # purge budget; a store too large for that keeps the id until `purge_stores` has run)
        purge_deleted_stores(seconds=settings.STORE_PURGE_SECONDS, first=wanted, only_first=True)
    if not Store.objects.filter(pk=wanted).exists():
        try:
            with transaction.atomic():
                return Store.objects.create(id=wanted, **fields), True
        except IntegrityError as exc:  # a parallel import of the same file took the id first
            if not violates(exc, "stores_store_pkey"):
                raise
    return Store.objects.create(id=uuid.uuid4(), **fields), False


def prepare_into(*, store: Store, header: Header, users: dict[str, str]) -> Store:
    """Lock the existing, empty store `store` for a whole-file import into it (`--into`).

    It keeps its id, scope, subject, visibility and canonical flag; name, description, metadata, times
    and generation come from the file. Raises StoreNotEmpty (409) when it holds any entry, summary,
    file version or reader grant, or is itself being imported.
    """
    locked = lock_store(store)
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


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    """The file's lines without their newline characters (split on LF only: U+2028 inside text is data).

    A line is never read past `MAX_LINE_BYTES` + 1 bytes: a longer one comes out cut there, which
    `verify.decode_line` refuses (iterating the file read a whole line first: a 400 MB line took 914 MB
    of memory before its refusal, found by a breaker)."""
    while raw := stream.readline(MAX_LINE_BYTES + 2):
        if raw.endswith(b"\n"):
            yield raw[:-1]
        else:
            yield raw  # the last line without its newline, or the start of a line that is too long
            if len(raw) > MAX_LINE_BYTES:
                return  # refused by decode_line: the rest is never read


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
    """Delete the stores of open imports idle longer than IMPORT_IDLE_SECONDS (database time); returns how many.

    The idle imports' rows are locked first (`SKIP LOCKED`): a chunk being appended holds its import's row
    for its whole transaction, so an import in use is never expired under it (its uncommitted entries made
    the store's DELETE fail with an IntegrityError, a 500 for whoever started the next import), and a chunk
    arriving once the row is locked here waits, then finds the import gone (404).
    """
    idle = Now() - timedelta(seconds=settings.IMPORT_IDLE_SECONDS)
    with transaction.atomic():
        open_idle = StoreImport.objects.filter(updated_at__lt=idle, status=ImportStatus.OPEN)
        abandoned = list(open_idle.select_for_update(of=("self",), skip_locked=True).values_list("store_id", flat=True))
        # mark_deleted removes their imports too
        deleted = mark_deleted(Store.objects.filter(pk__in=abandoned, importing=True).values_list("pk", flat=True))
    StoreImport.objects.filter(updated_at__lt=idle, status=ImportStatus.COMMITTED).delete()
    if deleted:
        purge_after_deletion()
    return deleted


def start_upload(*, actor: User, body: bytes, subject: Subject | None = None, expire_idle: bool = True) -> StoreImport:
    """Start a resumable import with the first chunk (header first); SPEC §8b, docs/export-import.md.

    subject: where the new store goes (the caller has the owner right on it), default the header's —
    whose owner right the caller must then hold too (checked by the caller). Creates the hidden store,
    verifies and writes the chunk's other lines; a chunk that already ends with the end line completes
    the import. The owner right is judged again inside the transaction, before the work and, with the
    parent's row held, just before the commit (`_judge_owner`). Raises
    UnknownHandles, ImportInvalid (400), ImportForbidden (403); then nothing remains. `expire_idle`: expire
    idle imports first (`expire_idle_imports`, in transactions of its own); a caller that did it already,
    outside the transaction it runs this in (the REST view under `Idempotency-Key`), passes False.
    """
    if expire_idle:
        expire_idle_imports()
    lines = split_chunk(body, 1)
    header = _header(lines[0])
    with transaction.atomic():
        users = resolve_handles(header.handles)
        store, keep_ids = create_pending_store(header=header, users=users, subject=subject or _subject_of(header))
        # the caller checked before this transaction; a removal may have committed since: refused before any
        # work, and judged again with the parent's row held just before the commit (below). The new store's
        # foreign key holds nothing meanwhile: Django's foreign keys are checked at commit (DEFERRABLE
        # INITIALLY DEFERRED), and the check's key-share lock lasts as long as the commit.
        _judge_owner(actor, store, hold=False)
        vouched = _vouched(store, users)
        creator = header.store["created_by"]
        if creator and users[creator] not in vouched["writers"]:
            raise ImportInvalid(1, f"store.created_by: {UNVOUCHED.format(handle=quoted(creator))}")
        for key in ("created_at", "updated_at", "archived_at"):
            if header.store[key] is not None and header.store[key] > timezone.now() + FUTURE_SLACK:
                raise ImportInvalid(1, f"store.{key} is in the future.")
        importer = Importer.begin(
            store=store, header=header, header_line=lines[0], users=users, keep_ids=keep_ids, vouched=vouched
        )
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
        _judge_owner(actor, store)
        _confirm_writers(store, users, vouched)
    return upload


def _judge_owner(actor: User, store: Store, *, hold: bool = True) -> None:
    """The import's owner check. With `hold`, against the rights of the moment its chunk commits: the
    project's or section's row is held `FOR KEY SHARE` first (`hold_parent_rights`), so a demotion or removal
    either committed before this check, which then sees it, or waits for this chunk's commit — never lands
    between (a breaker's owner, demoted while her last chunk waited, still committed the store). Run it last
    in a chunk's transaction: the lock then lasts milliseconds, where held for a whole chunk's work, parallel
    imports kept every membership change of the project waiting until it timed out (a second breaker).
    Raises ImportForbidden (403) when `actor` no longer owns `store`'s subject (or is inactive)."""
    if hold:
        hold_parent_rights(project_id=store.project_id, section_id=store.section_id)
    if (
        not actor.is_active
        or not Store.objects.filter(pk=store.pk).filter(read_right_q(actor) & owner_q(actor)).exists()
    ):
        raise ImportForbidden()


def _confirm_writers(store: Store, users: dict[str, str], vouched: dict[str, list[str]] | None) -> None:
    """Run with the parent's row held (after `_judge_owner`), just before a chunk commits: every user the
    chunk was checked against (`vouched`, read before its work) still holds what it was vouched for —
    writers the write right, active users their account — else ImportWritersChanged (409; the chunk is
    rolled back, and sent again it is judged anew). One query per header user. Without it, an author removed
    while the chunk worked was written as its author."""
    if vouched is None:
        return
    now = _vouched(store, users)
    if any(not set(vouched.get(key, [])) <= set(now[key]) for key in now):
        raise ImportWritersChanged()


def _vouched(store: Store, users: dict[str, str]) -> dict[str, list[str]]:
    """Whom an HTTP import may name, among the header's users (ids as text), as rights stand now (SPEC §3):
    ``writers`` (the write right: authors, redactors, forgetters, granters, version actors) and ``active``
    (active accounts: an active reader grant, which the API refuses to an inactive user, helper-38).

    A user cannot attribute history to someone who could never have written it here (docs/export-import.md
    "Who may be an author"). One query per distinct user; a header lists few.
    """
    vouched: dict[str, list[str]] = {"writers": [], "active": []}
    for user in User.objects.filter(pk__in=set(users.values()), is_active=True):
        vouched["active"].append(str(user.pk))
        if Store.objects.filter(pk=store.pk).filter(read_right_q(user) & write_q(user)).exists():
            vouched["writers"].append(str(user.pk))
    return vouched


def header_subject(body: bytes) -> tuple[str, str]:
    """(scope, subject) named by the header at the start of `body` (for the caller's access check)."""
    first = body.split(b"\n", 1)[0] if body else None
    header = _header(first or None)
    return header.store["scope"], header.store["subject"]


def get_upload(*, actor: User, import_id: object, lock: bool = False) -> StoreImport:
    """The caller's own import `import_id`, else ImportNotFound (404; someone else's looks missing)."""
    pk = canonical_uuid(import_id)  # any other spelling names nothing, as for every id in a URL
    if pk is None:
        raise ImportNotFound()
    # The import's store first (a plain read), then the import by (store, id): on Citus a locking read
    # must name the shard (docs/scaling.md).
    store_id = StoreImport.objects.filter(pk=pk, created_by=actor).values_list("store_id", flat=True).first()
    uploads = StoreImport.objects.select_related("store")
    if lock:
        uploads = uploads.select_for_update(of=("self",))
    upload = None if store_id is None else uploads.filter(store_id=store_id, pk=pk, created_by=actor).first()
    if upload is None:
        raise ImportNotFound()
    return upload


def list_uploads(*, actor: User, status: str | None = None) -> QuerySet[StoreImport]:
    """The caller's own imports, newest first (``ORDER BY created_at DESC, id DESC``), optionally only those
    whose `status` is "open" or "committed"; docs/export-import.md "Two drivers", step 5.

    Nobody sees another user's imports, staff included (an open import's store is hidden from everyone but
    its importer). Committed imports and abandoned open ones are deleted IMPORT_IDLE_SECONDS after their last
    chunk (`expire_idle_imports`), so the list is short; an open import past that age may still be listed
    until the next import start deletes it, and a chunk sent to it then finds it gone (404).
    """
    uploads = StoreImport.objects.filter(created_by=actor)
    if status is not None:
        uploads = uploads.filter(status=status)
    return uploads.order_by("-created_at", "-id")


@transaction.atomic
def append_chunk(*, actor: User, import_id: object, from_line: int, body: bytes) -> StoreImport:
    """Verify and write the next chunk of whole lines, which must start at line `from_line`.

    Locks the import (parallel chunks of one import are serialised). Rights are judged now, not when the
    import started: the caller must still own the import's subject (ImportForbidden, 403, otherwise — a
    project owner removed mid-import still committed a store into the project, found by a breaker), and the
    authors, redactors and actors the chunk names must hold the write right on the target now (ImportInvalid,
    docs/export-import.md "Who may be an author"). Raises ImportNotFound (404), ImportCommitted (409,
    details.store_id), ImportOffsetMismatch (409, details.next_line: a retried chunk that already landed, or
    a gap), ImportInvalid (400). A failed chunk changes nothing.
    """
    upload = get_upload(actor=actor, import_id=import_id, lock=True)
    if upload.status == ImportStatus.COMMITTED:
        raise ImportCommitted(details={"store_id": str(upload.store_id)})
    if from_line != upload.next_line:
        raise ImportOffsetMismatch(details={"next_line": upload.next_line})
    store = Store.objects.get(pk=upload.store_id)
    _judge_owner(actor, store, hold=False)  # refused before any work; judged again, held, before the commit
    vouched, users = None, upload.state["users"]
    if upload.state.get("vouched") is not None:  # an HTTP import: its authors are those who may write there now
        vouched = upload.state["vouched"] = _vouched(store, upload.state["users"])
    importer = Importer(store, upload.state)
    importer.feed(split_chunk(body, from_line))
    upload.state = importer.state()
    upload.next_line = importer.next_line
    upload.status = ImportStatus.COMMITTED if importer.done else ImportStatus.OPEN
    _judge_owner(actor, store)
    _confirm_writers(store, users, vouched)
    upload.updated_at = Now()
    upload.save(update_fields=["state", "next_line", "status", "updated_at"])
    upload.refresh_from_db(fields=["updated_at"])
    return upload


def abort_upload(*, actor: User, import_id: object) -> uuid.UUID:
    """Abandon an open import: delete its hidden store and everything written so far. Returns the import id.

    Raises ImportNotFound (404), ImportCommitted (409: a finished import is an ordinary store; delete that).
    The import and its store are gone when this returns; the store's rows are purged as a deleted store's
    (`stores.services.purge_after_deletion`), so an import of any size can be abandoned.
    """
    with transaction.atomic():
        upload = get_upload(actor=actor, import_id=import_id, lock=True)
        if upload.status == ImportStatus.COMMITTED:
            raise ImportCommitted(details={"store_id": str(upload.store_id)})
        pk, store_id = upload.pk, upload.store_id
        mark_deleted([store_id])  # removes the import too
    purge_after_deletion(first=store_id)
    return pk


def upload_progress(upload: StoreImport) -> dict[str, Any]:
    """The import as the API shows it: status, store id, the next line, lines and sections received, and the
    running SHA-256 chain of the lines received (`format.Chain`), so a client resuming can check it sends the
    same file."""
    state = upload.state or {}
    return {
        "id": str(upload.pk),
        "status": upload.status,
        "store_id": str(upload.store_id),
        "next_line": upload.next_line,
        "lines_received": upload.next_line - 1,
        "chain": state.get("chain"),
        "counts": state.get("counts"),
        "received": state.get("seen"),
        "warnings": state.get("warnings", []),
        "created_at": upload.created_at,
        "updated_at": upload.updated_at,
    }
