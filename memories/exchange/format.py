"""The export format, version 1 (SPEC §8b; docs/export-import.md): one JSON object per line.

Line 1 is the header (`type: "memories-export"`, `version`, `store`, `counts`, `handles`); then every
entry (seq order), every summary (level, start, created_at order), every file version (created_at, id
order), every current file memory (bytewise path order), every explicit reader (handle order); the last
line is `{"type": "end", "lines": N, "sha256": CHAIN, "exported_at": T}` where N counts the lines before
it, CHAIN links them all (`Chain`) and T is the snapshot's time. Lines are UTF-8 JSON with no
insignificant whitespace and keys in a fixed order, so the same store always exports to the same bytes;
only the end line's `exported_at` (and ids, when an import had to give new ones) can differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

FORMAT = "memories-export"
VERSION = 1
MEDIA_TYPE = "application/jsonl"
ACCEPTED_MEDIA_TYPES = ("application/jsonl", "application/x-ndjson")
CHAIN_SEED = b"memories-export-v1"
# The longest line a valid export can hold: a 102,400-byte version whose every character JSON-escapes to
# six bytes (\u001f), plus its path and metadata — well under this; anything longer is refused unread.
MAX_LINE_BYTES = 1024 * 1024

_TIMESTAMP_RE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z", re.ASCII)
# The same spelling produced by PostgreSQL itself, so the export never converts a timestamp in Python.
SQL_TIMESTAMP = """to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""


def dump_line(obj: dict[str, Any]) -> bytes:
    """One line of the file: compact UTF-8 JSON (no ASCII escaping of text) and a trailing newline."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def timestamp(value: datetime | None) -> str | None:
    """RFC 3339 UTC with exactly six fractional digits and ``Z`` (one spelling per instant), or None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_timestamp(value: object) -> datetime | None:
    """The inverse of `timestamp` for a string in exactly that spelling; None for anything else."""
    match = _TIMESTAMP_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:  # by hand: datetime.strptime costs ten times as much, and imports parse one per line or more
        return datetime(*map(int, match.groups()), tzinfo=UTC)
    except ValueError:  # 2026-02-30 and the like
        return None


class Chain:
    """The running digest that the end line records: ``c0 = SHA-256("memories-export-v1")``, then
    ``c(i) = SHA-256(c(i-1) ‖ line i)`` over the raw bytes of each line without its newline.

    Unlike one SHA-256 of the whole file, its state is 32 bytes that can be saved between the chunks of
    a resumable import (`state` / ``Chain(state)``).
    """

    def __init__(self, state: str | None = None) -> None:
        self._digest = bytes.fromhex(state) if state else hashlib.sha256(CHAIN_SEED).digest()

    def update(self, line: bytes) -> None:
        """Fold in one line (its bytes without the trailing newline)."""
        self._digest = hashlib.sha256(self._digest + line).digest()

    @property
    def state(self) -> str:
        """The current value as 64 lowercase hex characters."""
        return self._digest.hex()
