"""Response objects of environments, sessions and work, key for key as anthropic 2.10.0 parses them (SPEC §5).

The SDK's types are the field reference: `BetaEnvironment`, `BetaEnvironmentDeleteResponse`,
`BetaManagedAgentsSession` (with `BetaManagedAgentsSessionAgent`, `…Stats`, `…Usage` and the
`BetaManagedAgentsMemoryStoreResource` items), `BetaManagedAgentsDeletedSession`, `BetaSelfHostedWork`,
`BetaSelfHostedWorkHeartbeatResponse`, `BetaSelfHostedWorkQueueStats`, `BetaWorkLeaseState`. Every
documented key is present, nullable ones as null; values this service cannot know (an agent's model,
tools and skills; token usage) are empty or zero. Timestamps are RFC 3339 UTC. Environment keys are ours.

Each serializer declares the fields (that is the OpenAPI schema) and renders them in `to_representation`.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers
from rest_framework.response import Response

from sessions.api.schema import ClosedSerializer
from sessions.models import Environment, EnvironmentKey, Session, Work
from sessions.selectors import attachments_of
from sessions.services.common import rfc3339
from sessions.services.work import Heartbeat
from versions.api.serializers import ConstantField

STATES = ["queued", "starting", "active", "stopping", "stopped"]
SESSION_STATUSES = ["rescheduling", "running", "idle", "terminated"]


def _nullable_text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(allow_null=True, **kwargs)


def _time(**kwargs: Any) -> serializers.DateTimeField:
    return serializers.DateTimeField(**kwargs)


# --- environments ---------------------------------------------------------------------------------


class SelfHostedConfigSerializer(ClosedSerializer):
    type = ConstantField("self_hosted")


class EnvironmentSerializer(ClosedSerializer):
    """The `environment` object (`BetaEnvironment`); `config` is always `{"type": "self_hosted"}`."""

    id = serializers.UUIDField()
    type = ConstantField("environment")
    name = serializers.CharField()
    description = _nullable_text()
    config = SelfHostedConfigSerializer()
    metadata = serializers.DictField(child=serializers.CharField())
    scope = serializers.ChoiceField(choices=["organization", "account"], allow_null=True)
    created_at = _time()
    updated_at = _time()
    archived_at = _time(allow_null=True)

    def to_representation(self, env: Environment) -> dict[str, Any]:
        return {
            "id": str(env.pk),
            "type": "environment",
            "name": env.name,
            "description": env.description,
            "config": {"type": "self_hosted"},
            "metadata": dict(env.metadata),
            "scope": env.scope,
            "created_at": rfc3339(env.created_at),
            "updated_at": rfc3339(env.updated_at),
            "archived_at": rfc3339(env.archived_at),
        }


class EnvironmentDeletedSerializer(ClosedSerializer):
    id = serializers.UUIDField()
    type = ConstantField("environment_deleted")


class EnvironmentKeySerializer(ClosedSerializer):
    """An `environment_key` (ours; the SDK has no key API): the secret is never shown again."""

    id = serializers.UUIDField()
    type = ConstantField("environment_key")
    environment_id = serializers.UUIDField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The first 12 characters of the secret, for recognition.")
    created_at = _time()
    last_used_at = _time(allow_null=True)
    revoked_at = _time(allow_null=True)

    def to_representation(self, key: EnvironmentKey) -> dict[str, Any]:
        return {
            "id": str(key.pk),
            "type": "environment_key",
            "environment_id": str(key.environment_id),
            "name": key.name,
            "prefix": key.prefix,
            "created_at": rfc3339(key.created_at),
            "last_used_at": rfc3339(key.last_used_at),
            "revoked_at": rfc3339(key.revoked_at),
        }


class EnvironmentKeyCreatedSerializer(EnvironmentKeySerializer):
    """A new `environment_key` with its `secret`, shown this once (only its SHA-256 is stored)."""

    secret = serializers.CharField(help_text="The key itself (`menv_…`): send it as `Authorization: Bearer`.")

    def to_representation(self, issued) -> dict[str, Any]:
        return {**super().to_representation(issued.key), "secret": issued.secret}


# --- sessions -------------------------------------------------------------------------------------


class ModelConfigSerializer(ClosedSerializer):
    id = serializers.CharField(help_text="Empty: this service never runs a model, so it knows none.")
    effort = serializers.JSONField(allow_null=True)
    inference_geo = _nullable_text()
    speed = serializers.ChoiceField(choices=["standard", "fast"], allow_null=True)


class ExecutionIdentitySerializer(ClosedSerializer):
    type = ConstantField("service_account")


class SessionAgentSerializer(ClosedSerializer):
    """The session's `agent` snapshot: the id and version it was created with; the rest empty or null."""

    id = serializers.CharField()
    type = ConstantField("agent")
    version = serializers.IntegerField(help_text="The pinned version; 0 when the session named the agent by id.")
    name = serializers.CharField()
    description = _nullable_text()
    execution_identity = ExecutionIdentitySerializer()
    mcp_servers = serializers.ListField(child=serializers.JSONField())
    model = ModelConfigSerializer()
    multiagent = serializers.JSONField(allow_null=True)
    skills = serializers.ListField(child=serializers.JSONField())
    system = _nullable_text()
    tools = serializers.ListField(child=serializers.JSONField())

    def to_representation(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": snapshot["id"],
            "type": "agent",
            "version": snapshot.get("version") or 0,
            "name": "",
            "description": None,
            "execution_identity": {"type": "service_account"},
            "mcp_servers": [],
            "model": {"id": "", "effort": None, "inference_geo": None, "speed": None},
            "multiagent": None,
            "skills": [],
            "system": None,
            "tools": [],
        }


