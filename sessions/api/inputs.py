"""Request bodies and query parameters of environments, sessions and work (SPEC §5).

Everything is strict: an unknown body field or query parameter is 400 naming it (endpoints without query
parameters of their own call `config.api.reject_query`), and the OpenAPI document says so
(`additionalProperties: false` on every body). Integers in query strings are ASCII
decimals (``5.0``, `` 5``, full-width digits: 400); booleans are exactly ``true``/``false``. Body fields
arrive raw and are checked by `sessions.validation` (through the services), which words every error
with the field's name.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from config.api import StrictQuerySerializer, StrictSerializer
from config.fields import (
    NAME_OR_EMPTY_PATTERN,
    NAME_PATTERN,
    UUID_PATTERN,
    QueryBooleanField,
    SignedTokenField,
)
from sessions.api.schema import ClosedSerializer
from sessions.models import (
    INSTRUCTIONS_MAX_CHARS,
    KEY_NAME_MAX_CHARS,
    MAX_ATTACHED_STORES,
    NAME_MAX_CHARS,
    POLL_BLOCK_MAX_MS,
    RECLAIM_DEFAULT_MS,
    RECLAIM_MAX_MS,
    TITLE_MAX_CHARS,
)
from stores import validation as store_validation
from stores.api.serializers import StrictBooleanField, StrictIntegerField
from stores.models import DESCRIPTION_MAX_CHARS
from versions.api.serializers import (
    METADATA_PATCH_SCHEMA,
    RawField,
    RawMetadataField,
    RawNullableMetadataPatchField,
)

PAGE_MAX_CHARS = 4096
ID_FILTER_MAX_CHARS = 200

# --- building blocks ------------------------------------------------------------------------------


class StrictBody(StrictSerializer, ClosedSerializer):
    """A request body: unknown fields are 400, and its OpenAPI schema has ``additionalProperties: false``."""


def _schema(**schema: Any):
    return extend_schema_field(schema)


@_schema(type="string", minLength=1, maxLength=NAME_MAX_CHARS, pattern=NAME_PATTERN)
class RawNameField(RawField):
    pass


@_schema(type="string", minLength=1, maxLength=NAME_MAX_CHARS, pattern=NAME_PATTERN, nullable=True)
class RawNullableNameField(RawField):
    pass


@_schema(type="string", maxLength=DESCRIPTION_MAX_CHARS, nullable=True)
class RawDescriptionField(RawField):
    pass


@_schema(type="string", enum=["organization", "account"], nullable=True)
class RawScopeField(RawField):
    pass


@_schema(**METADATA_PATCH_SCHEMA)
class RawMetadataPatchField(RawField):
    error_code = store_validation.INVALID_METADATA


@_schema(
    type="object",
    properties={"type": {"type": "string", "enum": ["self_hosted"]}},
    required=["type"],
    additionalProperties=False,
    nullable=True,
)
class RawConfigField(RawField):
    pass


@_schema(type="string", maxLength=KEY_NAME_MAX_CHARS, pattern=NAME_OR_EMPTY_PATTERN)
class RawKeyNameField(RawField):
    pass


@_schema(
    oneOf=[
        {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "pattern": NAME_PATTERN,
            "description": "An agent id (no version pinned): the name rule — no control characters, line "
            "separators or invisible formatting characters, a visible character.",
        },
        {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["agent"]},
                "id": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": NAME_PATTERN},
                "version": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1, "nullable": True},
            },
            "required": ["type", "id"],
            "additionalProperties": False,
        },
    ]
)
class RawAgentField(RawField):
    pass


MEMORY_STORE_RESOURCE_PARAM = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["memory_store"]},
        "memory_store_id": {"type": "string", "format": "uuid", "pattern": UUID_PATTERN},
        "access": {"type": "string", "enum": ["read_write", "read_only"], "nullable": True},
        "instructions": {"type": "string", "maxLength": INSTRUCTIONS_MAX_CHARS, "nullable": True},
    },
    "required": ["type", "memory_store_id"],
    "additionalProperties": False,
}


@_schema(type="array", items=MEMORY_STORE_RESOURCE_PARAM, maxItems=MAX_ATTACHED_STORES, nullable=True)
class RawResourcesField(RawField):
    pass


@_schema(type="string", format="uuid", pattern=UUID_PATTERN)
class RawEnvironmentIdField(RawField):
    """Raw, so a JSON number is a 400 (DRF's UUIDField reads ``5`` as ``UUID(int=5)``, a 404)."""


@_schema(type="string", maxLength=TITLE_MAX_CHARS, pattern=NAME_OR_EMPTY_PATTERN, nullable=True)
class RawTitleField(RawField):
    pass


@_schema(type="object", nullable=True, maxProperties=0, description="Not supported here: null or {} only.")
class RawUnsupportedObjectField(RawField):
    pass


@_schema(type="array", items={"type": "object"}, maxItems=0, description="Not supported here: empty only.")
class RawUnsupportedListField(RawField):
    pass


@_schema(type="array", items={"type": "string"}, maxItems=0, description="Not supported (no vaults): empty only.")
class RawVaultIdsField(RawField):
    pass


# --- environments ---------------------------------------------------------------------------------


@extend_schema_serializer(component_name="EnvironmentCreate")
class EnvironmentCreateRequestSerializer(StrictBody):
    """Body of POST /environments (SDK `environments.create`)."""

    name = RawNameField()
    config = RawConfigField(required=False, allow_null=True)
    description = RawDescriptionField(required=False, allow_null=True)
    metadata = RawMetadataField(required=False)
    scope = RawScopeField(required=False, allow_null=True)


@extend_schema_serializer(component_name="EnvironmentUpdate")
class EnvironmentUpdateRequestSerializer(StrictBody):
    """Body of POST /environments/{id} (SDK `environments.update`): absent = unchanged; `description`
    null clears it; `metadata` is a patch whose null or empty values delete keys; `name` null = unchanged."""

    name = RawNullableNameField(required=False, allow_null=True)
    config = RawConfigField(required=False, allow_null=True)
    description = RawDescriptionField(required=False, allow_null=True)
    metadata = RawNullableMetadataPatchField(required=False, allow_null=True)
    scope = RawScopeField(required=False, allow_null=True)


@extend_schema_serializer(component_name="EnvironmentKeyCreate")
class EnvironmentKeyCreateRequestSerializer(StrictBody):
    """Body of POST /environments/{id}/keys: an optional `name` (≤100 characters)."""

    name = RawKeyNameField(required=False)


class PageQuery(StrictQuerySerializer):
    limit = StrictIntegerField(min_value=1, max_value=100, required=False, default=20)
    page = SignedTokenField(max_length=PAGE_MAX_CHARS)


class EnvironmentListQuerySerializer(PageQuery):
    """GET /environments: `include_archived` (default false), `limit` 1–100 (20), `page`."""

    include_archived = QueryBooleanField(required=False, default=False)


class EnvironmentKeyListQuerySerializer(PageQuery):
    """GET /environments/{id}/keys: `limit` 1–100 (20), `page`."""


# --- sessions -------------------------------------------------------------------------------------


@extend_schema_serializer(component_name="SessionCreate")
class SessionCreateRequestSerializer(StrictBody):
    """Body of POST /sessions (SDK `sessions.create`). `resources` holds `memory_store` items only;
    `budget`, `initial_events` and `vault_ids` are accepted only empty (this service runs no model)."""

    agent = RawAgentField()
    environment_id = RawEnvironmentIdField()
    resources = RawResourcesField(required=False, allow_null=True)
    metadata = RawMetadataField(required=False)
    title = RawTitleField(required=False, allow_null=True)
    budget = RawUnsupportedObjectField(required=False, allow_null=True)
    initial_events = RawUnsupportedListField(required=False)
    vault_ids = RawVaultIdsField(required=False)


@extend_schema_serializer(component_name="SessionUpdate")
class SessionUpdateRequestSerializer(StrictBody):
    """Body of POST /sessions/{id} (SDK `sessions.update`): `title` and a `metadata` patch (null deletes)."""

    title = RawTitleField(required=False, allow_null=True)
    metadata = RawNullableMetadataPatchField(required=False, allow_null=True)
    agent = RawUnsupportedObjectField(required=False, allow_null=True)
    budget = RawUnsupportedObjectField(required=False, allow_null=True)
    vault_ids = RawVaultIdsField(required=False)


class SessionListQuerySerializer(PageQuery):
    """GET /sessions (SDK `sessions.list`). Filters combine with AND; ids that cannot match give an empty
    list. `statuses[]` may repeat (any of them)."""

    agent_id = serializers.CharField(required=False, max_length=ID_FILTER_MAX_CHARS, trim_whitespace=False)
    agent_version = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=2**31 - 1,
        help_text="With agent_id: that pinned version; 0 finds the sessions that named the agent by id alone "
        "(their agent.version reads 0).",
    )
    deployment_id = serializers.CharField(required=False, max_length=ID_FILTER_MAX_CHARS, trim_whitespace=False)
    include_archived = QueryBooleanField(required=False, default=False)
    memory_store_id = serializers.CharField(required=False, max_length=ID_FILTER_MAX_CHARS, trim_whitespace=False)
    order = serializers.ChoiceField(choices=["asc", "desc"], required=False, default="desc")

    def __init__(self, *args, data=None, **kwargs):
        statuses = data.getlist("statuses[]") if data is not None and hasattr(data, "getlist") else None
        super().__init__(*args, data=data, **kwargs)
        if statuses:
            self.initial_data["statuses[]"] = statuses

    def get_fields(self):
        fields = super().get_fields()
        for bound in ("gt", "gte", "lt", "lte"):
            fields[f"created_at[{bound}]"] = serializers.DateTimeField(required=False, source=f"created_{bound}")
        fields["statuses[]"] = serializers.ListField(
            child=serializers.ChoiceField(choices=["rescheduling", "running", "idle", "terminated"]),
            required=False,
            source="statuses",
            max_length=4,
        )
        return fields


