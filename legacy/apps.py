from django.apps import AppConfig


class LegacyConfig(AppConfig):
    name = "legacy"
    verbose_name = "Legacy flat records (pre-2.0) and the 0041 archive"
    default_auto_field = "django.db.models.BigAutoField"
