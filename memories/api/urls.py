"""Memories log endpoints under /api/v1/memories/{id}/… (filled by the log issue)."""

urlpatterns: list = []
