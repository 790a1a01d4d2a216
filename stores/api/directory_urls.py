"""The public directory (SPEC §8), outside /api/v1: `/memories` and `/memories.md|.json|.yaml`."""

from django.urls import path

from stores.api.directory import PublicDirectoryFormatView, PublicDirectoryView

urlpatterns = [
    path("memories", PublicDirectoryView.as_view(), name="public-directory"),
    path("memories.<str:format>", PublicDirectoryFormatView.as_view(), name="public-directory-format"),
]
