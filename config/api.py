"""Shared REST building blocks: the `{data, meta}` envelope and strict serializers (SPEC §2, §4)."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import ISO_8601, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings

from config.errors import InvalidRequest, validation_summary

# The strict field classes live in config/fields.py; re-exported here for the serializers that import them.
from config.fields import (  # noqa: F401
    JSON_TYPE_NAMES,
    JsonIntegerField,
    QueryBooleanField,
    SignedTokenField,
    StrictBooleanField,
    StrictIntegerField,
    Utf8TextField,
    json_type_of,
    not_a,
)
from config.text import field_name, query_name

# The `{id}` of every /api/v1/memories/{id}… route. Declared as a UUID (`format: uuid`), as the memory-store,
# session and environment ids are, so that clients and MCP tool schemas know the shape; any other spelling
# still names nothing (404, `config.fields.canonical_uuid`).
STORE_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Store UUID.")


def idempotency_key_header(request, field: serializers.Field) -> str | None:
    """The request's `Idempotency-Key` header as text, or None when it sent none (SPEC §2).

    `field` is the DRF field whose rules the key must meet (the note's `client_nonce`; the creates'
    `accounts.idempotency.KEY_FIELD`: 1–128 characters, no NUL or lone surrogates). The header's bytes are
    read as UTF-8, as a body is (WSGI hands them over as Latin-1: `ключ` in the header and in a body were two
    keys, so one retried note was stored twice — found by a breaker). Raises `config.errors.InvalidRequest`
    (400, `details.fields` naming the header) for bytes that are not UTF-8 or a key `field` refuses.
    """
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")  # what `request.headers` reads, without building all of it
    if key is None:
        return None
    if not key.isascii():
        try:
            key = key.encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise InvalidRequest(
                "The Idempotency-Key header is not valid UTF-8.",
                details={"fields": {"Idempotency-Key": "not valid UTF-8"}},
            ) from None
    try:  # the field's own rules, but a refusal names the header the value came in
        return field.run_validation(key)
    except ValidationError as exc:
        problem = " ".join(str(message) for message in exc.detail)
        raise InvalidRequest(
            f"Idempotency-Key header: {problem}", details={"fields": {"Idempotency-Key": problem}}
        ) from None


def reject_body(request) -> None:
    """For writes that take no request body (archive, redact a version, DELETEs, the work queue's ack and
    heartbeat): the body must be absent, empty or the empty JSON object ``{}``. Any other JSON text —
    ``null``, a list, a string — is a 400; malformed JSON or bad UTF-8 is a 400 and another media type a
    415 (`config.parsers.StrictJSONParser`); any field is a 400 naming it. Nothing is changed then.
    The one rule for every such endpoint (docs/decisions.md, "Writes without a body")."""
    data = request.data
    if isinstance(data, dict) and not data:  # DRF's data for an absent or empty body is {} too
        return
    if not isinstance(data, dict):
        raise serializers.ValidationError({"body": ["This endpoint takes no request body (send none, or {})."]})
    raise unknown_fields(sorted(data))


def unknown_fields(names: list[str], *, query: bool = False) -> ValidationError:
    """The 400 for body fields (or MCP arguments) no one declared: "Unknown field." under each name. A name
    that is not plain letters, digits, `_` and `-` is written as a JSON string (``""``, ``"a\\"b"``), so that an
    empty key is still named and a key spelled ``""`` is not the empty one. A name is cut at 60 characters
    (a 400 names each field in at most 100, `config.errors.MAX_FIELD_CHARS`): two long names that begin
    alike are then listed once, plain or not (`config.text.field_name`). `query`: the names are query
    parameters, and the bracket style of the API's own (``created_at[gt]``) is named as it is
    (`config.text.query_name`)."""
    name_of = query_name if query else field_name
    return ValidationError({name_of(name): ["Unknown field."] for name in names})


def envelope(data: Any, meta: dict[str, Any] | None = None, *, status: int = 200, headers=None) -> Response:
    """Render a Memories-surface success body ``{"data": data, "meta": meta or {}}``."""
    return Response({"data": data, "meta": meta or {}}, status=status, headers=headers)


def caller_key(request) -> str | None:
    """What every list binds its cursors and page tokens to besides its query: the caller's user id, None when
    anonymous. A cursor carried to another caller is a 400, like one carried to another query
    (docs/decisions.md "Lists")."""
    user = getattr(request, "user", None)
    return str(user.pk) if user is not None and user.is_authenticated else None


STRICT_SERIALIZERS: list[type] = []  # every StrictSerializer class (their components: config/schema.py)


def strict_component_names() -> set[str]:
    """The OpenAPI component names of strict request bodies: each `StrictSerializer`'s name as drf-spectacular
    gives it (its `component_name` override, else the class name without "Serializer"), with the "Request"
    and "PatchedRequest" forms of split request components."""
    from drf_spectacular.drainage import get_override  # pinned; tests/contract/test_openapi.py covers it

    names = set()
    for cls in STRICT_SERIALIZERS:
        name = get_override(cls, "component_name") or cls.__name__.removesuffix("Serializer")
        names.update({name, name + "Request", "Patched" + name + "Request"})
    return names


class StrictSerializer(serializers.Serializer):
    """A serializer that rejects unknown fields (400 naming them) instead of silently ignoring them, and a
    declared field given another JSON type in JSON's words — "Must be a string, not null.", "Must be an
    integer, not a string." — the words /mcp uses for the same argument (`config.mcp_tools.check_arguments`).
    DRF said "This field may not be null.", "A valid integer is required.", or turned `true` into "True"
    and called it not a valid choice (testers).

    Its request component in /openapi.yaml says so (`additionalProperties: false`, config/schema.py).
    """

    # JSON types are checked on bodies; a query serializer's values are all strings (StrictQuerySerializer).
    json_typed = True
    query_parameters = False  # the fields are a body's (a query serializer's are query parameters)
    # (name, JSON types it takes, their words, its error code) per declared field of a plain type or a raw
    # field's documented type: found once per class, not per request (the note's validation runs through here)
    _json_types: tuple[tuple[str, frozenset[str], str, str | None], ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        STRICT_SERIALIZERS.append(cls)
        rules = []
        for name, field in cls._declared_fields.items() if cls.json_typed else ():
            kinds = json_types_of(field)
            if kinds is not None:
                rules.append((name, kinds, json_types_in_words(kinds), getattr(field, "error_code", None)))
        cls._json_types = tuple(rules)

    def run_validation(self, data=serializers.empty):
        if data is None and self.parent is None:  # a `null` body; DRF said "No data provided"
            raise ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [not_a("a JSON object", data)]}, code="invalid")
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, Mapping):  # DRF: "Invalid data. Expected a dictionary, but got list." (a tester)
            raise ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [not_a("a JSON object", data)]}, code="invalid")
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise unknown_fields(unknown, query=self.query_parameters)
            wrong = {
                name: [not_a(words, data[name])]
                for name, kinds, words, _ in self._json_types
                if name in data and json_type_of(data[name]) not in kinds
            }
            if wrong:
                raise wrong_types(wrong, [code for name, _, _, code in self._json_types if name in wrong])
        return super().to_internal_value(data)


def wrong_types(wrong: dict[str, list[str]], codes: list[str | None]) -> Exception:
    """The 400 for body fields of the wrong JSON type (`{name: [problem]}`; `codes`: each one's error code or
    None): a ValidationError, or — when every one of them carries the same code (metadata alone:
    ``invalid_metadata``, which the anthropic SDK maps to `BetaInvalidMetadataError`) — an InvalidRequest with
    the same message and `details.fields` plus ``details.error_code``, so the code survives whichever check
    refuses the value first (SPEC §2). A refusal that is also about another field carries no code: a client
    catching BetaInvalidMetadataError must not take a bad `name` for a metadata problem (helper-94)."""
    error = serializers.ValidationError(wrong)
    if len(set(codes)) != 1 or codes[0] is None:
        return error
    message, fields = validation_summary(error.detail)
    return InvalidRequest(message, details={"error_code": codes[0], "fields": fields})


def json_types_in_words(kinds: frozenset[str] | set[str]) -> str:
    """``{"string", "null"}`` → "a string or null" (an integer is not named beside a number; null last)."""
    named = [kind for kind in sorted(kinds) if not (kind == "integer" and "number" in kinds)]
    return " or ".join(JSON_TYPE_NAMES[kind] for kind in sorted(named, key=lambda kind: kind == "null"))


def json_types_of(field: serializers.Field) -> frozenset[str] | None:
    """The JSON types a body field takes, as `json_type_of` names them (``"null"`` among them when it allows
    null), or None for a field whose own rules decide (a custom field, JSON of any type). An integer is a
    number too, as JSON Schema says."""
    if isinstance(field, serializers.BooleanField):
        kinds = {"boolean"}
    elif isinstance(field, serializers.IntegerField):
        kinds = {"integer"}
    elif isinstance(field, (serializers.FloatField, serializers.DecimalField)):
        kinds = {"number", "integer"}
    elif isinstance(field, serializers.ChoiceField):
        if isinstance(field, serializers.MultipleChoiceField) or not all(isinstance(c, str) for c in field.choices):
            return None
        kinds = {"string"}
    elif isinstance(
        field, (serializers.CharField, serializers.DateTimeField, serializers.DateField, serializers.UUIDField)
    ):
        kinds = {"string"}
    elif isinstance(field, (serializers.ListField, serializers.ListSerializer)):
        kinds = {"array"}
    elif isinstance(field, (serializers.Serializer, serializers.DictField)):
        kinds = {"object"}
    else:
        kinds = documented_json_types(field)
        if kinds is None:
            return None
    if field.allow_null:
        kinds.add("null")
    return frozenset(kinds)


def documented_json_types(field: serializers.Field) -> set[str] | None:
    """The JSON types a raw field's documented schema names (`versions.api.serializers.RawField`: a value
    passed through untouched to the service's validator, its schema set by ``extend_schema_field``) — a
    ``type``, or every ``type`` of a ``oneOf`` — or None when the schema names none (null is the field's
    `allow_null`, which tests keep equal to the schema's ``nullable``)."""
    from drf_spectacular.drainage import get_override  # pinned; tests/contract/test_openapi.py covers it

    schema = get_override(type(field), "field")
    if not isinstance(schema, dict):
        return None
    members = schema.get("oneOf", [schema])
    kinds = {member.get("type") for member in members}
    if not kinds or not kinds <= set(JSON_TYPE_NAMES) - {"null"}:
        return None
    if "number" in kinds:
        kinds.add("integer")
    return kinds


_QUERY_INTEGER = re.compile(r"-?[0-9]+")


class QueryData(dict):
    """Query parameters as a plain dict (the last value of each name) that remembers, in `repeated`,
    the names given more than once — what `StrictQuerySerializer` refuses."""

    repeated: tuple[str, ...] = ()


def query_data(data):
    """`data` as `QueryData` when it is a QueryDict (``request.query_params``); anything else unchanged."""
    if data is None or not hasattr(data, "getlist"):
        return data
    out = QueryData(data.dict())
    out.repeated = tuple(sorted(key for key in data if len(data.getlist(key)) > 1))
    return out


class StrictQuerySerializer(StrictSerializer):
    """Validates `request.query_params` with one set of rules for every endpoint (SPEC §2):

    - unknown parameters are rejected like unknown body fields (400 naming them);
    - a parameter given twice is a 400 naming it (never "the last one wins"), list fields aside;
    - an integer parameter is ASCII decimal digits only (``40.0``, `` 40``, ``٤٠``, ``４０`` are 400);
    - a boolean parameter is exactly ``true`` or ``false`` (``yes``, ``1``, ``True`` are 400).
    """

    json_typed = False  # every value is a string
    query_parameters = True

    def __init__(self, *args, data=None, **kwargs):
        super().__init__(*args, data=query_data(data), **kwargs)

    def to_internal_value(self, data):
        errors = {
            name: ["Given more than once; send it once."]
            for name in getattr(data, "repeated", ())
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


class NoQuerySerializer(StrictQuerySerializer):
    """The query of an endpoint that takes no query parameters: every parameter is unknown."""


def reject_query(request) -> None:
    """For endpoints that take no query parameters (retrieves, most writes): any parameter is a 400 naming
    it (``POST …/stop?force=true`` is not a forced stop, and not silently a graceful one either), by the
    same rules as every query (`StrictQuerySerializer`). The query counterpart of `reject_body`."""
    if request.query_params:
        validate(NoQuerySerializer, request.query_params)


# --- serializers without per-call field copies (issue 17) -------------------------------------------------

# Field types whose to_representation / run_validation read only their own configuration: no context
# (request, view), no state kept between calls. A serializer made only of these (nested ones included)
# can be shared by every request of the process.
_SHAREABLE_FIELDS = (
    QueryBooleanField,
    serializers.BooleanField,
    serializers.CharField,  # Utf8TextField, SignedTokenField, RegexField, … are CharFields
    serializers.ChoiceField,
    serializers.DateTimeField,
    serializers.DictField,
    serializers.FloatField,
    serializers.IntegerField,
    serializers.JSONField,
    serializers.ListField,
    serializers.UUIDField,
)
_PROTOTYPES: dict[type, serializers.Serializer] = {}


def _check_shareable(serializer: serializers.Serializer, path: str) -> None:
    for name, field in serializer.fields.items():
        where = f"{path}.{name}"
        if isinstance(field, serializers.ListSerializer):
            _check_shareable(field.child, where)
        elif isinstance(field, serializers.Serializer):
            _check_shareable(field, where)
        elif isinstance(field, serializers.ListField) and isinstance(field.child, serializers.Serializer):
            _check_shareable(field.child, where)
        elif not (isinstance(field, _SHAREABLE_FIELDS) or getattr(field, "shareable", False)):
            raise TypeError(f"{where}: {type(field).__name__} may read the context; it cannot be shared")


def prototype(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """The process-wide instance of `serializer_class` (no instance, no data, no context), fields bound once:
    what `validate` runs, instead of DRF deep-copying and re-binding every declared field per request.

    Raises TypeError when a field (nested ones included) is not of a context-free type (`_SHAREABLE_FIELDS`,
    or a field class with ``shareable = True``; a method field is not) or when the serializer overrides
    `validate`, which could read the context.
    """
    found = _PROTOTYPES.get(serializer_class)
    if found is None:
        found = serializer_class()
        _check_shareable(found, serializer_class.__name__)
        if type(found).validate is not serializers.Serializer.validate:
            raise TypeError(f"{serializer_class.__name__}.validate may read the context; it cannot be shared")
        _PROTOTYPES[serializer_class] = found
    return found


def validate(serializer_class: type[serializers.Serializer], data: Any) -> dict:
    """``serializer_class(data=data)``'s `validated_data` through the shared `prototype`.

    Raises the ValidationError `is_valid(raise_exception=True)` raises, with the same detail (400): on
    failure the data is validated again by a fresh serializer, whose `errors` DRF shapes (e.g. no data).
    For a `StrictQuerySerializer`, pass ``request.query_params`` as it is. A serializer that overrides
    `validate` (which could read the context, so `prototype` refuses to share it) is validated by a fresh
    instance, as DRF does.
    """
    data = query_data(data)
    if serializer_class.validate is not serializers.Serializer.validate:
        fresh = serializer_class(data=data)
        fresh.is_valid(raise_exception=True)
        return fresh.validated_data
    try:
        return prototype(serializer_class).run_validation(data)
    except serializers.ValidationError:
        fresh = serializer_class(data=data)
        fresh.is_valid(raise_exception=True)
        raise  # pragma: no cover - the fresh serializer always fails as the shared one did


# --- rendering without DRF's per-field machinery (issue 17) ----------------------------------------------


def datetime_formatter(field: serializers.DateTimeField, formatters: dict) -> Callable[[Any], Any]:
    """`field.to_representation` for one response: DRF looks the active time zone up for every value
    (from a context-local); it cannot change within one response, so it is looked up once per `formatters`
    (a dict the caller keeps for one response), and an aware value in ISO 8601 output (DRF's default) is
    formatted directly, as DRF does: `astimezone`, `isoformat`, ``+00:00`` written ``Z``. Anything else
    goes through the field itself."""
    formatter = formatters.get(id(field))
    if formatter is None:
        zone = getattr(field, "timezone", None) or field.default_timezone()
        output = getattr(field, "format", api_settings.DATETIME_FORMAT)
        slow = field.to_representation
        if zone is None or not isinstance(output, str) or output.lower() != ISO_8601:
            formatter = slow
        else:

            def formatter(value, zone=zone, slow=slow):
                if not isinstance(value, datetime.datetime) or value.utcoffset() is None:
                    return slow(value)
                try:
                    text = value.astimezone(zone).isoformat()
                except OverflowError:  # DRF's own error for it
                    return slow(value)
                return text[:-6] + "Z" if text.endswith("+00:00") else text

        formatters[id(field)] = formatter
    return formatter


# Fields that read other objects or a whole serializer's worth: never rendered by PlainObjectRendering.
_NOT_PLAIN_OBJECT_FIELDS = (serializers.RelatedField, serializers.BaseSerializer)
# What a field's own `to_representation` does to a value that is not None, where that is one builtin:
# CharField's is ``str(value)``, IntegerField's ``int(value)``; DateTimeField's goes through the formatter.
_PLAIN_CONVERSIONS = {
    serializers.CharField.to_representation: str,
    serializers.IntegerField.to_representation: int,
    serializers.DateTimeField.to_representation: None,
}
_PLAIN_TYPES: dict[type, bool] = {}  # type -> not a Mapping (DRF's test), looked up once per type


class PlainObjectRendering:
    """Render one object (a model instance) exactly as ``serializer_class(instance, context=context).data``
    would, without DRF's per-field machinery (issue 17: 8 % of a note's instructions went to DRF's walk).

    The serializer stays the OpenAPI source; this follows its bound fields in order: the value is the
    field's `source` walked attribute by attribute, as DRF's `get_attribute` does (``source="*"``: the
    instance itself), and None stays None; any other value goes through the field's own
    `to_representation` (datetimes through `datetime_formatter`, the active time zone looked up once per
    call). A walk that fails on the way (``author.handle`` with no author) is None for a nullable field,
    left out for an optional one and an AttributeError otherwise; ObjectDoesNotExist is None — DRF's rules,
    in its order. An item that is a mapping, or a value on the way that is callable (DRF would call it), is
    rendered by the serializer itself.

    context: a fixed context every rendering shares (e.g. ``{"view": "full"}``), never a request's; a
    method field is only allowed with one (as `prototype`). Related fields, nested serializers, defaults
    and fields with their own `get_attribute` are a TypeError when the rendering is built (import time).
    tests/log/test_plain_rendering.py and tests/files compare both renderings.
    """

    def __init__(self, serializer_class: type[serializers.Serializer], context: dict | None = None):
        self.serializer = serializer_class(context=dict(context or {}))  # bound fields; no data
        self.plan: list[tuple[str, list[str], bool, bool, Any, serializers.Field]] = []
        for name, field in self.serializer.fields.items():
            where = f"{serializer_class.__name__}.{name}"
            if field.write_only:
                continue
            if field.default is not serializers.empty:
                raise TypeError(f"{where}: a default is not rendered plainly")
            if isinstance(field, _NOT_PLAIN_OBJECT_FIELDS):
                raise TypeError(f"{where}: {type(field).__name__} is not rendered plainly")
            if isinstance(field, serializers.SerializerMethodField) and context is None:
                raise TypeError(f"{where}: a method field may read the context; give an explicit one")
            if type(field).get_attribute is not serializers.Field.get_attribute:
                raise TypeError(f"{where}: its own get_attribute is not rendered plainly")
            convert = _PLAIN_CONVERSIONS.get(type(field).to_representation, field.to_representation)
            self.plan.append((name, field.source_attrs, field.allow_null, field.required, convert, field))

    def one(self, instance: Any) -> dict:
        """``serializer_class(instance, context=context).data`` as a plain dict."""
        out, formatters = {}, {}
        for name, attrs, allow_null, required, convert, field in self.plan:
            value = instance
            try:
                for attr in attrs:
                    plain = _PLAIN_TYPES.get(type(value))
                    if plain is None:
                        plain = _PLAIN_TYPES[type(value)] = not isinstance(value, Mapping)
                    if not plain:  # DRF indexes a mapping on the way
                        return dict(self.serializer.to_representation(instance))
                    value = getattr(value, attr)
                    if callable(value):  # DRF calls a method on the way
                        return dict(self.serializer.to_representation(instance))
            except ObjectDoesNotExist:
                value = None
            except AttributeError:
                if allow_null:
                    value = None
                elif not required:
                    continue
                else:
                    raise
            if value is not None:
                value = datetime_formatter(field, formatters)(value) if convert is None else convert(value)
            out[name] = value
        return out