class MemoryStoreResourceSerializer(ClosedSerializer):
    """A `memory_store` resource (an attachment): name and description as snapshotted at attach time."""

    type = ConstantField("memory_store")
    memory_store_id = serializers.UUIDField()
    access = serializers.ChoiceField(choices=["read_write", "read_only"])
    description = serializers.CharField()
    instructions = _nullable_text()
    mount_path = serializers.CharField()
    name = serializers.CharField()

    def to_representation(self, attachment) -> dict[str, Any]:
        return {
            "type": "memory_store",
            "memory_store_id": str(attachment.store_id),
            "access": attachment.access,
            "description": attachment.description,
            "instructions": attachment.instructions,
            "mount_path": attachment.mount_path,
            "name": attachment.name,
        }


class SessionStatsSerializer(ClosedSerializer):
    active_seconds = serializers.FloatField()
    duration_seconds = serializers.FloatField(help_text="Seconds since creation (frozen once archived).")


class CacheCreationUsageSerializer(ClosedSerializer):
    ephemeral_1h_input_tokens = serializers.IntegerField()
    ephemeral_5m_input_tokens = serializers.IntegerField()


class ServerToolUsageSerializer(ClosedSerializer):
    web_fetch_requests = serializers.IntegerField()
    web_search_requests = serializers.IntegerField()


class SessionUsageSerializer(ClosedSerializer):
    active_seconds = serializers.FloatField()
    cache_creation = CacheCreationUsageSerializer()
    cache_read_input_tokens = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    list_cost = serializers.JSONField(allow_null=True)
    output_tokens = serializers.IntegerField()
    server_tool_use = ServerToolUsageSerializer()


ZERO_USAGE = {
    "active_seconds": 0.0,
    "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
    "cache_read_input_tokens": 0,
    "input_tokens": 0,
    "list_cost": None,
    "output_tokens": 0,
    "server_tool_use": {"web_fetch_requests": 0, "web_search_requests": 0},
}


