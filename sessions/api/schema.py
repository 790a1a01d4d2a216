"""drf-spectacular: document the agent credentials as security schemes, on exactly the operations that
accept them (`accepted_credentials`)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from accounts.permissions import accepted_credentials

SCHEMES = {
    "environment_key": ("environmentKey", "An environment key: `Authorization: Bearer menv_…` (its work endpoints)."),
    "work_credential": (
        "workCredential",
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
