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


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate (U+D800–U+DFFF), which no UTF-8 can encode."""
    return _SURROGATE.search(text) is not None


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_len(text: str) -> int:
    """Length of `text` in UTF-8 bytes (callers have already rejected lone surrogates)."""
    return len(text.encode("utf-8"))


# What `json.dumps(..., ensure_ascii=False)` leaves raw but a message must not carry: lone surrogates (no
# encoding takes them), DEL and the C1 controls (U+009B starts a terminal escape sequence, a tester), and the
# line and paragraph separators.
_ESCAPED = re.compile("[\ud800-\udfff\x7f-\x9f\u2028\u2029]")


def quoted(value: object, limit: int | None = None) -> str:
    r"""`value` as a JSON literal for an error message (SPEC §2): the string `it's "é"\` is written
    `"it's \"é\"\\"`, `True` is `true`; never Python's repr (`'it\'s "é"\\'`, `True`). Non-ASCII text stays
    readable; every control character (C0, DEL, C1), U+2028/U+2029 and lone surrogates are written as JSON
    escapes, so the message always encodes and prints nothing but itself. A string longer than `limit`
    characters is cut there and the literal followed by "…"."""
    cut = isinstance(value, str) and limit is not None and len(value) > limit
    text = json.dumps(value[:limit] if cut else value, ensure_ascii=False)
    text = _ESCAPED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text + "…" if cut else text


# What must not reach a log line raw: every C0 control (newline and tab included), DEL, C1, the line and
# paragraph separators and lone surrogates (a file name that is no UTF-8, decoded with surrogateescape).
_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT_ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def one_line(text: str) -> str:
    r"""`text` with every control character (C0 — newline and tab too —, DEL, C1), U+2028/U+2029 and lone
    surrogate written as an escape (``\n``, ``\x1b``, ``\u2028``, ``\udc80``), so a log line that carries
    text someone else chose (an agent's file name) stays one line, forges no other line and sends the
    terminal nothing. Everything else, backslashes included, is kept as it is."""
    return _ONE_LINE.sub(_escape, text)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]+")


def field_name(key: str, within: str = "") -> str:
    """A request key as a field path names it (SPEC §2 `details.fields`): a plain name (letters, digits, `_`,
    `-`; at most 60 characters) as itself, ``metadata.team`` below `within`; any other key as a JSON string
    cut at 60 characters, ``"a: b"`` or ``metadata["a: b"]`` — so an empty key is still named, a key spelled
    ``""`` is not the empty one, and a key holding ``: `` or ``.`` never reads as another field. Two keys
    whose first 60 characters are the same are named alike (a field name stays under the 100 characters of
    `config.errors.MAX_FIELD_CHARS`, where a longer one would be cut anyway)."""
    if len(key) <= 60 and _PLAIN_NAME.fullmatch(key):
        return f"{within}.{key}" if within else key
    return f"{within}[{quoted(key, 60)}]" if within else quoted(key, 60)


# A query parameter's name in the bracket style the API's own parameters use: `created_at[gte]`, `statuses[]`.
_QUERY_NAME = re.compile(r"[A-Za-z0-9_-]+(?:\[[A-Za-z0-9_-]*\])*")


def query_name(name: str) -> str:
    """A query parameter as a refusal names it: a plain name or one in the API's bracket style
    (``created_at[gt]``, ``statuses[]``; at most 60 characters) as itself — a query has no nesting for the
    brackets to be mistaken for, and the API's own ``created_at[gte]`` is named so —, any other as
    `field_name` writes a body key (a JSON string cut at 60 characters)."""
    if len(name) <= 60 and _QUERY_NAME.fullmatch(name):
        return name
    return field_name(name)


def entries(count: int) -> str:
    """``"1 entry"``, ``"0 entries"``, ``"12 entries"``."""
    return f"{count} entry" if count == 1 else f"{count} entries"