class SessionSerializer(ClosedSerializer):
    """The `session` object (`BetaManagedAgentsSession`). Needs `status` (`with_status`) and attachments."""

    id = serializers.UUIDField()
    type = ConstantField("session")
    agent = SessionAgentSerializer()
    archived_at = _time(allow_null=True)
    budget = serializers.JSONField(allow_null=True, help_text="Always null: nothing is budgeted here.")
    created_at = _time()
    deployment_id = _nullable_text()
    environment_id = serializers.UUIDField()
    metadata = serializers.DictField(child=serializers.CharField())
    outcome_evaluations = serializers.ListField(child=serializers.JSONField())
    resources = MemoryStoreResourceSerializer(many=True)
    stats = SessionStatsSerializer()
    status = serializers.ChoiceField(choices=SESSION_STATUSES)
    title = _nullable_text()
    updated_at = _time()
    usage = SessionUsageSerializer()
    vault_ids = serializers.ListField(child=serializers.CharField())

    def to_representation(self, session: Session) -> dict[str, Any]:
        end = session.archived_at or timezone.now()
        resource = MemoryStoreResourceSerializer()
        return {
            "id": str(session.pk),
            "type": "session",
            "agent": SessionAgentSerializer().to_representation(session.agent),
            "archived_at": rfc3339(session.archived_at),
            "budget": None,
            "created_at": rfc3339(session.created_at),
            "deployment_id": None,
            "environment_id": str(session.environment_id),
            "metadata": dict(session.metadata),
            "outcome_evaluations": [],
            "resources": [resource.to_representation(a) for a in attachments_of(session)],
            "stats": {"active_seconds": 0.0, "duration_seconds": max(0.0, (end - session.created_at).total_seconds())},
            "status": session.status,
            "title": session.title,
            "updated_at": rfc3339(session.updated_at),
            "usage": ZERO_USAGE,
            "vault_ids": [],
        }


class SessionDeletedSerializer(ClosedSerializer):
    id = serializers.UUIDField()
    type = ConstantField("session_deleted")


# --- work -----------------------------------------------------------------------------------------


class SessionWorkDataSerializer(ClosedSerializer):
    type = ConstantField("session")
    id = serializers.UUIDField(help_text="The session's id.")


class WorkSerializer(ClosedSerializer):
    """The `work` object (`BetaSelfHostedWork`); `secret` is set only in the poll that claims it."""

    id = serializers.UUIDField()
    type = ConstantField("work")
    acknowledged_at = _time(allow_null=True)
    created_at = _time()
    data = SessionWorkDataSerializer()
    environment_id = serializers.UUIDField()
    latest_heartbeat_at = _time(allow_null=True)
    metadata = serializers.DictField(child=serializers.CharField())
    secret = _nullable_text(
        help_text='URL-safe base64 (unpadded) of {"sessions_token": "<per-work credential>"}; poll only.'
    )
    started_at = _time(allow_null=True)
    state = serializers.ChoiceField(choices=STATES)
    stop_requested_at = _time(allow_null=True)
    stopped_at = _time(allow_null=True)

    def to_representation(self, work: Work) -> dict[str, Any]:
        return {
            "id": str(work.pk),
            "type": "work",
            "acknowledged_at": rfc3339(work.acknowledged_at),
            "created_at": rfc3339(work.created_at),
            "data": {"type": "session", "id": str(work.session_id)},
            "environment_id": str(work.environment_id),
            "latest_heartbeat_at": rfc3339(work.last_heartbeat_at),
            "metadata": dict(work.metadata),
            "secret": self.context.get("secret"),
            "started_at": rfc3339(work.started_at),
            "state": work.state,
            "stop_requested_at": rfc3339(work.stop_requested_at),
            "stopped_at": rfc3339(work.stopped_at),
        }


# The poll's 200 body: a claimed `work` object, or the JSON `null` when the queue has nothing to claim.
NULLABLE_WORK_SCHEMA = {"allOf": [{"$ref": "#/components/schemas/Work"}], "nullable": True}


