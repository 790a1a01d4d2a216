"""Membership changes from parallel clients on PostgreSQL: one row per user, never an ownerless parent."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from accounts import services
from accounts.models import Project, ProjectMembership, SectionMembership
from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    SectionFactory,
    SectionMembershipFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {services.issue_token(user=user).secret}")
    return client


def _race(calls) -> list:
    """Run each zero-argument call in its own thread, released together; return the responses in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait(timeout=10)
            results[index] = call()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n, call)) for n, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_two_owners_removing_each_other_at_once_leave_one_owner():
    project = ProjectFactory(slug="duo")
    ana, ben = UserFactory(handle="ana"), UserFactory(handle="ben")
    for user in (ana, ben):
        ProjectMembershipFactory(project=project, user=user, role="owner")
    clients = {user.handle: _client(user) for user in (ana, ben)}
    for _ in range(3):
        responses = _race(
            [
                lambda: clients["ana"].post("/api/v1/projects/duo/members", {"handle": "ben", "active": False}),
                lambda: clients["ben"].post("/api/v1/projects/duo/members", {"handle": "ana", "active": False}),
            ]
        )
        statuses = sorted(r.status_code for r in responses)
        # The winner removes the other; the loser is no longer an owner (403) or would remove the last (409).
        assert statuses[0] == 200 and statuses[1] in (403, 404, 409), statuses
        assert ProjectMembership.objects.filter(project=project, active=True, role="owner").count() == 1
        for user in (ana, ben):
            ProjectMembership.objects.filter(project=project, user=user).update(active=True, role="owner")


@pytest.mark.parametrize("kind", ["projects", "sections"])
def test_two_owners_demoting_each_other_at_once_never_both_succeed(kind):
    """With a third owner the last-owner rule never fires: both demotions passed their (pre-lock) owner check
    and both committed in 29 of 30 of a breaker's runs. The second is judged under the parent's lock now."""
    parent = ProjectFactory(slug="trio") if kind == "projects" else SectionFactory(slug="trio")
    make = ProjectMembershipFactory if kind == "projects" else SectionMembershipFactory
    field = "project" if kind == "projects" else "section"
    model = ProjectMembership if kind == "projects" else SectionMembership
    users = [UserFactory(handle=h) for h in ("dora", "cara", "bea")]
    for user in users:
        make(**{field: parent}, user=user, role="owner")
    clients = {user.handle: _client(user) for user in users}
    demoted = "member" if kind == "projects" else "poster"
    for _ in range(5):
        responses = _race(
            [
                lambda: clients["dora"].post(f"/api/v1/{kind}/trio/members", {"handle": "cara", "role": demoted}),
                lambda: clients["cara"].post(f"/api/v1/{kind}/trio/members", {"handle": "dora", "role": demoted}),
            ]
        )
        assert sorted(r.status_code for r in responses) == [200, 403], [r.content for r in responses]
        owners = set(
            model.objects.filter(**{field: parent}, active=True, role="owner").values_list("user__handle", flat=True)
        )
        assert len(owners & {"dora", "cara"}) == 1 and "bea" in owners
        model.objects.filter(**{field: parent}).update(active=True, role="owner")


def test_a_demoted_owner_cannot_finish_a_change_the_view_let_through():
    """Deterministic: the caller's right was checked (the view's), then a demotion committed, then the
    service runs: it refuses (403) and changes nothing."""
    from accounts.errors import OwnerRequired, ProjectNotFound

    project = ProjectFactory(slug="late")
    dora, cara = UserFactory(handle="dora"), UserFactory(handle="cara")
    for user in (dora, cara):
        ProjectMembershipFactory(project=project, user=user, role="owner")
    services.set_project_member(project=project, actor=dora, handle="cara", role="member")
    with pytest.raises(OwnerRequired):
        services.set_project_member(project=project, actor=cara, handle="dora", role="member")
    with pytest.raises(OwnerRequired):
        services.update_project(project=project, actor=cara, name="taken over")
    project.refresh_from_db()
    assert project.name != "taken over"
    assert ProjectMembership.objects.get(project=project, user=dora).role == "owner"
    services.set_project_member(project=project, actor=dora, handle="cara", active=False)
    with pytest.raises(ProjectNotFound):  # removed from the private project: the 404 a new request gets
        services.set_project_member(project=project, actor=cara, handle="dora", role="member")


def test_an_inactive_owner_does_not_count_as_the_project_keeping_an_owner():
    """A breaker left a project whose only owner could not sign in: the other owner was deactivated, and the
    last active one could still leave."""
    from accounts.errors import LastOwner

    project = ProjectFactory(slug="lone")
    dora, gone = UserFactory(handle="dora"), UserFactory(handle="gone")
    for user in (dora, gone):
        ProjectMembershipFactory(project=project, user=user, role="owner")
    type(gone).objects.filter(pk=gone.pk).update(is_active=False)
    with pytest.raises(LastOwner):
        services.set_project_member(project=project, actor=dora, handle="dora", active=False)
    response = _client(dora).post("/api/v1/projects/lone/members", {"handle": "dora", "active": False})
    assert response.status_code == 409 and response.json()["error"]["details"]["reason"] == "last_owner"


