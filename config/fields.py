"""Strict DRF field classes shared by every API (SPEC §2): text measured in UTF-8 bytes, JSON booleans and
integers that are really booleans and integers, query-string booleans and integers written one way only,
and opaque signed tokens (cursors, page tokens) with the shape `/openapi.yaml` documents.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from config.text import first_forbidden_char, utf8_len


class Utf8TextField(serializers.CharField):
    """A CharField measured in UTF-8 **bytes**, not characters, and kept exactly as sent.

    `max_bytes`/`min_bytes`: byte bounds. Whitespace is never trimmed (``trim_whitespace=False``).
    NUL and lone surrogates are rejected (the JSON parser also screens them).
    """

    def __init__(self, *, max_bytes: int | None = None, min_bytes: int = 0, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", min_bytes == 0)
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        super().__init__(**kwargs)
        # DRF's CharField adds a validator that walks the text in Python looking for surrogates; ours
        # (`to_internal_value`, one regular expression) has refused any before validators run (issue 17).
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitSurrogateCharactersValidator)]

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(not_a_string(data))
        value = super().to_internal_value(data)
        problem = first_forbidden_char(value)
        if problem:
            raise serializers.ValidationError(f"Text {problem}.")
        size = utf8_len(value)
        if self.max_bytes is not None and size > self.max_bytes:
            raise serializers.ValidationError(f"Text is {size} UTF-8 bytes; the limit is {self.max_bytes} bytes.")
        if size < self.min_bytes:
            raise serializers.ValidationError(f"Text must be at least {self.min_bytes} UTF-8 byte(s).")
        return value


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean only: `true`/`false`; strings and numbers are 400 (DRF would coerce "yes", 1, …)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            raise serializers.ValidationError("Must be a JSON boolean (true or false).")
        return data


class StrictIntegerField(serializers.IntegerField):
    """An integer written as one: never a JSON boolean or float, never `"1.0"` or `" 7"` in a query string.

    (DRF's IntegerField would accept `true`, `1.0` and `"1.000"`.)
    """

    _DIGITS = re.compile(r"-?0*[0-9]{1,20}")  # leading zeros allowed, as in every query (docs/access.md)

    def to_internal_value(self, data):
        if isinstance(data, (bool, float)) or (isinstance(data, str) and not self._DIGITS.fullmatch(data)):
            raise serializers.ValidationError("A valid integer is required.")
        return super().to_internal_value(data)


class JsonIntegerField(serializers.IntegerField):
    """An integer that must be a JSON number without a fraction: strings, floats and booleans are 400."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError("Must be an integer.")
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.BOOL)
class QueryBooleanField(serializers.Field):
    """A boolean query parameter written exactly ``true`` or ``false`` (``yes``, ``1``, ``True`` are 400).

    OpenAPI (and so the MCP input schema, which is derived from it) documents it as a boolean; MCP passes
    a JSON boolean, which `config.mcp_tools` writes into the query string as ``true``/``false``.
    """

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data) -> bool:
        if isinstance(data, bool):  # internal callers (and MCP) may hand a JSON boolean over directly
            return data
        if data not in ("true", "false"):
            self.fail("invalid")
        return data == "true"

    def to_representation(self, value) -> bool:
        return bool(value)


# Every id in a URL is a UUID in its canonical spelling: lowercase, hyphenated (what the API returns).
# Any other spelling (uppercase, braces, `urn:uuid:`, no hyphens) names nothing: 404, like a missing id.
UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_UUID_RE = re.compile(UUID_PATTERN)


