"""The cast of the stores stories: every principal of SPEC §3's table, and their clients."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from accounts.models import Posting, Project, Section, User
from stores.models import Store
from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    ReaderGrantFactory,
    SectionFactory,
    SectionMembershipFactory,
    StoreFactory,
    UserFactory,
    board_store,
    project_store,
)


@dataclass
class World:
    """One user store, one project store, one members-only board and one open board, all of one visibility."""

    visibility: str
    users: dict[str, User] = field(default_factory=dict)
    stores: dict[str, Store] = field(default_factory=dict)
    project: Project | None = None
    section: Section | None = None
    open_section: Section | None = None


def build_world(visibility: str) -> World:
    """Create every principal of the access matrix around stores of `visibility` ("public" | "private")."""
    world = World(visibility=visibility)
    u = world.users
    for name in [
        "owner",
        "reader",
        "revoked_reader",
        "stranger",
        "project_owner",
        "project_member",
        "project_inactive_member",
        "project_inactive_owner",
        "section_owner",
        "section_poster",
        "section_non_poster",
        "section_inactive_member",
    ]:
        u[name] = UserFactory(handle=name.replace("_", "-"))
    u["staff"] = UserFactory(handle="staff", is_staff=True, is_superuser=True)

    user_store = StoreFactory(owner=u["owner"], name="Owner store", visibility=visibility)
    ReaderGrantFactory(store=user_store, user=u["reader"], active=True)
    ReaderGrantFactory(store=user_store, user=u["revoked_reader"], active=False)

    world.project = ProjectFactory(slug="Apollo", visibility=visibility)
    ProjectMembershipFactory(project=world.project, user=u["project_owner"], role="owner")
    ProjectMembershipFactory(project=world.project, user=u["project_member"])
    ProjectMembershipFactory(project=world.project, user=u["project_inactive_member"], active=False)
    ProjectMembershipFactory(project=world.project, user=u["project_inactive_owner"], role="owner", active=False)

    world.section = SectionFactory(slug="NeedHelp", visibility=visibility, posting=Posting.MEMBERS)
    SectionMembershipFactory(section=world.section, user=u["section_owner"], role="owner")
    SectionMembershipFactory(section=world.section, user=u["section_poster"], can_post=True)
    SectionMembershipFactory(section=world.section, user=u["section_non_poster"], can_post=False)
    SectionMembershipFactory(section=world.section, user=u["section_inactive_member"], active=False)

    world.open_section = SectionFactory(slug="Global", visibility=visibility, posting=Posting.OPEN)

    world.stores = {
        "user": user_store,
        "project": project_store(world.project, name="Apollo store"),
        "board": board_store(world.section, name="NeedHelp store"),
        "open_board": board_store(world.open_section, name="Global store"),
    }
    return world


@pytest.fixture
def make_world(db):
    return build_world


@dataclass
class Cast:
    """Frequently used small cast: a project with an owner and a member, a members-only section."""

    project: Project
    section: Section
    project_owner: User
    project_member: User
    section_owner: User


@pytest.fixture
def cast(db) -> Cast:
    project = ProjectFactory(slug="apollo", name="Apollo")
    section = SectionFactory(slug="needhelp", name="Need Help")
    project_owner, project_member, section_owner = (
        UserFactory(handle="p-owner"),
        UserFactory(handle="p-member"),
        UserFactory(handle="s-owner"),
    )
    ProjectMembershipFactory(project=project, user=project_owner, role="owner")
    ProjectMembershipFactory(project=project, user=project_member)
    SectionMembershipFactory(section=section, user=section_owner, role="owner")
    return Cast(project, section, project_owner, project_member, section_owner)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The matrix creates a dozen users per test; PBKDF2 would dominate the run time (no test uses passwords)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
