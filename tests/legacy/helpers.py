"""Assertions shared by the legacy tests."""

from __future__ import annotations

import datetime as dt
import uuid
from itertools import accumulate

import regex


def cluster_boundaries(text: str, limit: int = 1024) -> tuple[set[int], set[int]]:
    """Return ``(boundaries, inside_oversized)``: code-point offsets of every grapheme-cluster boundary,
    and the offsets strictly inside clusters larger than `limit` UTF-8 bytes (where a cut is allowed)."""
    clusters = regex.findall(r"\X", text)
    boundaries = set(accumulate(map(len, clusters), initial=0))
    inside: set[int] = set()
    position = 0
    for cluster in clusters:
        if len(cluster.encode("utf-8")) > limit:
            inside.update(range(position + 1, position + len(cluster)))
        position += len(cluster)
    return boundaries, inside


def assert_valid_split(text: str, parts: list[str], limit: int = 1024) -> None:
    """Parts rebuild `text` byte for byte, each is 1..limit valid UTF-8 bytes, cuts fall on boundaries."""
    assert "".join(parts).encode("utf-8") == text.encode("utf-8")
    boundaries, inside = cluster_boundaries(text, limit)
    position = 0
    for part in parts:
        raw = part.encode("utf-8")  # strict: a lone surrogate (half a code point) would raise
        assert 1 <= len(raw) <= limit
        assert raw.decode("utf-8") == part
        position += len(part)
        assert position in boundaries or position in inside, f"cut inside a cluster at {position}"


def archived_equals(row, data: dict) -> bool:
    """True when `data` (an archive's JSON) holds exactly every column of `row` with equal values."""
    columns = {field.column: getattr(row, field.attname) for field in row._meta.concrete_fields}
    if set(data) != set(columns):
        return False
    for column, value in columns.items():
        stored = data[column]
        if isinstance(value, dt.datetime):
            stored = dt.datetime.fromisoformat(stored)
        elif isinstance(value, uuid.UUID):
            stored = uuid.UUID(stored)
        if stored != value:
            return False
    return True
