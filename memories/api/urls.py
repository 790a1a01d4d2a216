"""Memories log endpoints under /api/v1/memories/{id}/… (SPEC §4). No trailing slashes."""

from django.urls import path

from memories.api import views

urlpatterns = [
    path("memories/<str:pk>/note", views.NoteView.as_view(), name="memories-note"),
    path("memories/<str:pk>/wake", views.WakeView.as_view(), name="memories-wake"),
    path("memories/<str:pk>/nap", views.NapView.as_view(), name="memories-nap"),
    path("memories/<str:pk>/compact", views.CompactView.as_view(), name="memories-compact"),
    path("memories/<str:pk>/zoom", views.ZoomView.as_view(), name="memories-zoom"),
    path("memories/<str:pk>/recall", views.RecallView.as_view(), name="memories-recall"),
    path("memories/<str:pk>/forget", views.ForgetView.as_view(), name="memories-forget"),
    path("memories/<str:pk>/entries/<str:seq>/redact", views.RedactView.as_view(), name="memories-redact"),
    path("memories/<str:pk>/export", views.ExportView.as_view(), name="memories-export"),
]
