"""Access-checked reads of stores (SPEC §3). Every surface (log, files, sessions, MCP, CLI) comes through here."""

from __future__ import annotations

import uuid
from typing import Literal

from django.db.models import QuerySet

from stores.errors import StoreNotFound, StoreOwnerRequired, StoreWriteForbidden
from stores.models import Store

Need = Literal["read", "write", "owner"]


def parse_store_id(value: object) -> uuid.UUID:
    """Parse a store id; anything that is not a UUID raises StoreNotFound (same as a missing store)."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        raise StoreNotFound() from None


def readable_stores(user, *, scope: str | None = None) -> QuerySet[Store]:
    """Stores `user` may read (SPEC §3), newest first, annotated with `can_write`/`is_owner`; one query."""
    stores = Store.objects.with_permissions(user).select_related("owner", "project", "section")
    if scope:
        stores = stores.filter(scope=scope)
    return stores.order_by("-created_at", "-id")


def get_store_for(user, store_id: object, *, need: Need = "read") -> Store:
    """Return the store `store_id` if `user` may read it, annotated with `can_write` and `is_owner`.

    need: "read" | "write" | "owner". Raises StoreNotFound (404) when the store is missing or unreadable
    (identical bodies), StoreWriteForbidden / StoreOwnerRequired (403) when readable but the right is
    missing. One query. Archived state is checked by the write services, under the store lock.
    """
    pk = parse_store_id(store_id)
    store = Store.objects.with_permissions(user).select_related("owner", "project", "section").filter(pk=pk).first()
    if store is None:
        raise StoreNotFound()
    if need == "write" and not store.can_write:
        raise StoreWriteForbidden()
    if need == "owner" and not store.is_owner:
        raise StoreOwnerRequired()
    return store


def permissions_of(store: Store) -> dict[str, bool]:
    """The caller's rights on a store fetched through `get_store_for`/`readable_stores`."""
    return {"read": True, "write": bool(store.can_write), "owner": bool(store.is_owner)}
