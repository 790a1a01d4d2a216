"""Accounts endpoints under /api/v1 (SPEC §3): me, tokens, projects, sections and members. No trailing slashes."""

from django.urls import path

from accounts.api import views

urlpatterns = [
    path("me", views.MeView.as_view(), name="me"),
    path("me/tokens", views.TokenCollectionView.as_view(), name="tokens"),
    path("me/tokens/<str:pk>", views.TokenDetailView.as_view(), name="token-detail"),
    path("projects", views.ProjectCollectionView.as_view(), name="projects"),
    path("projects/<str:ref>", views.ProjectDetailView.as_view(), name="project-detail"),
    path("projects/<str:ref>/members", views.ProjectMembersView.as_view(), name="project-members"),
    path("sections", views.SectionCollectionView.as_view(), name="sections"),
    path("sections/<str:ref>", views.SectionDetailView.as_view(), name="section-detail"),
    path("sections/<str:ref>/members", views.SectionMembersView.as_view(), name="section-members"),
]
