"""Request validation and response shapes of the Memory Stores surface (SPEC §5).

Response serializers render the anthropic SDK 2.10.0 objects key for key (`memory_store`, `memory`,
`memory_prefix`, `memory_version`, `memory_deleted`, `memory_store_deleted`): every documented key is
present, nullable ones as null; timestamps are RFC 3339 UTC with microseconds. Request serializers are
strict (unknown fields or query parameters are 400) and delegate field rules to `versions.validation`
and `stores.validation`, so both surfaces word their errors the same way.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from config.api import StrictQuerySerializer, StrictSerializer
from config.fields import (
    MEMORY_PATH_PATTERN,
    NAME_PATTERN,
    NO_CONTROL_PATTERN,
    PATH_PREFIX_PATTERN,
    QueryBooleanField,
    SignedTokenField,
)
from stores import validation as store_validation
from stores.models import DESCRIPTION_MAX_CHARS, METADATA_MAX_PAIRS, METADATA_VALUE_MAX_CHARS, NAME_MAX_CHARS
from versions import validation
from versions.models import CONTENT_MAX_BYTES, PATH_MAX_BYTES, VIEW_FULL_MAX_ITEMS, Operation

VIEWS = ("basic", "full")
PAGE_MAX_CHARS = 4400


# --- building blocks ----------------------------------------------------------------------------------


class ConstantField(serializers.Field):
    """A read-only field whose value is always `value` (the objects' ``type`` discriminators)."""

    shareable = True  # reads nothing but its value: serializers using it may be shared (config.api.prototype)

    def __init__(self, value: str, **kwargs: Any) -> None:
        self.value = value
        kwargs.update(source="*", read_only=True)
        super().__init__(**kwargs)

    def to_representation(self, _instance: Any) -> str:
        return self.value


class ConstantFieldExtension(OpenApiSerializerFieldExtension):
    """Document a ConstantField as a one-value string enum."""

    target_class = "versions.api.serializers.ConstantField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "string", "enum": [self.target.value]}


class RawField(serializers.Field):
    """Pass the JSON value through untouched; the serializer's ``validate_<name>`` checks it.

    Used where DRF's own fields would coerce (``123`` → ``"123"``) or word errors differently from the
    shared validators.
    """

    shareable = True  # keeps no state and reads no context: serializers using it may be shared (config.api.prototype)
    # `details.error_code` of a refusal of the value's JSON type (config.api.StrictSerializer checks the type
    # its schema documents before the validator runs): metadata's "invalid_metadata", which the SDK maps
    error_code: str | None = None

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


def raw(error_code: str | None = None, **schema: Any) -> type[RawField]:
    """A `RawField` subclass documented in OpenAPI as `schema` (as strict as the validator behind it), whose
    refusals of another JSON type carry `error_code` (``details.error_code``) when given."""
    return extend_schema_field(schema)(type("Raw", (RawField,), {"error_code": error_code}))


@extend_schema_field({"type": "string"})
class RawStringField(RawField):
    pass


@extend_schema_field({"type": "string", "nullable": True})
class RawNullableStringField(RawField):
    pass


# Metadata (stores.validation.clean_metadata): ≤16 pairs; values ≤512 characters without control characters.
# A patch (stores.validation.patch_metadata): ≤32 keys, null deletes one. The schemas of every surface.
_METADATA_VALUE = {"type": "string", "maxLength": METADATA_VALUE_MAX_CHARS, "pattern": NO_CONTROL_PATTERN}
METADATA_SCHEMA = {"type": "object", "maxProperties": METADATA_MAX_PAIRS, "additionalProperties": _METADATA_VALUE}
METADATA_PATCH_SCHEMA = {
    "type": "object",
    "maxProperties": store_validation.METADATA_PATCH_MAX_KEYS,
    "additionalProperties": {**_METADATA_VALUE, "nullable": True},
    "description": 'A patch: a string sets the key, null deletes it (on environments "" deletes it too); at '
    "most 32 keys, every key 1–64 characters without control characters; the result holds at most 16 pairs.",
}
RawMetadataField = raw(store_validation.INVALID_METADATA, **METADATA_SCHEMA)
RawNullableMetadataPatchField = raw(store_validation.INVALID_METADATA, **METADATA_PATCH_SCHEMA, nullable=True)
_NAME = {"type": "string", "minLength": 1, "maxLength": NAME_MAX_CHARS, "pattern": NAME_PATTERN}
_DESCRIPTION = {"type": "string", "maxLength": DESCRIPTION_MAX_CHARS}
# A memory path (versions.validation.clean_path): "/" then segments; ≤1,024 UTF-8 bytes (≤1,024 characters).
_PATH = {
    "type": "string",
    "minLength": 2,
    "maxLength": PATH_MAX_BYTES,
    "pattern": MEMORY_PATH_PATTERN,
    "description": "'/' then 1–20 segments: no '.' or '..' segment, no control or format characters, in "
    "Unicode NFC, ≤1,024 UTF-8 bytes and ≤255 per segment, not /.anthropic-memory-store in any case "
    "(the mount's marker file); otherwise case-sensitive.",
}
SHA256_SCHEMA = {"type": "string", "pattern": "^[0-9a-f]{64}$", "minLength": 64, "maxLength": 64}


# --- request bodies -----------------------------------------------------------------------------------


@extend_schema_serializer(component_name="MemoryStoreCreate")
class MemoryStoreCreateRequestSerializer(StrictSerializer):
    """Body of POST /memory_stores: `name` 1–255 chars, `description` ≤1,024 chars, `metadata` ≤16 pairs."""

    name = raw(**_NAME)()
    description = raw(**_DESCRIPTION)(required=False)
    metadata = RawMetadataField(required=False)

    def validate_name(self, value: Any) -> str:
        return store_validation.clean_name(value)

    def validate_description(self, value: Any) -> str:
        return store_validation.clean_description(value)

    def validate_metadata(self, value: Any) -> dict[str, str]:
        return store_validation.clean_metadata(value)


@extend_schema_serializer(component_name="MemoryStoreUpdate")
class MemoryStoreUpdateRequestSerializer(StrictSerializer):
    """Body of POST /memory_stores/{id}: each field optional; null = unchanged; `metadata` is a patch
    whose null values delete keys; ``description: ""`` clears the description."""

    name = raw(**_NAME, nullable=True)(required=False, allow_null=True)
    description = raw(**_DESCRIPTION, nullable=True)(required=False, allow_null=True)
    metadata = RawNullableMetadataPatchField(required=False, allow_null=True)

    def validate_name(self, value: Any) -> str | None:
        return None if value is None else store_validation.clean_name(value)

    def validate_description(self, value: Any) -> str | None:
        return None if value is None else store_validation.clean_description(value)


@extend_schema_serializer(component_name="MemoryCreate")
class MemoryCreateRequestSerializer(StrictSerializer):
    """Body of POST /memory_stores/{id}/memories: `path` (SPEC §5 rules) and `content` (≤102,400 bytes)."""

    path = raw(**_PATH)()
    content = raw(type="string", maxLength=CONTENT_MAX_BYTES)()

    def validate_path(self, value: Any) -> str:
        return validation.clean_path(value)

    def validate_content(self, value: Any) -> str:
        return validation.clean_content(value)

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            # a null content is refused beside the body's other problems, with how to make an empty memory
            if isinstance(exc.detail, dict) and "content" in exc.detail and data.get("content", "") is None:
                exc.detail["content"] = [ErrorDetail('Must be a string, not null; use "" for an empty memory.', "null")]
            raise


@extend_schema_serializer(component_name="Precondition")
class PreconditionRequestSerializer(StrictSerializer):
    """``{"type": "content_sha256", "content_sha256": "<64 lowercase hex>"}`` — the current content's hash."""

    type = serializers.ChoiceField(choices=["content_sha256"])
    content_sha256 = raw(**SHA256_SCHEMA)()

    def validate_content_sha256(self, value: Any) -> str:
        return validation.clean_sha256(value, field="precondition.content_sha256")


@extend_schema_serializer(component_name="MemoryUpdate")
class MemoryUpdateRequestSerializer(StrictSerializer):
    """Body of POST /memory_stores/{id}/memories/{memory_id}: new `content` and/or `path` (null or absent =
    unchanged) and an optional `precondition` on the current content."""

    content = raw(type="string", maxLength=CONTENT_MAX_BYTES, nullable=True)(required=False, allow_null=True)
    path = raw(**_PATH, nullable=True)(required=False, allow_null=True)
    precondition = PreconditionRequestSerializer(required=False, allow_null=True)

    def validate_content(self, value: Any) -> str | None:
        return None if value is None else validation.clean_content(value)

    def validate_path(self, value: Any) -> str | None:
        return None if value is None else validation.clean_path(value)


# --- query parameters ---------------------------------------------------------------------------------


class ViewQuerySerializer(StrictQuerySerializer):
    """`view=basic|full` (the endpoint decides the default)."""

    view = serializers.ChoiceField(choices=VIEWS, required=False)


class PageQueryMixin(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=100, required=False, default=20)
    # A memory-list token carries a path of up to 1,024 bytes (JSON-escaped, compressed, signed): at most
    # about 4.2 KiB, so 4,400 characters, which leaves room for the rest of an 8 KiB request line.
    page = SignedTokenField(max_length=PAGE_MAX_CHARS)


class CreatedAtRangeMixin(serializers.Serializer):
    """Adds the bracketed ``created_at[gte]`` / ``created_at[lte]`` parameters (inclusive bounds)."""

    def get_fields(self):
        fields = super().get_fields()
        fields["created_at[gte]"] = serializers.DateTimeField(required=False, source="created_gte")
        fields["created_at[lte]"] = serializers.DateTimeField(required=False, source="created_lte")
        return fields


class MemoryStoreListQuerySerializer(CreatedAtRangeMixin, PageQueryMixin, StrictQuerySerializer):
    """GET /memory_stores: `include_archived` (default false), created_at bounds, `limit` 1–100, `page`."""

    include_archived = QueryBooleanField(required=False, default=False)


class MemoryListQuerySerializer(PageQueryMixin, StrictQuerySerializer):
    """GET /memory_stores/{id}/memories: `path_prefix` (ends with ``/``), `depth` 0|1, `view` (basic)."""

    path_prefix = raw(type="string", minLength=1, maxLength=PATH_MAX_BYTES + 1, pattern=PATH_PREFIX_PATTERN)(
        required=False
    )
    depth = serializers.ChoiceField(choices=[0, 1], required=False, default=0)
    view = serializers.ChoiceField(choices=VIEWS, required=False, default="basic")

    def validate_path_prefix(self, value: str) -> str:
        return validation.clean_path_prefix(value)

    def validate_depth(self, value: Any) -> int:
        return int(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["view"] == "full":
            attrs["limit"] = min(attrs["limit"], VIEW_FULL_MAX_ITEMS)
        return attrs


class MemoryDeleteQuerySerializer(StrictQuerySerializer):
    """DELETE /memory_stores/{id}/memories/{memory_id}: optional `expected_content_sha256`."""

    expected_content_sha256 = raw(**SHA256_SCHEMA)(required=False)

    def validate_expected_content_sha256(self, value: str) -> str:
        return validation.clean_sha256(value, field="expected_content_sha256")


class MemoryVersionListQuerySerializer(CreatedAtRangeMixin, PageQueryMixin, StrictQuerySerializer):
    """GET /memory_stores/{id}/memory_versions: filters `memory_id`, `operation`, created_at bounds,
    `api_key_id`, `session_id`, `service_account_id`; `view` (basic)."""

    memory_id = serializers.UUIDField(required=False)
    operation = serializers.ChoiceField(choices=Operation.values, required=False)
    # Ids the anthropic SDK may pass in its own prefixed form (`sesn_…`, `apikey_…`): an id that cannot
    # name anything here filters to an empty list, never a 400 (`versions.selectors.versions`).
    api_key_id = serializers.CharField(required=False, max_length=200, trim_whitespace=False, allow_blank=True)
    session_id = serializers.CharField(required=False, max_length=200, trim_whitespace=False, allow_blank=True)
    service_account_id = serializers.CharField(required=False, max_length=200, trim_whitespace=False, allow_blank=True)
    view = serializers.ChoiceField(choices=VIEWS, required=False, default="basic")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["view"] == "full":
            attrs["limit"] = min(attrs["limit"], VIEW_FULL_MAX_ITEMS)
        return attrs


# --- responses ----------------------------------------------------------------------------------------


class MemoryStoreSerializer(serializers.Serializer):
    """The `memory_store` object."""

    id = serializers.UUIDField()
    type = ConstantField("memory_store")
    name = serializers.CharField()
    description = serializers.CharField()
    metadata = serializers.DictField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


class MemorySerializer(serializers.Serializer):
    """The `memory` object; `content` is null unless the context's ``view`` is ``full``."""

    id = serializers.UUIDField()
    type = ConstantField("memory")
    memory_store_id = serializers.UUIDField(source="store_id")
    path = serializers.CharField()
    content = serializers.SerializerMethodField()
    content_sha256 = serializers.CharField()
    content_size_bytes = serializers.IntegerField()
    memory_version_id = serializers.UUIDField(source="current_version_id")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_content(self, memory) -> str | None:
        return memory.content if self.context.get("view") == "full" else None


class MemoryPrefixSerializer(serializers.Serializer):
    """The `memory_prefix` roll-up of a depth-1 list: `path` ends with ``/``."""

    type = ConstantField("memory_prefix")
    path = serializers.CharField()


class MemoryApiActorSerializer(serializers.Serializer):
    type = ConstantField("api_actor")
    api_key_id = serializers.CharField()


class MemorySessionActorSerializer(serializers.Serializer):
    type = ConstantField("session_actor")
    session_id = serializers.CharField()


class MemoryUserActorSerializer(serializers.Serializer):
    type = ConstantField("user_actor")
    user_id = serializers.CharField()


ACTOR_SCHEMA = PolymorphicProxySerializer(
    component_name="MemoryActor",
    serializers=[MemoryApiActorSerializer, MemorySessionActorSerializer, MemoryUserActorSerializer],
    resource_type_field_name=None,
)


@extend_schema_field(ACTOR_SCHEMA)
class ActorField(serializers.JSONField):
    """An actor object as recorded on the version (stored JSON, rendered unchanged), or null."""


class MemoryVersionSerializer(serializers.Serializer):
    """The `memory_version` object. `content` is null with view=basic, for `deleted` versions and once
    redacted; `content_sha256`/`content_size_bytes` are null only when deleted or redacted; `path` only
    when redacted."""

    id = serializers.UUIDField()
    type = ConstantField("memory_version")
    memory_id = serializers.UUIDField()
    memory_store_id = serializers.UUIDField(source="store_id")
    operation = serializers.ChoiceField(choices=Operation.values)
    path = serializers.CharField(allow_null=True)
    content = serializers.SerializerMethodField()
    content_sha256 = serializers.CharField(allow_null=True)
    content_size_bytes = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    created_by = ActorField(allow_null=True)
    redacted_at = serializers.DateTimeField(allow_null=True)
    redacted_by = ActorField(allow_null=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_content(self, version) -> str | None:
        return version.content if self.context.get("view") == "full" else None


class MemoryDeletedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    type = ConstantField("memory_deleted")


class MemoryStoreDeletedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    type = ConstantField("memory_store_deleted")


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="MemoryListItem",
        serializers=[MemorySerializer, MemoryPrefixSerializer],
        resource_type_field_name=None,
    )
)
class MemoryListItemField(serializers.JSONField):
    pass


class MemoryStorePageSerializer(serializers.Serializer):
    data = MemoryStoreSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)


class MemoryPageSerializer(serializers.Serializer):
    data = serializers.ListField(child=MemoryListItemField())
    next_page = serializers.CharField(allow_null=True)


class MemoryVersionPageSerializer(serializers.Serializer):
    data = MemoryVersionSerializer(many=True)
    next_page = serializers.CharField(allow_null=True)
