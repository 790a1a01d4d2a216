"""Line-by-line checks of an export file that need no database (SPEC §8b; docs/export-import.md).

Each `check_*` takes one decoded JSON object and its 1-based line number and returns the typed values the
importer writes, or raises `ImportInvalid` (400) whose message starts with ``line N:``. Objects must hold
exactly the keys of their type, so a file this server did not write — or one somebody edited — is
refused rather than half-understood.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from accounts.models import HANDLE_RE
from config.errors import DomainError
from config.parsers import find_forbidden, strict_loads
from config.text import quoted, utf8_len
from memories import tree
from memories.exchange.errors import ImportInvalid
from memories.exchange.format import FORMAT, MAX_LINE_BYTES, VERSION, parse_timestamp
from memories.models import BODY_MAX_BYTES, NONCE_MAX_CHARS, SUMMARY_MAX_BYTES
from memories.validation import clean_model
from stores import validation as store_validation
from versions import validation as version_validation
from versions.actors import ID_KEYS
from versions.models import Operation

SECTIONS = ("entries", "summaries", "versions", "memories", "readers")
SECTION_OF_TYPE = {"entry": "entries", "summary": "summaries", "version": "versions", "memory": "memories"}
SECTION_OF_TYPE["reader"] = "readers"
_HANDLE = re.compile(HANDLE_RE)
_HEX64 = re.compile(r"[0-9a-f]{64}")


# An entry's provenance (`Fields.provenance`): objects and arrays nested at most this deep, at most this
# many bytes as compact JSON.
PROVENANCE_MAX_DEPTH = 8
PROVENANCE_MAX_BYTES = 16 * 1024


def as_exported(value: Any) -> Any:
    """`value` (parsed JSON) as an export will write it after a trip through PostgreSQL's jsonb: numbers are
    stored exactly as decimals and written out in full, so a float without a fractional part comes back an
    integer of all its digits (``1e308`` → 309 digits) and others as the shortest float. Other values are
    unchanged. What the provenance rules are checked on, so that every accepted file exports to one that
    imports again (a tester's ``1e308`` was accepted, and its export refused: "more than 100 digits")."""
    if isinstance(value, float):
        return json.loads(format(Decimal(json.dumps(value, allow_nan=False)), "f"))
    if isinstance(value, dict):
        return {key: as_exported(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_exported(item) for item in value]
    return value


def _longest_integer(value: Any) -> int:
    """Digits of the longest integer in `value` (0 when there is none)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return len(str(abs(value)))
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return max((_longest_integer(item) for item in items), default=0)


def _depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (a scalar: 0); stops counting past PROVENANCE_MAX_DEPTH."""
    deepest, level, frontier = 0, 0, [value]
    while frontier and deepest <= PROVENANCE_MAX_DEPTH:
        children = []
        for item in frontier:
            if isinstance(item, dict):
                children.extend(item.values())
            elif isinstance(item, list):
                children.extend(item)
            else:
                continue
            deepest = level + 1
        frontier, level = children, level + 1
    return deepest


def decode_line(raw: bytes, line: int) -> dict[str, Any]:
    """Parse one line (bytes without the newline) as a JSON object: strict UTF-8, no NaN, no NUL."""
    if len(raw) > MAX_LINE_BYTES:
        raise ImportInvalid(line, f"is over {MAX_LINE_BYTES} bytes; no valid line is longer than that.")
    if raw[:1] in (b" ", b"\t") or raw[-1:] in (b" ", b"\t"):
        # Also JSON whitespace, also under the end line's digest: a line an editor gave trailing blanks passed
        # its chunk and failed only the end line (a tester). The file has no insignificant whitespace.
        raise ImportInvalid(line, "starts or ends with a space or tab; lines are exactly as exported.")
    if b"\r" in raw:
        # JSON would read it as whitespace, but the end line's digest covers every byte: a chunk converted to
        # CRLF line endings was accepted, and the import could then never finish (a tester). A file this
        # server wrote holds no CR outside a string, and none raw inside one.
        raise ImportInvalid(
            line, "holds a carriage return (CRLF line endings?): lines are separated by LF only, as exported."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportInvalid(line, f"is not valid UTF-8 (byte {exc.start}).") from None
    try:
        obj = strict_loads(text)  # what this server writes: no NaN, no key twice, sane integers, no BOM
    except RecursionError:
        raise ImportInvalid(line, "is nested too deeply.") from None
    except ValueError as exc:
        raise ImportInvalid(line, f"is not valid JSON: {exc}.") from None
    if not isinstance(obj, dict):
        raise ImportInvalid(line, "must be a JSON object.")
    # JSON can only spell NUL or a surrogate as a \u escape (raw control characters are refused by the
    # decoder), so a line without "\u0000" or "\ud…" cannot hold one: skip the walk for almost every line.
    if b"\\u0000" in raw or b"\\ud" in raw.lower():
        found = find_forbidden(obj)
        if found:
            raise ImportInvalid(line, f"{found[0]} {found[1]}.")
    return obj


class Fields:
    """Typed, line-numbered access to one object whose keys must be exactly `keys`."""

    def __init__(self, obj: dict[str, Any], line: int, keys: tuple[str, ...], what: str) -> None:
        self.obj, self.line, self.what = obj, line, what
        missing = [key for key in keys if key not in obj]
        unknown = sorted(set(obj) - set(keys))
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unknown {', '.join(unknown)}"] if unknown else []
            )
            raise ImportInvalid(line, f"{what}: {'; '.join(parts)}.")

    def fail(self, key: str, problem: str) -> ImportInvalid:
        return ImportInvalid(self.line, f"{self.what}.{key} {problem}", field=key)

    def int(self, key: str, low: int = 0, high: int = tree.MAX_SEQ) -> int:
        value = self.obj[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"must be an integer from {low} to {high}.")
        return value

    def bool(self, key: str) -> bool:
        value = self.obj[key]
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false.")
        return value

    def text(self, key: str, *, nullable: bool = False, max_chars: int | None = None) -> str | None:
        """A string (NUL and lone surrogates were already refused for the whole line by `decode_line`)."""
        value = self.obj[key]
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self.fail(key, "must be a string" + (" or null." if nullable else "."))
        if max_chars is not None and len(value) > max_chars:
            raise self.fail(key, f"is {len(value)} characters; the limit is {max_chars}.")
        return value

    def body(self, key: str, max_bytes: int, *, nullable: bool) -> str | None:
        value = self.text(key, nullable=nullable)
        if value is not None and not 1 <= utf8_len(value) <= max_bytes:
            raise self.fail(key, f"is {utf8_len(value)} UTF-8 bytes; it must be 1 to {max_bytes}.")
        return value

    def time(self, key: str, *, nullable: bool = False) -> datetime | None:
        value = self.obj[key]
        if value is None and nullable:
            return None
        parsed = parse_timestamp(value)
        if parsed is None:
            raise self.fail(key, "must be a UTC timestamp like 2026-01-31T12:00:00.000000Z.")
        return parsed

    def uuid(self, key: str, *, nullable: bool = False) -> uuid.UUID | None:
        value = self.obj[key]
        if value is None and nullable:
            return None
        try:
            parsed = uuid.UUID(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None or str(parsed) != value:
            raise self.fail(key, "must be a UUID in its canonical lowercase form.")
        return parsed

    def provenance(self, key: str) -> dict[str, Any] | None:
        """An entry's provenance: null, or a JSON object of finite numbers, strings, booleans, nulls, arrays
        and objects, nested at most `PROVENANCE_MAX_DEPTH` deep and at most `PROVENANCE_MAX_BYTES` as
        compact JSON — as an export will write it (`as_exported`), integers of at most 100 digits included, so
        the store's export imports again. What this server writes (the 0041 import's flat record of scalars)
        fits with room to spare; anything else would fail later — ±1e999 is infinity, which PostgreSQL's
        jsonb refuses, and deep nesting overflows the JSON encoder on the way in or on every later export."""
        value = self.obj[key]
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, "must be a JSON object or null.")
        if _depth(value) > PROVENANCE_MAX_DEPTH:
            raise self.fail(key, f"is nested more than {PROVENANCE_MAX_DEPTH} levels deep.")
        try:
            exported = as_exported(value)
        except ValueError:
            raise self.fail(key, "holds a number out of range (JSON numbers must be finite).") from None
        if _longest_integer(exported) > 100:
            raise self.fail(key, "holds a number of more than 100 digits as stored (write large values as strings).")
        size = len(json.dumps(exported, ensure_ascii=False, separators=(",", ":")).encode())
        if size > PROVENANCE_MAX_BYTES:
            raise self.fail(key, f"is {size} bytes as JSON; the limit is {PROVENANCE_MAX_BYTES}.")
        return value

    def handle(self, key: str, handles: set[str], *, nullable: bool = False) -> str | None:
        value = self.obj[key]
        if value is None and nullable:
            return None
        if not isinstance(value, str) or value.lower() not in handles:
            raise self.fail(key, f"{quoted(value)} is not one of the handles listed in the header.")
        return value.lower()

    def digest(self, key: str, *, nullable: bool = False) -> str | None:
        value = self.obj[key]
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not _HEX64.fullmatch(value):
            raise self.fail(key, "must be 64 lowercase hexadecimal characters.")
        return value

    def clean(self, key: str, cleaner, *, nullable: bool = False):
        """Apply a surface's own validator (e.g. `clean_path`), keeping its message under this line."""
        value = self.obj[key]
        if value is None and nullable:
            return None
        try:
            return cleaner(value, field=f"{self.what}.{key}")
        except DomainError as exc:
            raise ImportInvalid(self.line, exc.message, field=key) from None


# ----------------------------------------------------------------------------------------- header


@dataclass(frozen=True)
class Header:
    """What the importer needs from line 1."""

    store: dict[str, Any]
    counts: dict[str, int]
    handles: list[str]


_HEADER_KEYS = ("type", "version", "store", "counts", "handles")
_STORE_KEYS = (
    "id",
    "scope",
    "subject",
    "canonical",
    "name",
    "description_md",
    "metadata",
    "visibility",
    "generation",
    "created_by",
    "created_at",
    "updated_at",
    "archived_at",
)
_SUBJECT_KEY = {"user": "handle", "project": "project", "board": "section"}


def check_header(obj: dict[str, Any], *, max_memories: int) -> Header:
    """Line 1: the format and version, the store's metadata, section counts, every handle used."""
    if obj.get("type") != FORMAT:
        raise ImportInvalid(1, f"is not a Memories export header (type must be {quoted(FORMAT)}).")
    if type(obj.get("version")) is not int or obj["version"] != VERSION:  # `true` and `1.0` are not 1
        raise ImportInvalid(
            1, f"format version {quoted(obj.get('version'))} is not supported; this server reads version {VERSION}."
        )
    top = Fields(obj, 1, _HEADER_KEYS, "header")
    raw_handles = obj["handles"]
    if not isinstance(raw_handles, list) or not all(isinstance(h, str) and _HANDLE.match(h) for h in raw_handles):
        raise top.fail("handles", "must be a list of valid handles.")
    lowered = [h.lower() for h in raw_handles]
    if len(set(lowered)) != len(lowered):
        raise top.fail("handles", "must not list a handle twice.")
    raw_counts = obj["counts"]
    if not isinstance(raw_counts, dict):
        raise top.fail("counts", "must be an object.")
    counted = Fields(raw_counts, 1, SECTIONS, "header.counts")
    counts = {section: counted.int(section) for section in SECTIONS}
    if counts["memories"] > max_memories:
        raise top.fail("counts", f"lists {counts['memories']} file memories; this server allows {max_memories}.")
    if not isinstance(obj["store"], dict):
        raise top.fail("store", "must be an object.")
    store = Fields(obj["store"], 1, _STORE_KEYS, "header.store")
    scope = obj["store"]["scope"]
    if not isinstance(scope, str) or scope not in _SUBJECT_KEY:
        raise store.fail("scope", "must be 'user', 'project' or 'board'.")
    subject = obj["store"]["subject"]
    key = _SUBJECT_KEY[scope]
    if not isinstance(subject, dict) or set(subject) != {key} or not isinstance(subject[key], str):
        raise store.fail("subject", f"must be {{{quoted(key)}: …}} for a {scope} store.")
    if scope == "user" and subject[key].lower() not in lowered:
        raise store.fail("subject", "names a handle the header does not list.")
    visibility = obj["store"]["visibility"]
    if (scope == "user") != (visibility is not None):
        raise store.fail("visibility", "is set on user stores only.")
    handles = set(lowered)
    values = {
        "id": store.uuid("id"),
        "scope": scope,
        "subject": subject[key],
        "canonical": store.bool("canonical"),
        "name": store.clean("name", store_validation.clean_name),
        "description": store.clean("description_md", store_validation.clean_description),
        "metadata": store.clean("metadata", store_validation.clean_metadata),
        "visibility": store.clean("visibility", store_validation.clean_visibility, nullable=True),
        "generation": store.int("generation", 1),
        "created_by": store.handle("created_by", handles, nullable=True),
        "created_at": store.time("created_at"),
        "updated_at": store.time("updated_at"),
        "archived_at": store.time("archived_at", nullable=True),
    }
    return Header(store=values, counts=counts, handles=list(raw_handles))


# ----------------------------------------------------------------------------------------- content

_ENTRY_KEYS = (
    "type",
    "seq",
    "author",
    "created_at",
    "body_md",
    "size_bytes",
    "client_nonce",
    "session_id",
    "provenance",
    "redacted_at",
    "redacted_by",
)


def check_entry(obj: dict[str, Any], line: int, *, seq: int, handles: set[str]) -> dict[str, Any]:
    """An entry: the next seq, its author, time, body (or redaction), nonce, session and provenance."""
    f = Fields(obj, line, _ENTRY_KEYS, "entry")
    got = f.int("seq")
    if got != seq:
        raise f.fail("seq", f"is {got}; entry {seq} comes next (seqs run 0, 1, 2… without gaps).")
    body = f.body("body_md", BODY_MAX_BYTES, nullable=True)
    redacted_at = f.time("redacted_at", nullable=True)
    if (body is None) != (redacted_at is not None):
        raise f.fail("body_md", "is null exactly when the entry is redacted (redacted_at set).")
    size = f.int("size_bytes", 1, BODY_MAX_BYTES)
    if body is not None and size != utf8_len(body):
        raise f.fail("size_bytes", f"is {size}; body_md is {utf8_len(body)} UTF-8 bytes.")
    nonce = f.text("client_nonce", nullable=True, max_chars=NONCE_MAX_CHARS)
    if nonce == "":
        raise f.fail("client_nonce", "must not be empty.")
    return {
        "seq": seq,
        "author": f.handle("author", handles),
        "created_at": f.time("created_at"),
        "body_md": body,
        "size_bytes": size,
        "client_nonce": nonce,
        "session_id": f.uuid("session_id", nullable=True),
        "provenance": f.provenance("provenance"),
        "redacted_at": redacted_at,
        "redacted_by": f.handle("redacted_by", handles, nullable=True) if redacted_at else _null(f, "redacted_by"),
    }


def _null(f: Fields, key: str) -> None:
    if f.obj[key] is not None:
        raise f.fail(key, "must be null unless the row is redacted.")
    return None


_SUMMARY_KEYS = (
    "type",
    "range",
    "author",
    "created_at",
    "model",
    "generation",
    "source_digest",
    "size_bytes",
    "summary_md",
    "invalidated_at",
    "invalidated_by",
    "redacted_at",
)


def check_summary(
    obj: dict[str, Any], line: int, *, entries: int, generation: int, handles: set[str]
) -> dict[str, Any]:
    """A summary, live or invalidated, possibly redacted; its range lies inside the file's entries."""
    f = Fields(obj, line, _SUMMARY_KEYS, "summary")
    try:
        block = tree.parse_range(obj["range"], allow_entry=False, field="summary.range")
    except tree.RangeError as exc:
        raise ImportInvalid(line, str(exc), field="range") from None
    if block.end >= entries:
        raise f.fail("range", f"{quoted(block.label)} reaches past the file's {entries} entries.")
    text = f.body("summary_md", SUMMARY_MAX_BYTES, nullable=True)
    invalidated_at = f.time("invalidated_at", nullable=True)
    redacted_at = f.time("redacted_at", nullable=True)
    if (text is None) != (redacted_at is not None):
        raise f.fail("summary_md", "is null exactly when the summary is redacted (redacted_at set).")
    if redacted_at is not None and invalidated_at is None:
        raise f.fail("redacted_at", "is set on a live summary; a redacted summary is always invalidated.")
    size = f.int("size_bytes", 1, SUMMARY_MAX_BYTES)
    if text is not None and size != utf8_len(text):
        raise f.fail("size_bytes", f"is {size}; summary_md is {utf8_len(text)} UTF-8 bytes.")
    model = f.clean("model", clean_model)
    if redacted_at is not None:
        f.digest("source_digest", nullable=True)  # checked for shape all the same
    return {
        "block": block,
        "author": f.handle("author", handles),
        "created_at": f.time("created_at"),
        "model": model,
        "generation": f.int("generation", 1, generation),
        # null on a redacted summary (it hashed the redacted text); a file from before that rule still carries
        # one, which is read and dropped, so an import never brings the guess oracle back.
        "source_digest": None if redacted_at is not None else f.digest("source_digest"),
        "size_bytes": size,
        "summary_md": text,
        "invalidated_at": invalidated_at,
        "invalidated_by": f.handle("invalidated_by", handles, nullable=True)
        if invalidated_at
        else _null(f, "invalidated_by"),
        "redacted_at": redacted_at,
    }


_VERSION_KEYS = (
    "type",
    "id",
    "memory_id",
    "operation",
    "path",
    "content",
    "content_sha256",
    "content_size_bytes",
    "created_by",
    "created_at",
    "redacted_at",
    "redacted_by",
)


def _actor(f: Fields, key: str, *, nullable: bool) -> dict[str, str] | None:
    value = f.obj[key]
    if value is None and nullable:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    id_key = ID_KEYS.get(kind) if isinstance(kind, str) else None
    if id_key is None or set(value) != {"type", id_key}:
        raise f.fail(key, "must be an actor object such as {'type': 'api_actor', 'api_key_id': UUID}.")
    Fields(value, f.line, ("type", id_key), f"version.{key}").uuid(id_key)
    return value


def check_version(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """A file version: its lineage id, operation, state written (or redaction) and actors."""
    f = Fields(obj, line, _VERSION_KEYS, "version")
    operation = obj["operation"]
    if operation not in Operation.values:
        raise f.fail("operation", "must be 'created', 'modified' or 'deleted'.")
    redacted_at = f.time("redacted_at", nullable=True)
    if redacted_at is not None:
        for key in ("path", "content", "content_sha256", "content_size_bytes"):
            if f.obj[key] is not None:
                raise f.fail(key, "must be null on a redacted version.")
        path = content = sha = size = None
    else:
        path = f.clean("path", version_validation.clean_path)
        if operation == Operation.DELETED:
            for key in ("content", "content_sha256", "content_size_bytes"):
                if f.obj[key] is not None:
                    raise f.fail(key, "must be null on a deleted version.")
            content = sha = size = None
        else:
            content = f.clean("content", version_validation.clean_content)
            sha = f.digest("content_sha256")
            size = f.int("content_size_bytes", 0, 102_400)
            if sha != tree.sha256_hex(content):
                raise f.fail("content_sha256", "does not match the SHA-256 of content.")
            if size != utf8_len(content):
                raise f.fail("content_size_bytes", f"is {size}; content is {utf8_len(content)} UTF-8 bytes.")
    created_by = _actor(f, "created_by", nullable=True)
    return {
        "id": f.uuid("id"),
        "memory_id": f.uuid("memory_id"),
        "operation": operation,
        "path": path,
        "content": content,
        "content_sha256": sha,
        "content_size_bytes": size,
        "created_by": created_by,
        "created_at": f.time("created_at"),
        "redacted_at": redacted_at,
        "redacted_by": _actor(f, "redacted_by", nullable=True) if redacted_at else _null(f, "redacted_by"),
    }


_MEMORY_KEYS = ("type", "id", "path", "content_sha256", "current_version_id", "created_at", "updated_at")


def check_memory(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """A current file memory: its path and head version (whose content it carries)."""
    f = Fields(obj, line, _MEMORY_KEYS, "memory")
    return {
        "id": f.uuid("id"),
        "path": f.clean("path", version_validation.clean_path),
        "content_sha256": f.digest("content_sha256"),
        "current_version_id": f.uuid("current_version_id"),
        "created_at": f.time("created_at"),
        "updated_at": f.time("updated_at"),
    }


_READER_KEYS = ("type", "handle", "active", "granted_by", "created_at", "updated_at")


def check_reader(obj: dict[str, Any], line: int, *, handles: set[str]) -> dict[str, Any]:
    """An explicit reader grant (user stores only), active or revoked."""
    f = Fields(obj, line, _READER_KEYS, "reader")
    return {
        "handle": f.handle("handle", handles),
        "active": f.bool("active"),
        "granted_by": f.handle("granted_by", handles, nullable=True),
        "created_at": f.time("created_at"),
        "updated_at": f.time("updated_at"),
    }


def check_end(obj: dict[str, Any], line: int, *, lines: int, chain: str) -> None:
    """The end line: the number of lines before it and the chain over them must both match."""
    f = Fields(obj, line, ("type", "lines", "sha256", "exported_at"), "end")
    f.time("exported_at")
    if f.int("lines") != lines:
        raise f.fail("lines", f"says {obj['lines']} lines came before it; {lines} did.")
    if f.digest("sha256") != chain:
        raise f.fail("sha256", "does not match the lines before it: the file was changed or damaged.")