class WorkHeartbeatSerializer(ClosedSerializer):
    """The `work_heartbeat` object (`BetaSelfHostedWorkHeartbeatResponse`)."""

    type = ConstantField("work_heartbeat")
    last_heartbeat = serializers.CharField(help_text="RFC 3339; echo it as the next expected_last_heartbeat.")
    lease_extended = serializers.BooleanField()
    state = serializers.ChoiceField(choices=STATES)
    ttl_seconds = serializers.IntegerField()

    def to_representation(self, beat: Heartbeat) -> dict[str, Any]:
        return {
            "type": "work_heartbeat",
            "last_heartbeat": beat.last_heartbeat,
            "lease_extended": beat.lease_extended,
            "state": beat.state,
            "ttl_seconds": beat.ttl_seconds,
        }


class WorkLeaseStateSerializer(ClosedSerializer):
    """`BetaWorkLeaseState`: the lease as the server holds it (in a 412's `error.details.current_state`)."""

    last_heartbeat = _nullable_text()
    lease_extended = serializers.BooleanField()
    state = serializers.ChoiceField(choices=STATES)
    ttl_seconds = serializers.IntegerField()


class HeartbeatPreconditionDetailsSerializer(ClosedSerializer):
    error_code = ConstantField("heartbeat_precondition_failed")
    current_state = WorkLeaseStateSerializer()


class HeartbeatPreconditionErrorObjectSerializer(ClosedSerializer):
    type = ConstantField("precondition_failed_error")
    message = serializers.CharField()
    details = HeartbeatPreconditionDetailsSerializer()


class HeartbeatPreconditionErrorSerializer(ClosedSerializer):
    """The 412 body of a refused heartbeat (SPEC §2 error shape)."""

    type = ConstantField("error")
    error = HeartbeatPreconditionErrorObjectSerializer()
    request_id = serializers.CharField()


class WorkQueueStatsSerializer(ClosedSerializer):
    """The `work_queue_stats` object (`BetaSelfHostedWorkQueueStats`)."""

    type = ConstantField("work_queue_stats")
    depth = serializers.IntegerField()
    oldest_queued_at = _time(allow_null=True)
    pending = serializers.IntegerField()
    workers_polling = serializers.IntegerField()

    def to_representation(self, stats: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "work_queue_stats",
            "depth": stats["depth"],
            "oldest_queued_at": rfc3339(stats["oldest_queued_at"]),
            "pending": stats["pending"],
            "workers_polling": stats["workers_polling"],
        }


# --- pages ----------------------------------------------------------------------------------------


class EnvironmentPageSerializer(ClosedSerializer):
    data = EnvironmentSerializer(many=True)
    next_page = _nullable_text()


class EnvironmentKeyPageSerializer(ClosedSerializer):
    data = EnvironmentKeySerializer(many=True)
    next_page = _nullable_text()


class SessionPageSerializer(ClosedSerializer):
    data = SessionSerializer(many=True)
    next_page = _nullable_text()
    prev_page = _nullable_text(help_text="Always null: pages go forward only (follow next_page).")


class SessionResourcePageSerializer(ClosedSerializer):
    data = MemoryStoreResourceSerializer(many=True)
    next_page = _nullable_text()


class WorkPageSerializer(ClosedSerializer):
    data = WorkSerializer(many=True)
    next_page = _nullable_text()


def body(serializer_class: type[serializers.Serializer], instance: Any, **context: Any) -> Response:
    """A 200 response holding one object rendered by `serializer_class`."""
    return Response(serializer_class(context=context).to_representation(instance))


def page(serializer_class: type[serializers.Serializer], items: list[Any], next_page: str | None, **extra) -> Response:
    """A list page ``{"data": [...], "next_page": str | null, **extra}`` (the SDK stops at a null)."""
    render = serializer_class().to_representation
    return Response({"data": [render(item) for item in items], "next_page": next_page, **extra})
