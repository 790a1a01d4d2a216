"""Shared REST building blocks: the `{data, meta}` envelope and strict serializers (SPEC §2, §4)."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.response import Response

from config.text import first_forbidden_char, utf8_len


def envelope(data: Any, meta: dict[str, Any] | None = None, *, status: int = 200, headers=None) -> Response:
    """Render a Memories-surface success body ``{"data": data, "meta": meta or {}}``."""
    return Response({"data": data, "meta": meta or {}}, status=status, headers=headers)


STRICT_COMPONENTS: set[str] = set()  # OpenAPI component names of strict request bodies (config/schema.py)


class StrictSerializer(serializers.Serializer):
    """A serializer that rejects unknown fields (400 naming them) instead of silently ignoring them.

    Its request component in /openapi.yaml says so (`additionalProperties: false`, config/schema.py).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        name = cls.__name__.removesuffix("Serializer")
        STRICT_COMPONENTS.update({name, name + "Request", "Patched" + name + "Request"})

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictQuerySerializer(StrictSerializer):
    """Validates `request.query_params`; unknown parameters are rejected like unknown body fields."""

    def __init__(self, *args, data=None, **kwargs):
        if data is not None and hasattr(data, "dict"):
            data = data.dict()
        super().__init__(*args, data=data, **kwargs)


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

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be a string.")
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

    _DIGITS = re.compile(r"-?[0-9]{1,20}")

    def to_internal_value(self, data):
        if isinstance(data, (bool, float)) or (isinstance(data, str) and not self._DIGITS.fullmatch(data)):
            raise serializers.ValidationError("A valid integer is required.")
        return super().to_internal_value(data)


class QueryBooleanField(serializers.BooleanField):
    """A query-string boolean written exactly `true` or `false` (DRF would also take `yes`, `1`, `on`…)."""

    def to_internal_value(self, data):
        if data in ("true", "false"):
            return data == "true"
        if isinstance(data, bool):
            return data
        raise serializers.ValidationError("Must be `true` or `false`.")


class JsonIntegerField(serializers.IntegerField):
    """An integer that must be a JSON number without a fraction: strings, floats and booleans are 400."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError("Must be an integer.")
        return super().to_internal_value(data)
