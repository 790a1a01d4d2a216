"""Field rules of the Memory Stores surface (SPEC §5, §9): paths, path prefixes, content, digests.

Every function returns the value unchanged (never normalised) or raises InvalidRequest naming the field.
"""

from __future__ import annotations

import re
import unicodedata

from config.errors import InvalidRequest
from config.fields import not_a_string
from config.text import first_forbidden_char, utf8_len
from versions.models import CONTENT_MAX_BYTES, PATH_MAX_BYTES, PATH_MAX_SEGMENTS

SHA256_RE = re.compile(r"[0-9a-f]{64}")
_LINE_SEPARATORS = frozenset("\u2028\u2029")


def _bad_character(text: str) -> str | None:
    """Describe the first control (Cc), format (Cf), surrogate or line/paragraph-separator character."""
    for ch in text:
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf", "Cs") or ch in _LINE_SEPARATORS:
            return f"must not contain U+{ord(ch):04X} (a control, format or separator character)"
    return None


# A store is mounted as a folder (SPEC §5, `/mnt/memory/<slug>/`): a segment is a file or folder name there,
# and Linux file systems refuse names over 255 bytes (NAME_MAX) — the SDK's sync engine then skipped the file
# and the agent ran without it (a breaker). `/.anthropic-memory-store` is the SDK's own marker file at the root
# of every mount (`anthropic.lib.tools._memories.MARKER_PATH`, pinned), which the engine also skips.
SEGMENT_MAX_BYTES = 255
RESERVED_PATHS = frozenset({"/.anthropic-memory-store"})


def _check_segments(segments: list[str], field: str) -> None:
    if len(segments) > PATH_MAX_SEGMENTS:
        raise InvalidRequest(f"{field}: at most {PATH_MAX_SEGMENTS} segments (got {len(segments)}).")
    for segment in segments:
        if segment == "":
            raise InvalidRequest(f"{field}: must not contain an empty segment ('//' or a trailing '/').")
        if segment in (".", ".."):
            raise InvalidRequest(f"{field}: must not contain a '.' or '..' segment.")
        size = utf8_len(segment)
        if size > SEGMENT_MAX_BYTES:
            raise InvalidRequest(
                f"{field}: a segment is {size} UTF-8 bytes; the limit is {SEGMENT_MAX_BYTES} bytes "
                "(each segment is a file or folder name where the store is mounted)."
            )


def _check_text(value: str, field: str) -> None:
    problem = _bad_character(value)
    if problem:
        raise InvalidRequest(f"{field}: {problem}.")
    if not unicodedata.is_normalized("NFC", value):
        raise InvalidRequest(f"{field}: must be in Unicode NFC form (it is never normalised for you).")
    size = utf8_len(value)
    if size > PATH_MAX_BYTES:
        raise InvalidRequest(f"{field}: is {size} UTF-8 bytes; the limit is {PATH_MAX_BYTES} bytes.")


def clean_path(value: object, *, field: str = "path") -> str:
    """Return a valid memory path (SPEC §5): ``/`` then 1–20 non-empty segments separated by ``/``.

    No ``.``/``..`` segment, no Cc/Cf characters, no U+2028/U+2029, already NFC, ≤1,024 UTF-8 bytes and
    ≤255 per segment, not the mount's marker file (`RESERVED_PATHS`, in any case, nor under it); otherwise
    case-sensitive. Raises InvalidRequest naming `field`.
    """
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    if not value.startswith("/"):
        raise InvalidRequest(f'{field}: must start with "/".')
    _check_text(value, field)
    _check_segments(value[1:].split("/"), field)
    # As a folder too (the marker file takes that name at the mount's root), and in any case: on a
    # case-insensitive file system (macOS, Windows) `/.Anthropic-Memory-Store` is the marker's file.
    folded = value.casefold()
    reserved = next(
        (path for path in RESERVED_PATHS if folded == path.casefold() or folded.startswith(path.casefold() + "/")),
        None,
    )
    if reserved is not None:
        raise InvalidRequest(f"{field}: {reserved} is reserved for the marker file of a mounted store.")
    return value


def clean_path_prefix(value: object, *, field: str = "path_prefix") -> str:
    """Return a valid list prefix: ``/`` alone, or a valid path's segments followed by ``/``.

    It matches whole segments (``/notes/`` never matches ``/notes-archive/…``). Raises InvalidRequest.
    """
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    if not value.startswith("/") or not value.endswith("/"):
        raise InvalidRequest(f'{field}: must start and end with "/", e.g. "/notes/".')
    _check_text(value, field)
    if value != "/":
        _check_segments(value[1:-1].split("/"), field)
    return value


def clean_content(value: object, *, field: str = "content") -> str:
    """Return memory content: any UTF-8 text up to 102,400 **bytes** (``""`` allowed), stored byte-exactly.

    NUL and lone surrogates are refused (PostgreSQL cannot store them). Raises InvalidRequest.
    """
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    problem = first_forbidden_char(value)
    if problem:
        raise InvalidRequest(f"{field}: {problem}.")
    size = utf8_len(value)
    if size > CONTENT_MAX_BYTES:
        raise InvalidRequest(f"{field}: is {size} UTF-8 bytes; the limit is {CONTENT_MAX_BYTES} bytes.")
    return value


def clean_sha256(value: object, *, field: str) -> str:
    """Return a SHA-256 digest written as 64 lowercase hex characters. Raises InvalidRequest."""
    if not isinstance(value, str) or not SHA256_RE.fullmatch(value):
        raise InvalidRequest(f"{field}: must be 64 lowercase hexadecimal characters.")
    return value