def canonical_uuid(value: object) -> uuid.UUID | None:
    """Return the UUID `value` spells canonically (a `uuid.UUID` passes through), else None."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str) and _UUID_RE.fullmatch(value):  # `$` alone would let a trailing "\n" through
        return uuid.UUID(value)
    return None


# Text without control characters (Unicode Cc: U+0000–U+001F, U+007F–U+009F) or line separators (U+2028,
# U+2029), as metadata values are.
NO_CONTROL_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f\u2028\u2029]*$"

# A display name (stores.validation.name_problem): no control characters or line separators, no format (Cf)
# characters of the Basic Multilingual Plane but ZWNJ and ZWJ (U+200C, U+200D), and at least one visible
# character — not a space, joiner, filler, variation selector or the Braille blank (`_NAME_INVISIBLE`).
# Other planes' characters are the server's to judge: a pattern has no portable way to name them.
_NAME_FORBIDDEN = (
    r"\u0000-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b"
    r"\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
)
_NAME_INVISIBLE = (
    r"\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200c\u200d\u2065\u2800\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8"
)
_NAME_BODY = rf"[^{_NAME_FORBIDDEN}]*[^{_NAME_FORBIDDEN}{_NAME_INVISIBLE}\s][^{_NAME_FORBIDDEN}]*"
NAME_PATTERN = rf"^{_NAME_BODY}$"
NAME_OR_EMPTY_PATTERN = rf"^({_NAME_BODY})?$"  # session titles and environment key names may be ""

# A memory path (versions.validation.clean_path): "/" then segments free of "/", control (Cc) and format
# (Cf, those of the Basic Multilingual Plane) characters and U+2028/U+2029. What a pattern cannot say
# (NFC, no "."/".." segment, ≤1,024 UTF-8 bytes) is in the field's description.
_PATH_SEGMENT = (
    r"[^/\u0000-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]+"
)
MEMORY_PATH_PATTERN = rf"^(/{_PATH_SEGMENT}){{1,20}}$"
PATH_PREFIX_PATTERN = rf"^/({_PATH_SEGMENT}/){{0,20}}$"

# `django.core.signing.dumps(..., compress=True)`: an optional "." (compressed), URL-safe base64 of the
# payload, ":" the timestamp, ":" and the URL-safe base64 HMAC: the shape of every cursor and page token.
SIGNED_VALUE_PATTERN = r"^\.?[A-Za-z0-9_-]+(?::[A-Za-z0-9_-]+){1,2}$"


class OneShapeField(serializers.CharField):
    """A text field whose value has one exact shape (a digest, a signed token): any validator's refusal —
    too short, too long, not the pattern — is reported as the one message `shape_message`, so a bad value
    gets one problem, not two overlapping ones (a tester). The validators, and so the OpenAPI lengths and
    pattern, stay as they are."""

    shape_message = "Invalid value."

    def run_validators(self, value):
        try:
            super().run_validators(value)
        except serializers.ValidationError:
            raise serializers.ValidationError(self.shape_message, code="invalid") from None


class StrictRegexField(OneShapeField, serializers.RegexField):
    """A string matching `regex`, never another JSON type (DRF's CharField would turn 5 into "5"); a value
    too long or not matching is one problem, `error_messages["invalid"]` (a slug of 65 characters got "no
    more than 64 characters" and "must be 1–64 …" together; a tester)."""

    def __init__(self, regex: str, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(regex, **kwargs)
        self.shape_message = self.error_messages["invalid"]

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(not_a_string(data))
        return super().to_internal_value(data)


SIGNED_VALUE_MESSAGE = "Not a token this API hands out; pass it on as returned."


class SignedTokenField(OneShapeField):
    """An opaque cursor or page token exactly as the server handed it out (ASCII, signed).

    The shape (`SIGNED_VALUE_PATTERN`, documented as the OpenAPI `pattern`) and `max_length` are checked
    here, refused as `SIGNED_VALUE_MESSAGE`; the signature and binding are checked by the list that decodes
    it (400 when tampered with or foreign). `max_length` must leave room in an 8 KiB request line.
    """

    shape_message = SIGNED_VALUE_MESSAGE

    def __init__(self, *, max_length: int, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(max_length=max_length, **kwargs)
        self.validators.append(RegexValidator(SIGNED_VALUE_PATTERN, message=SIGNED_VALUE_MESSAGE))


# How a refusal names a JSON type ("Must be a string, not a JSON boolean (true or false).": REST and MCP alike).
JSON_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a JSON boolean (true or false)",
    "null": "null",
    "object": "an object",
    "array": "an array",
}


def json_type_of(value: Any) -> str:
    """The JSON type name of a parsed JSON value (``true`` is a boolean, never an integer)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def not_a(expected: str, value: Any) -> str:
    """The refusal of a JSON value of the wrong type, in JSON's words: "Must be a JSON object, not an array." """
    return f"Must be {expected}, not {JSON_TYPE_NAMES[json_type_of(value)]}."


def not_a_string(value: Any) -> str:
    """The refusal of a JSON value that should have been a string: "Must be a string, not an integer." """
    return not_a("a string", value)


class TextChoiceField(serializers.ChoiceField):
    """A choice among strings that a value of another JSON type gets `not_a_string`'s words for (DRF's
    ChoiceField turned `true` into "True" and called that not a valid choice). `StrictSerializer` applies
    the same rule to its own choice fields; this one is for choices nested in lists."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.allow_null:  # DRF refuses a null before `to_internal_value`: "This field may not be null."
            self.error_messages["null"] = not_a_string(None)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(not_a_string(data))
        return super().to_internal_value(data)
