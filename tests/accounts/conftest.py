"""The cast of the projects/sections stories: an owner, an active member, an ex-member, a stranger, staff."""

from __future__ import annotations

import pytest

from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    SectionFactory,
    SectionMembershipFactory,
    UserFactory,
)

ROLES = ["owner", "member", "stranger", "staff", "anonymous"]


@pytest.fixture
def cast(db, make_client):
    """``clients[role]`` for every role in ROLES; `member` is an active member, `former` an inactive one."""
    users = {
        "owner": UserFactory(handle="olivia"),
        "member": UserFactory(handle="mateo"),
        "former": UserFactory(handle="fatima"),
        "stranger": UserFactory(handle="sam"),
        "staff": UserFactory(handle="stella", is_staff=True, is_superuser=True),
    }
    clients = {role: make_client(user) for role, user in users.items()}
    clients["anonymous"] = make_client(None)
    return users, clients


def make_project(users, *, visibility: str = "private", slug: str = "apollo"):
    """A project owned by `olivia`, with `mateo` active and `fatima` inactive."""
    project = ProjectFactory(slug=slug, name=slug.title(), visibility=visibility)
    ProjectMembershipFactory(project=project, user=users["owner"], role="owner")
    ProjectMembershipFactory(project=project, user=users["member"], role="member")
    ProjectMembershipFactory(project=project, user=users["former"], role="owner", active=False)
    return project


def make_section(users, *, visibility: str = "private", slug: str = "needhelp"):
    """A section owned by `olivia`, with `mateo` an active poster and `fatima` an inactive owner."""
    section = SectionFactory(slug=slug, name="Need help", visibility=visibility)
    SectionMembershipFactory(section=section, user=users["owner"], role="owner")
    SectionMembershipFactory(section=section, user=users["member"], role="member", can_post=True)
    SectionMembershipFactory(section=section, user=users["former"], role="owner", active=False)
    return section
