"""Agent access (SPEC §5 "Environments, sessions and work").

The package is `sessions`, as the SPEC names it, but Django's own `django.contrib.sessions` (which the back
office needs for logins) already owns the app label ``sessions``; this app's label is ``agent_sessions``
(tables ``agent_sessions_*``, migrations ``agent_sessions.0001_…``). See docs/agent-access.md.
"""

from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Agent access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the OpenAPI extensions (security schemes, closed request bodies).
        from sessions.api import schema  # noqa: F401
