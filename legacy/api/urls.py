"""Retired flat-record routes under /api/v1/ (SPEC §7); see docs/migration-0041.md for the list."""

from django.urls import path, re_path

from legacy.api.views import RetiredCatchAllView, RetiredEndpointView

retired = RetiredEndpointView.as_view()

urlpatterns = [
    path("records", retired, name="retired-records"),
    path("records/<str:record_ref>", retired, name="retired-record"),
    path("records/<str:record_ref>/<path:subpath>", retired, name="retired-record-subresource"),
    path("assessments", retired, name="retired-assessments"),
    path("assessments/<str:assessment_ref>", retired, name="retired-assessment"),
    path("r/<str:key>", retired, name="retired-key-shortcut"),
    # Anything else under the retired prefixes: trailing slashes, `records.json`, `r/<key>/…`.
    re_path(r"^(?:records|assessments)(?:[/.].*)?$", RetiredCatchAllView.as_view()),
    re_path(r"^r(?:/.*)?$", RetiredCatchAllView.as_view()),
]