def test_parallel_adds_of_the_same_user_make_one_membership():
    section = SectionFactory(slug="busy")
    owner = UserFactory(handle="olga")
    SectionMembershipFactory(section=section, user=owner, role="owner")
    newcomer = UserFactory(handle="nia")
    clients = [_client(owner) for _ in range(6)]
    responses = _race(
        [(lambda c=c: c.post("/api/v1/sections/busy/members", {"handle": "nia", "role": "reader"})) for c in clients]
    )
    assert sorted(r.status_code for r in responses) == [200] * 5 + [201]
    assert SectionMembership.objects.filter(section=section, user=newcomer).count() == 1


def test_parallel_demotions_never_leave_a_project_without_an_active_owner():
    project = ProjectFactory(slug="trio")
    owners = [UserFactory(handle=f"owner{n}") for n in range(3)]
    for user in owners:
        ProjectMembershipFactory(project=project, user=user, role="owner")
    actor = _client(owners[0])
    responses = _race(
        [
            (lambda h=user.handle: actor.post("/api/v1/projects/trio/members", {"handle": h, "role": "member"}))
            for user in owners
        ]
    )
    # Every outcome is a serial order's: owner0 demoting themselves first makes the other two 403 (no longer
    # an owner, judged under the lock); after both others, their own demotion is the last owner's 409.
    assert sorted(r.status_code for r in responses) in ([200, 200, 409], [200, 403, 403], [200, 200, 403])
    assert ProjectMembership.objects.filter(project=project, active=True, role="owner").count() >= 1


def test_parallel_creates_of_one_slug_make_one_project_and_one_owner():
    users = [UserFactory(handle=f"founder{n}") for n in range(5)]
    clients = [_client(user) for user in users]
    responses = _race([(lambda c=c: c.post("/api/v1/projects", {"slug": "Same-Slug"})) for c in clients])
    assert sorted(r.status_code for r in responses) == [201] + [409] * 4
    assert ProjectMembership.objects.filter(project__slug__iexact="same-slug").count() == 1


def test_a_create_of_a_slug_whose_rename_is_in_flight_waits_and_then_sees_it_retired():
    """The rename that frees `apollo` has updated the row but not committed; a create of `apollo` then waits on
    the slug's unique index, and once the rename commits it must see the retirement (the check runs after the
    insert, accounts.services._save_parent) — a check before the insert would have let it through."""
    from django.db import transaction

    from accounts.errors import SlugTaken

    owner, stranger = UserFactory(handle="olivia"), UserFactory(handle="sam")
    project = ProjectFactory(slug="apollo")
    ProjectMembershipFactory(project=project, user=owner, role="owner")
    renamed, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def rename():
        try:
            with transaction.atomic():
                services.update_project(project=project, actor=owner, slug="artemis")
                renamed.set()
                release.wait(timeout=10)  # the create is blocked on the index by now
        finally:
            connection.close()

    def create():
        try:
            renamed.wait(timeout=10)
            try:
                outcome["created"] = services.create_project(creator=stranger, slug="apollo")
            except SlugTaken as exc:
                outcome["refused"] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=rename), threading.Thread(target=create)]
    for thread in threads:
        thread.start()
    renamed.wait(timeout=10)
    threading.Event().wait(0.5)  # let the create reach its insert and block on the rename's index entry
    assert not outcome, "the create did not wait for the rename in flight"
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert "refused" in outcome and "created" not in outcome
    assert list(Project.objects.values_list("slug", flat=True)) == ["artemis"]


def test_a_parent_deleted_between_the_lookup_and_the_lock_is_a_404_not_a_500():
    """The view looked the project up, then the back office deleted it, then the service locked: the lock's
    `.get()` raised DoesNotExist (a 500)."""
    from accounts.errors import ProjectNotFound, SectionNotFound

    project, section = ProjectFactory(slug="gone-p"), SectionFactory(slug="gone-s")
    dora = UserFactory(handle="dora")
    ProjectMembershipFactory(project=project, user=dora, role="owner")
    SectionMembershipFactory(section=section, user=dora, role="owner")
    type(project).objects.filter(pk=project.pk).delete()
    type(section).objects.filter(pk=section.pk).delete()
    with pytest.raises(ProjectNotFound):
        services.set_project_member(project=project, actor=dora, handle="dora", role="member")
    with pytest.raises(ProjectNotFound):
        services.update_project(project=project, actor=None, name="x")
    with pytest.raises(SectionNotFound):
        services.set_section_member(section=section, actor=None, handle="dora", active=False)
