"""Every endpoint refuses a query parameter it does not declare: 400 `invalid_request_error` naming it, and
nothing is written (SPEC §2: unknown fields get 400 naming the field; docs/memory-stores.md promises it for
the Memory Stores surface). Writes used to ignore them — `POST …/note?generation=5` stored the note as if
the parameter meant nothing. Agent access has its own test (tests/agent/test_bad_input.py).
"""

from __future__ import annotations

import pytest

from accounts.models import ApiToken, Project, Section, SectionMembership
from memories.models import Entry, StoreImport
from stores.models import ReaderGrant, Store
from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    SectionFactory,
    SectionMembershipFactory,
    UserFactory,
)
from tests.log.conftest import fill, put_summary
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db


def state() -> tuple:
    """What any of these requests could change, counted."""
    return (
        Store.objects.count(),
        Store.objects.filter(archived_at__isnull=False).count(),
        Entry.objects.count(),
        Entry.objects.filter(body_md__isnull=True).count(),
        Memory.objects.count(),
        Version.objects.count(),
        Version.objects.filter(redacted_at__isnull=False).count(),
        ReaderGrant.objects.count(),
        ApiToken.objects.filter(revoked_at__isnull=False).count(),
        ApiToken.objects.count(),
        Project.objects.count(),
        tuple(Section.objects.order_by("pk").values_list("name", flat=True)),
        SectionMembership.objects.count(),
        StoreImport.objects.count(),
        tuple(Store.objects.order_by("pk").values_list("name", flat=True)),
    )


@pytest.fixture
def world(owner, owner_client, private_store):
    fill(private_store, 4)
    put_summary(private_store, "0-1")
    created = owner_client.post(
        f"/api/v1/memory_stores/{private_store.pk}/memories", {"path": "/a.md", "content": "one"}, format="json"
    ).json()
    owner_client.post(
        f"/api/v1/memory_stores/{private_store.pk}/memories/{created['id']}", {"content": "two"}, format="json"
    )
    first_version = Version.objects.filter(memory_id=created["id"]).order_by("created_at").first()
    project = ProjectFactory()
    ProjectMembershipFactory(project=project, user=owner, role="owner")
    section = SectionFactory()
    SectionMembershipFactory(section=section, user=owner, role="owner")
    UserFactory(handle="friend")
    token = owner_client.post("/api/v1/me/tokens", {"name": "spare", "scopes": ["agent:read"]}, format="json").json()[
        "data"
    ]
    return {
        "store": private_store,
        "version": first_version,
        "project": project,
        "section": section,
        "token": token,
    }


def requests(world):
    store, version = world["store"].pk, world["version"].pk
    project, token = world["project"].slug, world["token"]["id"]
    yield "get", f"/api/v1/memories/{store}", None
    yield "patch", f"/api/v1/memories/{store}", {"name": "renamed"}
    yield "post", f"/api/v1/memories/{store}/note", {"body_md": "hello"}
    yield "post", f"/api/v1/memories/{store}/compact", {"range": "2-3", "summary_md": "x", "model": "m"}
    yield "post", f"/api/v1/memories/{store}/forget", {"range": "0-1", "generation": 1}
    yield "post", f"/api/v1/memories/{store}/entries/0/redact", {"reason": "r"}
    yield "post", f"/api/v1/memories/{store}/share", {"handle": "friend", "active": True}
    yield "post", "/api/v1/memories", {"scope": "user", "subject": "me"}
    yield "post", "/api/v1/memory_stores", {"name": "new"}
    yield "get", f"/api/v1/memory_stores/{store}", None
    yield "post", f"/api/v1/memory_stores/{store}", {"name": "renamed"}
    yield "delete", f"/api/v1/memory_stores/{store}", None
    yield "post", f"/api/v1/memory_stores/{store}/archive", None
    yield "post", f"/api/v1/memory_stores/{store}/memory_versions/{version}/redact", None
    yield "get", "/api/v1/me", None
    yield "post", "/api/v1/me/tokens", {"name": "another", "scopes": ["agent:read"]}
    yield "delete", f"/api/v1/me/tokens/{token}", None
    yield "post", "/api/v1/projects", {"slug": "fresh", "name": "Fresh"}
    yield "get", f"/api/v1/projects/{project}", None
    yield "patch", f"/api/v1/projects/{project}", {"name": "Renamed"}
    yield "post", f"/api/v1/projects/{project}/members", {"handle": "friend", "active": True}
    section = world["section"].slug
    yield "get", f"/api/v1/sections/{section}", None
    yield "patch", f"/api/v1/sections/{section}", {"name": "Renamed"}
    yield "post", f"/api/v1/sections/{section}/members", {"handle": "friend", "active": True}


@pytest.mark.parametrize("name", ["zzz", "format"])  # `format` too: DRF's ?format= override is off (a 404)
def test_every_endpoint_without_query_parameters_refuses_one_and_changes_nothing(owner_client, world, name):
    before = state()
    for method, path, body in requests(world):
        response = getattr(owner_client, method)(f"{path}?{name}=xml", body, format="json")
        assert response.status_code == 400, (method, path, response.status_code, response.content[:300])
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and name in error["message"], (method, path, error)
        assert state() == before, (method, path)
