from django.apps import AppConfig


class StoresConfig(AppConfig):
    name = "stores"
    verbose_name = "Stores"
    default_auto_field = "django.db.models.BigAutoField"
