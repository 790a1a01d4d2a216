"""Text checks shared by every surface: PostgreSQL rejects U+0000 and lone surrogates cannot be encoded."""

from __future__ import annotations

import re

_FORBIDDEN = re.compile("[\x00\ud800-\udfff]")


def first_forbidden_char(text: str) -> str | None:
    """Return a reason (``"contains a NUL character"`` / ``"contains a lone surrogate"``) or None."""
    match = _FORBIDDEN.search(text)
    if match is None:
        return None
    return "contains a NUL character" if match.group() == "\x00" else "contains a lone surrogate"


def utf8_len(text: str) -> int:
    """Length of `text` in UTF-8 bytes (callers have already rejected lone surrogates)."""
    return len(text.encode("utf-8"))
