"""URL map (SPEC §1). Routes never need a trailing slash."""

from django.contrib import admin
from django.urls import include, path

from config import health, mcp_server
from config.admin import view_on_site
from config.openapi import OpenApiDocumentView

handler400 = "config.errors.handler400"
handler403 = "config.errors.handler403"
handler404 = "config.errors.handler404"
handler500 = "config.errors.handler500"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("openapi.yaml", OpenApiDocumentView.as_view(), name="openapi"),
    path("mcp", mcp_server.endpoint, name="mcp"),
    # the admin's "view on site" route, mounted first: an id its model cannot hold is a 404, not a 500
    path("backoffice/r/<int:content_type_id>/<path:object_id>/", admin.site.admin_view(view_on_site)),
    path("backoffice/", admin.site.urls),
    path("api/v1/", include("accounts.api.urls")),
    path("api/v1/", include("memories.api.imports")),  # memories/imports… before memories/<pk>
    path("api/v1/", include("stores.api.urls")),
    path("api/v1/", include("memories.api.urls")),
    path("api/v1/", include("versions.api.urls")),
    path("api/v1/", include("sessions.api.urls")),
    path("", include("legacy.urls")),
    path("", include("stores.api.directory_urls")),
]
