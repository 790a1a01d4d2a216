"""Legacy routes: the retired /api/v1 flat-record endpoints and the /docs/memories guide."""

from django.urls import include, path

from legacy.views import memories_guide

urlpatterns = [
    path("docs/memories", memories_guide, name="memories-guide"),
    path("api/v1/", include("legacy.api.urls")),
]
