"""Small pieces the agent-access views share: validation, keyset pages, path parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from versions.api.pagination import decode_page, encode_page, parse_time_position, time_position

ENVIRONMENT_ID = OpenApiParameter(
    "environment_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Environment id."
)
SESSION_ID = OpenApiParameter("session_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Session id.")
WORK_ID = OpenApiParameter("work_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Work item id.")
KEY_ID = OpenApiParameter("key_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Environment key id.")
WORKER_ID_HEADER = OpenApiParameter(
    "Anthropic-Worker-ID",
    {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
    OpenApiParameter.HEADER,
    required=False,
    description="The polling worker's id (1–200 visible ASCII characters), counted in `workers_polling`.",
)


def validated(serializer_class, data) -> dict[str, Any]:
    """Validate `data` (a body or `request.query_params`) with `serializer_class`; 400 naming the fields."""
    incoming = serializer_class(data=data)
    incoming.is_valid(raise_exception=True)
    return incoming.validated_data


def keyset_page(
    query: dict[str, Any],
    *,
    kind: str,
    fingerprint: dict[str, Any],
    caller: str | None,
    fetch: Callable[..., list[Any]],
) -> tuple[list[Any], str | None]:
    """Run one newest-first (or oldest-first) keyset page: decode `query["page"]` (bound to `kind`, the
    query's `fingerprint` and the `caller`; a foreign or tampered token is 400), call
    ``fetch(after=…, limit=…)`` for up to limit + 1 rows, and return ``(rows, next_page)``."""
    limit = query["limit"]
    position = decode_page(query.get("page"), kind=kind, query=fingerprint, caller=caller)
    rows = fetch(after=None if position is None else parse_time_position(position), limit=limit)
    page, more = rows[:limit], len(rows) > limit
    token = encode_page(kind=kind, query=fingerprint, caller=caller, position=time_position(page[-1])) if more else None
    return page, token
