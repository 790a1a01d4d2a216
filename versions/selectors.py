"""Reads of the Memory Stores surface (SPEC §5). Callers pass a store already fetched through
`stores.selectors.get_store_for` (access checked: unreadable = missing); everything here is scoped to it.

Lists are keyset-paginated: each takes the decoded position of the previous page's last item (`after`)
and returns up to ``limit + 1`` items so the caller can tell whether another page exists.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, F, Q, TextField, Value, When
from django.db.models.functions import Collate, Concat, StrIndex, Substr
from django.db.models.lookups import Exact

from config.errors import NotFound
from config.fields import canonical_uuid
from stores.models import Store
from versions.errors import MemoryNotFound, VersionNotFound
from versions.models import Memory, Version


def parse_id(value: object, error: type[NotFound]) -> uuid.UUID:
    """Parse a canonical UUID from a URL (`config.fields.canonical_uuid`); anything else raises `error`
    (a 404, same as a missing object)."""
    pk = canonical_uuid(value)
    if pk is None:
        raise error()
    return pk


# --- stores -------------------------------------------------------------------------------------------


def memory_stores(
    user,
    *,
    include_archived: bool = False,
    created_gte: datetime | None = None,
    created_lte: datetime | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 20,
) -> list[Store]:
    """Stores `user` may read (SPEC §3), newest first (`created_at`, then `id`, descending).

    Archived stores are left out unless `include_archived`. `created_gte`/`created_lte` are inclusive.
    `after`: ``(created_at, id)`` of the previous page's last store. Returns ≤ limit + 1 stores; one query.
    """
    stores = Store.objects.readable_by(user)
    if not include_archived:
        stores = stores.filter(archived_at__isnull=True)
    if created_gte is not None:
        stores = stores.filter(created_at__gte=created_gte)
    if created_lte is not None:
        stores = stores.filter(created_at__lte=created_lte)
    if after is not None:
        created_at, pk = after
        stores = stores.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    return list(stores.order_by("-created_at", "-id")[: limit + 1])


# --- memories -----------------------------------------------------------------------------------------


def memory(store: Store, memory_id: object, *, with_content: bool = True) -> Memory:
    """The current memory `memory_id` of `store`; raises MemoryNotFound (also for malformed or deleted ids)."""
    memories = Memory.objects.filter(store=store)
    if not with_content:
        memories = memories.defer("content")
    found = memories.filter(pk=parse_id(memory_id, MemoryNotFound)).first()
    if found is None:
        raise MemoryNotFound()
    return found


@dataclass(frozen=True)
class MemoryPrefix:
    """A `memory_prefix` roll-up of a depth-1 listing: `path` ends with ``/`` (e.g. ``/projects/foo/``)."""

    path: str


def memories(
    store: Store,
    *,
    path_prefix: str = "/",
    depth: int = 0,
    after: str | None = None,
    limit: int = 20,
    with_content: bool = False,
) -> list[Memory | MemoryPrefix]:
    """List `store`'s memories below `path_prefix` in bytewise path order (SPEC §5 memory list).

    depth 0: every memory below the prefix. depth 1: only its direct children; each deeper subtree is
    one MemoryPrefix (``prefix + segment + "/"``), interleaved with the memories in path order and
    counted like one item. after: the previous page's last path or prefix. Returns ≤ limit + 1 items.
    Two queries at most (keys, then the memories) for depth 1; one for depth 0.
    """
    rows = Memory.objects.filter(store=store)
    if path_prefix != "/":
        rows = rows.filter(path__startswith=path_prefix)
    if not with_content:
        rows = rows.defer("content")
    if depth == 0:
        if after is not None:
            rows = rows.filter(path__gt=after)
        return list(rows.order_by("path")[: limit + 1])
    # depth 1: the key of each row is its own path (a direct child) or the child "directory" it lies
    # under; DISTINCT folds a subtree into one key. COLLATE "C" keeps the key order bytewise.
    rest = Substr("path", len(path_prefix) + 1)
    slash = StrIndex(rest, Value("/"))
    key = Collate(
        Case(
            When(Exact(slash, 0), then=F("path")),
            default=Concat(Value(path_prefix), Substr(rest, 1, slash)),
            output_field=TextField(),
        ),
        "C",
    )
    keys = rows.annotate(key=key).values_list("key", flat=True).distinct().order_by("key")
    if after is not None:
        keys = keys.filter(key__gt=after)
    page_keys = list(keys[: limit + 1])
    paths = [k for k in page_keys if not k.endswith("/")]
    by_path = {m.path: m for m in rows.filter(path__in=paths)} if paths else {}
    # A memory deleted between the two queries simply drops out of this page.
    return [MemoryPrefix(k) if k.endswith("/") else by_path[k] for k in page_keys if k.endswith("/") or k in by_path]


def _as_uuid(value: uuid.UUID | str | None) -> uuid.UUID | None:
    """None stays None; a UUID (or its text) becomes a UUID; anything else raises ValueError."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(value)


# --- versions -----------------------------------------------------------------------------------------


def version(store: Store, version_id: object) -> Version:
    """The version `version_id` of `store` (also after its memory was deleted); raises VersionNotFound."""
    found = Version.objects.filter(store=store, pk=parse_id(version_id, VersionNotFound)).first()
    if found is None:
        raise VersionNotFound()
    return found


def versions(
    store: Store,
    *,
    memory_id: uuid.UUID | None = None,
    operation: str | None = None,
    created_gte: datetime | None = None,
    created_lte: datetime | None = None,
    api_key_id: uuid.UUID | str | None = None,
    session_id: uuid.UUID | str | None = None,
    service_account_id: str | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 20,
    with_content: bool = False,
) -> list[Version]:
    """`store`'s versions, newest first (`created_at`, then `id`, descending), filtered (SPEC §5).

    Filters combine with AND; `created_*` bounds are inclusive. No service accounts exist here, so a
    `service_account_id` filter matches nothing; nor does an `api_key_id`/`session_id` that is not a UUID
    (such as the SDK's `sesn_…` form): an empty list, not a 400. after: ``(created_at, id)`` of the previous page's last
    version. Returns ≤ limit + 1 versions; one query.
    """
    rows = Version.objects.filter(store=store)
    if service_account_id is not None:
        return []
    try:
        api_key_id = _as_uuid(api_key_id)
        session_id = _as_uuid(session_id)
    except ValueError:
        return []
    if memory_id is not None:
        rows = rows.filter(memory_id=memory_id)
    if operation is not None:
        rows = rows.filter(operation=operation)
    if created_gte is not None:
        rows = rows.filter(created_at__gte=created_gte)
    if created_lte is not None:
        rows = rows.filter(created_at__lte=created_lte)
    if api_key_id is not None:
        rows = rows.filter(api_key_id=api_key_id)
    if session_id is not None:
        rows = rows.filter(session_id=session_id)
    if after is not None:
        created_at, pk = after
        rows = rows.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    if not with_content:
        rows = rows.defer("content")
    return list(rows.order_by("-created_at", "-id")[: limit + 1])
