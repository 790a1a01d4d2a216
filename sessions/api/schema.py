"""drf-spectacular: the agent credentials as security schemes on exactly the operations that accept them
(`accepted_credentials`), and closed objects (`additionalProperties: false`) for every body and object
this app reads or renders, since it neither accepts nor sends any other key."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from rest_framework import serializers

from accounts.permissions import accepted_credentials
from config.schema import WORK_CREDENTIAL_SCHEME

SCHEMES = {
    "environment_key": ("environmentKey", "An environment key: `Authorization: Bearer menv_…` (its work endpoints)."),
    "work_credential": (
        WORK_CREDENTIAL_SCHEME,
        "A per-work credential, the `sessions_token` inside a polled work item's `secret`: "
        "`Authorization: Bearer mwork_…`.",
    ),
}


class AgentCredentialScheme(OpenApiAuthenticationExtension):
    target_class = "sessions.authentication.AgentCredentialAuthentication"
    name = [name for name, _ in SCHEMES.values()]

    def get_security_requirement(self, auto_schema):
        accepted = accepted_credentials(auto_schema.view, auto_schema.method)
        return [{SCHEMES[kind][0]: []} for kind in SCHEMES if kind in accepted]

    def get_security_definition(self, auto_schema):
        return [{"type": "http", "scheme": "bearer", "description": text} for _, text in SCHEMES.values()]


class ClosedSerializer(serializers.Serializer):
    """A serializer whose OpenAPI object has ``additionalProperties: false``."""


class ClosedSerializerExtension(OpenApiSerializerExtension):
    target_class = "sessions.api.schema.ClosedSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        return schema
