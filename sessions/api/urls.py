"""Agent-access routes under /api/v1/ (SPEC §5). No route needs a trailing slash (the SDK never sends one);
`work/poll` and `work/stats` come before `work/<work_id>`."""

from django.urls import path

from sessions.api import environments, sessions, work

ENV = "environments/<str:environment_id>"

urlpatterns = [
    path("environments", environments.EnvironmentCollectionView.as_view(), name="environments"),
    path(ENV, environments.EnvironmentDetailView.as_view(), name="environment"),
    path(f"{ENV}/archive", environments.EnvironmentArchiveView.as_view(), name="environment-archive"),
    path(f"{ENV}/keys", environments.EnvironmentKeyCollectionView.as_view(), name="environment-keys"),
    path(f"{ENV}/keys/<str:key_id>", environments.EnvironmentKeyDetailView.as_view(), name="environment-key"),
    path(f"{ENV}/work", work.WorkCollectionView.as_view(), name="work-list"),
    path(f"{ENV}/work/poll", work.WorkPollView.as_view(), name="work-poll"),
    path(f"{ENV}/work/stats", work.WorkStatsView.as_view(), name="work-stats"),
    path(f"{ENV}/work/<str:work_id>", work.WorkDetailView.as_view(), name="work"),
    path(f"{ENV}/work/<str:work_id>/ack", work.WorkAckView.as_view(), name="work-ack"),
    path(f"{ENV}/work/<str:work_id>/heartbeat", work.WorkHeartbeatView.as_view(), name="work-heartbeat"),
    path(f"{ENV}/work/<str:work_id>/stop", work.WorkStopView.as_view(), name="work-stop"),
    path("sessions", sessions.SessionCollectionView.as_view(), name="sessions"),
    path("sessions/<str:session_id>", sessions.SessionDetailView.as_view(), name="session"),
    path("sessions/<str:session_id>/archive", sessions.SessionArchiveView.as_view(), name="session-archive"),
    path("sessions/<str:session_id>/resources", sessions.SessionResourcesView.as_view(), name="session-resources"),
]
