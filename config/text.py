"""Text checks shared by every surface: PostgreSQL rejects U+0000 and lone surrogates cannot be encoded."""

from __future__ import annotations

import json
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def quoted(value: object, limit: int | None = None) -> str:
    """`value` as a JSON literal for an error message (SPEC §2): ``"é\\"`` for the string `é\\`, ``true``,
    ``12``; never Python's repr (``'é\\\\'``, ``True``). Non-ASCII text stays readable; control characters
    and lone surrogates are written as JSON escapes, so the message always encodes. A string longer than
    `limit` characters is cut there and the literal followed by "…"."""
    cut = isinstance(value, str) and limit is not None and len(value) > limit
    text = json.dumps(value[:limit] if cut else value, ensure_ascii=False)
    text = _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text + "…" if cut else text
