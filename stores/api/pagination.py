"""Opaque, signed keyset cursors for the store lists (SPEC §4: `cursor`, `limit` 1–100, `meta.next_cursor`).

A cursor is ``django.core.signing.dumps({"k": [..keys of the last row..], "b": binding})`` with a salt per
list, so it is URL-safe, opaque to clients, and any edit (or a cursor taken from another list or another
query) fails the signature or the binding check and gives 400 `invalid_request_error`. No COUNT query:
a page fetches ``limit + 1`` rows to learn whether another page follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.core import signing

from config.errors import InvalidRequest

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_SALT = "memories.cursor."


def encode_cursor(*, kind: str, keys: list[Any], binding: Any = None) -> str:
    """Sign the keyset position `keys` (JSON-serialisable) for the list `kind`; `binding` ties it to a query."""
    return signing.dumps({"k": keys, "b": binding}, salt=_SALT + kind, compress=True)


def decode_cursor(cursor: str, *, kind: str, binding: Any = None, arity: int) -> list[Any]:
    """Return the keys signed into `cursor`.

    Raises InvalidRequest (400, naming `cursor`) when the signature does not verify, the cursor belongs to
    another list or another query (`binding`), or its shape is not `arity` keys.
    """
    try:
        payload = signing.loads(cursor, salt=_SALT + kind)
    except (signing.BadSignature, ValueError, TypeError, UnicodeError):
        raise InvalidRequest("cursor: invalid or tampered cursor; use meta.next_cursor as returned.") from None
    if not isinstance(payload, dict) or payload.get("b") != binding:
        raise InvalidRequest("cursor: this cursor belongs to a different query.")
    keys = payload.get("k")
    if not isinstance(keys, list) or len(keys) != arity:
        raise InvalidRequest("cursor: invalid or tampered cursor; use meta.next_cursor as returned.")
    return keys


@dataclass(frozen=True)
class Page:
    """One page of rows and the cursor of the next page (None at the end)."""

    rows: list[Any]
    next_cursor: str | None


def take_page(
    rows: Sequence[Any] | Any, *, limit: int, kind: str, keys_of: Callable[[Any], list[Any]], binding: Any = None
) -> Page:
    """Evaluate ``rows[: limit + 1]`` (one query) and build the next cursor from the last row kept.

    rows: an ordered QuerySet already filtered after the previous cursor; keys_of(row) gives the keyset.
    """
    fetched = list(rows[: limit + 1])
    more = len(fetched) > limit
    fetched = fetched[:limit]
    next_cursor = encode_cursor(kind=kind, keys=keys_of(fetched[-1]), binding=binding) if more and fetched else None
    return Page(rows=fetched, next_cursor=next_cursor)
