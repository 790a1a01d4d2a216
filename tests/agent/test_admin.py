"""The back office for agent access (SPEC §6): metadata only, keys by prefix, "archive session" and "revoke
keys" through the same services as the API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions.models import EnvironmentKey, Session, Work

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


def test_staff_see_environments_keys_sessions_and_work_as_metadata_without_secrets(
    staff_client, environment, env_key, run_session, notes_store
):
    running = run_session(notes_store)
    pages = [
        reverse("admin:agent_sessions_environment_changelist"),
        reverse("admin:agent_sessions_environment_change", args=[environment.pk]),
        reverse("admin:agent_sessions_environmentkey_changelist"),
        reverse("admin:agent_sessions_session_changelist"),
        reverse("admin:agent_sessions_session_change", args=[running.session.pk]),
        reverse("admin:agent_sessions_work_changelist"),
        reverse("admin:agent_sessions_work_change", args=[running.work.pk]),
    ]
    key = EnvironmentKey.objects.get()
    for url in pages:
        response = staff_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert env_key.secret not in html and running.token not in html and key.digest not in html
    assert key.prefix in staff_client.get(pages[2]).content.decode()
    session_page = staff_client.get(pages[4]).content.decode()
    assert "/mnt/memory/team-notes" in session_page and "running" in session_page


def test_the_admin_adds_changes_and_deletes_nothing(staff_client, environment, run_session, notes_store):
    running = run_session(notes_store)
    for model in ("environment", "environmentkey", "session", "work"):
        assert staff_client.get(reverse(f"admin:agent_sessions_{model}_add")).status_code == 403
    url = reverse("admin:agent_sessions_session_change", args=[running.session.pk])
    staff_client.post(url, {"title": "changed by staff"})
    assert Session.objects.get(pk=running.session.pk).title is None
    assert (
        staff_client.get(reverse("admin:agent_sessions_session_delete", args=[running.session.pk])).status_code == 403
    )


def test_archive_session_action_stops_its_work_through_the_service(staff_client, run_session, notes_store):
    running = run_session(notes_store)
    response = staff_client.post(
        reverse("admin:agent_sessions_session_changelist"),
        {"action": "archive", "_selected_action": [str(running.session.pk)]},
        follow=True,
    )
    assert response.status_code == 200 and "Archived" in response.content.decode()
    session = Session.objects.get(pk=running.session.pk)
    assert session.archived_at is not None
    work = Work.objects.get(pk=running.work.pk)
    assert work.state == "stopped" and work.claim_id is None
    assert (
        running.api.post(f"/api/v1/memory_stores/{notes_store.pk}/memories", {"path": "/a", "content": "x"}).json()[
            "error"
        ]["details"]["reason"]
        == "lease_expired"
    )


def test_revoke_keys_action_revokes_through_the_service(staff_client, environment, env_key):
    staff_client.post(
        reverse("admin:agent_sessions_environmentkey_changelist"),
        {"action": "revoke", "_selected_action": [str(env_key.key.pk)]},
        follow=True,
    )
    assert EnvironmentKey.objects.get().revoked_at is not None
    from tests.agent.conftest import bearer

    assert bearer(env_key.secret).get(f"/api/v1/environments/{environment.pk}/work/poll").status_code == 401


def test_staff_without_the_change_permission_get_no_archive_action(client, environment, run_session, notes_store):
    from django.contrib.auth.models import Permission

    from tests.factories import UserFactory

    viewer = UserFactory(handle="viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_session", "view_environmentkey"]))
    client.force_login(viewer)
    running = run_session(notes_store)
    page = client.get(reverse("admin:agent_sessions_session_changelist"))
    assert page.status_code == 200 and 'value="archive"' not in page.content.decode()
    client.post(
        reverse("admin:agent_sessions_session_changelist"),
        {"action": "archive", "_selected_action": [str(running.session.pk)]},
    )
    assert Session.objects.get(pk=running.session.pk).archived_at is None
