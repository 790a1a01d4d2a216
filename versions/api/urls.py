"""Memory Stores routes under /api/v1/ (SPEC §5). No route needs a trailing slash (the SDK never sends one)."""

from django.urls import path

from versions.api import views

urlpatterns = [
    path("memory_stores", views.MemoryStoreCollectionView.as_view(), name="memory-stores"),
    path("memory_stores/<str:store_id>", views.MemoryStoreDetailView.as_view(), name="memory-store"),
    path("memory_stores/<str:store_id>/archive", views.MemoryStoreArchiveView.as_view(), name="memory-store-archive"),
    path("memory_stores/<str:store_id>/memories", views.MemoryCollectionView.as_view(), name="memory-store-memories"),
    path(
        "memory_stores/<str:store_id>/memories/<str:memory_id>",
        views.MemoryDetailView.as_view(),
        name="memory-store-memory",
    ),
    path(
        "memory_stores/<str:store_id>/memory_versions",
        views.MemoryVersionCollectionView.as_view(),
        name="memory-store-versions",
    ),
    path(
        "memory_stores/<str:store_id>/memory_versions/<str:version_id>",
        views.MemoryVersionDetailView.as_view(),
        name="memory-store-version",
    ),
    path(
        "memory_stores/<str:store_id>/memory_versions/<str:version_id>/redact",
        views.MemoryVersionRedactView.as_view(),
        name="memory-store-version-redact",
    ),
]
