from django.apps import AppConfig


class BackofficeConfig(AppConfig):
    name = "backoffice"
    verbose_name = "Back office"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        admin.site.site_header = "Memories back office"
        admin.site.site_title = "Memories back office"
        admin.site.index_title = "Store metadata, accounts and audit"
        # The service has no HTML home page ("/" is a JSON 404), so no "View site" link to it.
        admin.site.site_url = None
