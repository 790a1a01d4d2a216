"""Helpers shared by the agent-access services: database time, secrets, metadata patches."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from django.db import connection

from accounts.services import token_digest
from config.compiled import CompiledQuery, CompiledSharedLock
from config.errors import DomainError

UNSET: Any = object()
M = TypeVar("M")
LockStrength = Literal["update", "share", "key share"]


_SENTINEL_PK = uuid.UUID("00000000-0000-4000-8000-00000000010c")
_LOCK_QUERIES: dict[tuple[type, str], CompiledQuery] = {}


def _lock_query(model: type, strength: LockStrength) -> CompiledQuery:
    """The compiled locking read of one `model` row by primary key (a UUID) at `strength`."""
    query = _LOCK_QUERIES.get((model, strength))
    if query is None:
        if strength == "update":
            query = CompiledQuery(
                lambda pk: model.objects.filter(pk=pk).select_for_update(of=("self",)), pk=_SENTINEL_PK
            )
        else:
            query = CompiledSharedLock(lambda pk: model.objects.filter(pk=pk), strength, pk=_SENTINEL_PK)
        _LOCK_QUERIES[(model, strength)] = query
    return query


def lock_row(row: M, not_found: type[DomainError], *, strength: LockStrength = "update") -> M:
    """Re-read `row` (an environment, key, session or work item) with a row lock, held until commit.

    strength: ``"update"`` (``FOR UPDATE OF self``) to change or delete the row; ``"share"`` (``FOR
    SHARE``) to use it unchanged — nobody may update or delete it meanwhile, and an update that committed
    first is what is read (a poll checking its key is not revoked); ``"key share"`` (``FOR KEY SHARE``) to
    add a child row — it cannot be deleted meanwhile, but may be updated, and other key-share holders never
    wait for each other (a key issued, a poller recorded). Django has no ORM spelling for the two shared
    strengths, so they are the same query with the clause appended (`config.compiled.CompiledSharedLock`).
    Each (model, strength) is compiled once per process and runs as a prepared statement: an idle worker's
    poll locks its key every 100 ms (`POLL_STEP_SECONDS`).

    Must run inside a transaction. Raises `not_found` (a 404 domain error, or another DomainError such as a
    401) when the row was deleted since it was read — a request racing a delete of its environment,
    session or key is a 4xx, never a 500 (SPEC §2): a delete holding the row makes this wait, then find
    nothing.
    """
    locked = _lock_query(type(row), strength).first(pk=row.pk)
    if locked is None:
        raise not_found()
    return locked


def db_now() -> datetime:
    """The database's `statement_timestamp()` — the clock every lease and claim is judged by.

    Call it after taking the row locks a decision depends on: the statement that reads the clock then
    starts after the lock wait, so the time is never older than the state it is compared with.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def rfc3339(moment: datetime | None) -> str | None:
    """RFC 3339 UTC with a ``Z`` — the same text DRF renders, so clients can echo it back exactly."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Minted:
    """A fresh bearer secret: `secret` is shown once; `digest` (SHA-256 hex) and `prefix` are stored."""

    secret: str
    digest: str
    prefix: str


def mint_secret(kind_prefix: str) -> Minted:
    """``<kind_prefix><43 URL-safe characters>`` (256 bits), with its digest and a 12-character prefix."""
    secret = kind_prefix + secrets.token_urlsafe(32)
    return Minted(secret=secret, digest=token_digest(secret), prefix=secret[:12])