class SessionResourceListQuerySerializer(StrictQuerySerializer):
    """GET /sessions/{id}/resources: `limit` 1–1000 (all when absent), `page`."""

    limit = StrictIntegerField(min_value=1, max_value=1000, required=False)
    page = SignedTokenField(max_length=PAGE_MAX_CHARS)


# --- work -----------------------------------------------------------------------------------------


class WorkListQuerySerializer(PageQuery):
    """GET /environments/{id}/work: `limit` 1–100 (20), `page`."""


class WorkPollQuerySerializer(StrictQuerySerializer):
    """GET /environments/{id}/work/poll: `block_ms` 1–999 (absent: return at once; 0 is 400) and
    `reclaim_older_than_ms` 0–3,600,000 (default 5,000)."""

    block_ms = StrictIntegerField(min_value=1, max_value=POLL_BLOCK_MAX_MS, required=False)
    reclaim_older_than_ms = StrictIntegerField(
        min_value=0, max_value=RECLAIM_MAX_MS, required=False, default=RECLAIM_DEFAULT_MS
    )


class WorkHeartbeatQuerySerializer(StrictQuerySerializer):
    """POST /environments/{id}/work/{work_id}/heartbeat: `desired_ttl_seconds` (an integer, clamped to
    10–300; default 60) and `expected_last_heartbeat` (`NO_HEARTBEAT` or the last `last_heartbeat`)."""

    desired_ttl_seconds = StrictIntegerField(required=False, min_value=-(10**18), max_value=10**18)
    expected_last_heartbeat = serializers.CharField(required=False, max_length=64, trim_whitespace=False)


@extend_schema_serializer(component_name="WorkStop")
class WorkStopRequestSerializer(StrictBody):
    """Body of POST /environments/{id}/work/{work_id}/stop: `force` (a JSON boolean, default false)."""

    force = StrictBooleanField(required=False, default=False)


@extend_schema_serializer(component_name="WorkUpdate")
class WorkUpdateRequestSerializer(StrictBody):
    """Body of POST /environments/{id}/work/{work_id} (SDK `work.update`): a `metadata` patch (null deletes);
    without `metadata` the item's metadata is kept as it is."""

    metadata = RawMetadataPatchField(required=False)
