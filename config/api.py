"""Shared REST building blocks: the `{data, meta}` envelope and strict serializers (SPEC §2, §4)."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.response import Response

# The strict field classes live in config/fields.py; re-exported here for the serializers that import them.
from config.fields import (  # noqa: F401
    JsonIntegerField,
    QueryBooleanField,
    SignedTokenField,
    StrictBooleanField,
    StrictIntegerField,
    Utf8TextField,
)


def reject_body(request) -> None:
    """For writes that take no request body (archive, redact a version, DELETEs): the body must be absent,
    empty or the empty JSON object ``{}``. Malformed JSON or bad UTF-8 is a 400 and another media type a
    415 (`config.parsers.StrictJSONParser`); any field is a 400 naming it. Nothing is changed then."""
    data = request.data
    if data in ({}, None):
        return
    if not isinstance(data, dict):
        raise serializers.ValidationError({"body": ["This endpoint takes no request body (send none, or {})."]})
    raise serializers.ValidationError({name: ["Unknown field."] for name in sorted(data)})


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


_QUERY_INTEGER = re.compile(r"-?[0-9]+")


class StrictQuerySerializer(StrictSerializer):
    """Validates `request.query_params` with one set of rules for every endpoint (SPEC §2):

    - unknown parameters are rejected like unknown body fields (400 naming them);
    - a parameter given twice is a 400 naming it (never "the last one wins"), list fields aside;
    - an integer parameter is ASCII decimal digits only (``40.0``, `` 40``, ``٤٠``, ``４０`` are 400);
    - a boolean parameter is exactly ``true`` or ``false`` (``yes``, ``1``, ``True`` are 400).
    """

    def __init__(self, *args, data=None, **kwargs):
        self._repeated: list[str] = []
        if data is not None and hasattr(data, "getlist"):
            self._repeated = sorted(key for key in data if len(data.getlist(key)) > 1)
            data = data.dict()
        super().__init__(*args, data=data, **kwargs)

    def to_internal_value(self, data):
        errors = {
            name: ["Given more than once; send it once."]
            for name in self._repeated
            if not isinstance(self.fields.get(name), serializers.ListField)  # `statuses[]` may repeat
        }
        if isinstance(data, dict):
            for name, value in data.items():
                field = self.fields.get(name)
                if not isinstance(value, str) or field is None:
                    continue
                if isinstance(field, serializers.IntegerField) and not _QUERY_INTEGER.fullmatch(value):
                    errors[name] = ["A valid integer is required (ASCII digits)."]
                elif isinstance(field, serializers.BooleanField) and value not in ("true", "false"):
                    errors[name] = ["Must be true or false."]
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)
