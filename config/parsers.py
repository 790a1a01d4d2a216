"""The only request parser: strict JSON that names the field holding NUL, a lone surrogate or NaN."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from config.errors import MAX_FIELD_CHARS, InvalidRequest
from config.errors import cut as _cut
from config.text import field_name, first_forbidden_char, quoted


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _bounded_int(digits: str) -> int:
    """JSON integers of at most 100 digits (Python's own limit message would name interpreter internals)."""
    if len(digits.lstrip("-")) > 100:
        raise ValueError("an integer has more than 100 digits")
    return int(digits)


class DuplicateKeyError(ValueError):
    """A JSON object gives one key twice."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads` object hook: a key given twice is an error (never "the last one wins")."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DuplicateKeyError(f"the key {quoted(key, 64)} appears more than once in one object")
        data[key] = value
    return data


_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_bounded_int, object_pairs_hook=_no_duplicate_keys
)


def strict_loads(text: str) -> Any:
    """Parse the JSON document `text` as `StrictJSONParser` and every line of an import do
    (memories/exchange/verify.py): no NaN or Infinity, integers of at most 100 digits, no key twice in one
    object, no byte order mark. Raises ValueError with a readable message (DuplicateKeyError for a repeated
    key); RecursionError for nesting deeper than the interpreter's limit."""
    if text.startswith("\ufeff"):
        raise ValueError("it starts with a byte order mark (U+FEFF); send UTF-8 without one")
    return _STRICT_DECODER.decode(text)


def duplicate_key(raw: bytes) -> str | None:
    """The message naming the first key given twice in one object of the JSON document `raw` (bytes), or None
    — also when `raw` is not JSON at all, which the caller's own parser then reports. The rule of
    `StrictJSONParser`, for surfaces whose parser is not ours (the MCP SDK's JSON-RPC reader)."""
    try:
        text = raw.decode("utf-8")  # strict UTF-8, as JSON-RPC requires; anything else is the SDK's to report
    except UnicodeDecodeError:
        return None
    try:
        json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except DuplicateKeyError as exc:  # only the hook's own finding; every other failure is the SDK's to report
        return str(exc)
    except (ValueError, TypeError, RecursionError):
        return None
    return None


def find_forbidden(value: Any, path: str = "") -> tuple[str, str] | None:
    """Walk parsed JSON; return ``(field_path, reason)`` for the first bad string or key, else None."""
    if isinstance(value, str):
        problem = first_forbidden_char(value)
        return (path or "body", problem) if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = first_forbidden_char(key)
            if problem:
                return (path or "body", f"has a key that {problem}")
            found = find_forbidden(item, field_name(key, path))
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = find_forbidden(item, f"{path}[{index}]")
            if found:
                return found
    return None


def forbidden_refusal(found: tuple[str, str]) -> tuple[str, str]:
    """`find_forbidden`'s finding as ``(field, message)`` — ``("body_md", "Contains a NUL character.")`` —
    the words REST's body screening and the MCP tools' argument screening both use (``field: message``)."""
    field, problem = found
    return _cut(field, MAX_FIELD_CHARS), f"{problem[0].upper()}{problem[1:]}."


def _in_metadata(data: Any, found: tuple[str, str], view: Any) -> bool:
    """Whether `found` (`find_forbidden`'s answer for the body `data`) lies in the top-level `metadata` of a
    view that takes metadata. Judged on the parsed body, not on the field path's spelling: a top-level key
    ``"metadata.x"`` names no metadata (a breaker), and a view without metadata calls the field unknown."""
    if not getattr(view, "takes_metadata", False) or not isinstance(data, dict) or "metadata" not in data:
        return False
    return find_forbidden(data["metadata"], "metadata") == found


class StrictJSONParser(BaseParser):
    """Parse `application/json` bodies strictly (UTF-8 only, no NaN/Infinity, no NUL, no lone surrogates,
    no key twice in one object).

    Raises ParseError (→ 400 invalid_request_error) for a body that is not strict JSON, and InvalidRequest
    ``field: message`` (with `details.fields`, as a serializer's refusal) for the first string or key holding
    NUL or a lone surrogate; when the view takes `metadata` (``takes_metadata = True``) and that is inside
    the body's top-level `metadata`, also ``details.error_code = "invalid_metadata"``, the code every other
    metadata refusal carries and the anthropic SDK maps (`stores.validation.patch_metadata`; docs/access.md).
    """

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            return {}  # no body: the operation's defaults (a POST without parameters)
        if not raw.strip(b" \t\r\n"):  # JSON is a value between optional whitespace (these four); alone: no JSON
            raise ParseError("Request body is only whitespace; send a JSON object, or no body at all.")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("Request body is not valid UTF-8.") from None
        try:
            data = strict_loads(text)
        except RecursionError:
            raise ParseError("Request body is nested too deeply.") from None
        except ValueError as exc:
            raise ParseError(f"Request body is not valid JSON: {exc}") from None
        found = find_forbidden(data)
        if found:
            field, message = forbidden_refusal(found)
            # `field: message` and details.fields, as a serializer's refusal (config.errors); the field named
            # here, not read back from the message (a key holding ": " would split it elsewhere)
            details = {"fields": {field: message}}
            if _in_metadata(data, found, (parser_context or {}).get("view")):
                details["error_code"] = "invalid_metadata"
            raise InvalidRequest(f"{field}: {message}", details=details)
        return data
