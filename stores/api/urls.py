"""Store-level Memories endpoints and universal search, under /api/v1 (SPEC §4, §8).

`memories/resolve` comes before `memories/<pk>`; the log endpoints (`memories/<pk>/note`, …) live in
`memories/api/urls.py`. No route needs a trailing slash.
"""

from django.urls import path

from stores.api import views

urlpatterns = [
    path("memories", views.StoreCollectionView.as_view(), name="memories-list"),
    path("memories/resolve", views.StoreResolveView.as_view(), name="memories-resolve"),
    path("memories/<str:pk>", views.StoreDetailView.as_view(), name="memories-detail"),
    path("memories/<str:pk>/readers", views.StoreReadersView.as_view(), name="memories-readers"),
    path("memories/<str:pk>/share", views.StoreShareView.as_view(), name="memories-share"),
    path("search", views.SearchView.as_view(), name="search"),
]
