"""Opaque `page` tokens for the Memory Stores lists (SPEC §5: ``{"data": [...], "next_page": str | null}``).

A token is a signed (SECRET_KEY, salted), compact JSON of the list kind, a fingerprint of the query
that produced it (store and filters, not `limit`/`view`) and the last item's position. A token that was
tampered with, truncated, or belongs to another list or query is a 400 `invalid_request_error`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any

from django.core import signing
from django.utils.dateparse import parse_datetime

from versions.errors import InvalidPage

_SALT = "versions.api.pagination"


def _fingerprint(query: dict[str, Any]) -> str:
    canonical = json.dumps(query, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def encode_page(*, kind: str, query: dict[str, Any], caller: str | None, position: Any) -> str:
    """Return the token for the page after `position` (a path, or ``[created_at_iso, id]``), bound to `kind`,
    the query and the caller (`config.api.caller_key`)."""
    fingerprint = _fingerprint({**query, "caller": caller})
    return signing.dumps({"k": kind, "q": fingerprint, "p": position}, salt=_SALT, compress=True)


def decode_page(token: str | None, *, kind: str, query: dict[str, Any], caller: str | None) -> Any:
    """Return the position stored in `token` (None when no token). Raises InvalidPage (400) when it is
    tampered with, or was handed out for another list, query or caller."""
    if token is None:
        return None
    try:
        payload = signing.loads(token, salt=_SALT)
    except (signing.BadSignature, ValueError, UnicodeError):
        raise InvalidPage() from None
    fingerprint = _fingerprint({**query, "caller": caller})
    if not isinstance(payload, dict) or payload.get("k") != kind or payload.get("q") != fingerprint:
        raise InvalidPage()
    return payload.get("p")


def time_position(item: Any) -> list[str]:
    """The position of a newest-first item: ``[created_at ISO 8601 with microseconds, id]``."""
    return [item.created_at.isoformat(timespec="microseconds"), str(item.pk)]


def parse_time_position(position: Any) -> tuple[datetime, uuid.UUID]:
    """Inverse of `time_position`; raises InvalidPage for anything else."""
    try:
        created_at, pk = position
        moment = parse_datetime(created_at)
        if moment is None:
            raise ValueError
        return moment, uuid.UUID(pk)
    except (TypeError, ValueError, AttributeError):
        raise InvalidPage() from None


def parse_path_position(position: Any) -> str:
    """A memory-list position is the last path or prefix; raises InvalidPage for anything else."""
    if not isinstance(position, str):
        raise InvalidPage()
    return position
