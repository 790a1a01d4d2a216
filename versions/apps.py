from django.apps import AppConfig


class VersionsConfig(AppConfig):
    """File memories and their immutable versions: the Memory Stores surface (SPEC §5)."""

    name = "versions"
    default_auto_field = "django.db.models.BigAutoField"
