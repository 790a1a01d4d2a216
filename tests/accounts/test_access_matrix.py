"""Who may do what on /projects and /sections (SPEC §3): owner, member, stranger, staff, anonymous.

Unseen (private, not an active member) is 404 with the body of a missing one; seen but lacking the right
is 403; anonymous is 401 wherever a token is needed. Staff status grants nothing here but section creation.
"""

from __future__ import annotations

import pytest

from accounts.models import ProjectMembership, SectionMembership
from tests.accounts.conftest import ROLES, make_project, make_section

pytestmark = pytest.mark.django_db

MAKE = {"projects": make_project, "sections": make_section}
MEMBERSHIP = {"projects": ProjectMembership, "sections": SectionMembership}

# (method, suffix, body) → expected status per role, for a private and a public parent.
MATRIX = {
    ("get", "", None): {
        "private": {"owner": 200, "member": 200, "stranger": 404, "staff": 404, "anonymous": 404},
        "public": {"owner": 200, "member": 200, "stranger": 200, "staff": 200, "anonymous": 200},
    },
    ("patch", "", (("name", "Renamed"),)): {
        "private": {"owner": 200, "member": 403, "stranger": 404, "staff": 404, "anonymous": 401},
        "public": {"owner": 200, "member": 403, "stranger": 403, "staff": 403, "anonymous": 401},
    },
    ("get", "/members", None): {
        "private": {"owner": 200, "member": 200, "stranger": 404, "staff": 404, "anonymous": 401},
        "public": {"owner": 200, "member": 200, "stranger": 403, "staff": 403, "anonymous": 401},
    },
    ("post", "/members", (("handle", "sam"),)): {
        "private": {"owner": 201, "member": 403, "stranger": 404, "staff": 404, "anonymous": 401},
        "public": {"owner": 201, "member": 403, "stranger": 403, "staff": 403, "anonymous": 401},
    },
}
CASES = [
    (kind, method, suffix, body, visibility, role, status)
    for kind in MAKE
    for (method, suffix, body), table in MATRIX.items()
    for visibility, row in table.items()
    for role, status in row.items()
]


@pytest.mark.parametrize(("kind", "method", "suffix", "body", "visibility", "role", "status"), CASES)
def test_access_matrix(cast, kind, method, suffix, body, visibility, role, status):
    users, clients = cast
    parent = MAKE[kind](users, visibility=visibility)
    memberships_before = sorted(MEMBERSHIP[kind].objects.values_list("user__handle", "role", "active"))
    call = getattr(clients[role], method)
    url = f"/api/v1/{kind}/{parent.slug}{suffix}"
    response = call(url, dict(body)) if body else call(url)
    assert response.status_code == status, response.content
    if status >= 400:
        error_type = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}[status]
        assert response.json()["error"]["type"] == error_type
        parent.refresh_from_db()
        assert parent.name != "Renamed"
        assert sorted(MEMBERSHIP[kind].objects.values_list("user__handle", "role", "active")) == memberships_before


@pytest.mark.parametrize("kind", list(MAKE))
@pytest.mark.parametrize("suffix", ["", "/members"])
def test_an_unseen_parent_is_identical_to_a_missing_one(cast, kind, suffix):
    users, clients = cast
    parent = MAKE[kind](users, visibility="private")
    for ref in (parent.slug, str(parent.pk)):
        unseen = clients["stranger"].get(f"/api/v1/{kind}/{ref}{suffix}")
        missing = clients["stranger"].get(f"/api/v1/{kind}/no-such-thing{suffix}")
        malformed = clients["stranger"].get(f"/api/v1/{kind}/{'x' * 300}{suffix}")
        assert unseen.status_code == missing.status_code == malformed.status_code == 404
        strip = lambda r: {**r.json(), "request_id": None}  # noqa: E731
        assert strip(unseen) == strip(missing) == strip(malformed)


@pytest.mark.parametrize("kind", list(MAKE))
def test_an_inactive_owner_has_no_rights_at_all(cast, make_client, kind):
    users, _ = cast
    parent = MAKE[kind](users, visibility="private")
    former = make_client(users["former"])
    assert former.get(f"/api/v1/{kind}/{parent.slug}").status_code == 404
    assert former.post(f"/api/v1/{kind}/{parent.slug}/members", {"handle": "sam"}).status_code == 404


@pytest.mark.parametrize("kind", list(MAKE))
def test_lists_show_public_parents_and_your_own_and_never_unseen_ones(cast, kind):
    users, clients = cast
    private = MAKE[kind](users, visibility="private", slug="hidden")
    public = MAKE[kind](users, visibility="public", slug="open")
    seen = {role: [row["slug"] for row in clients[role].get(f"/api/v1/{kind}").json()["data"]] for role in ROLES}
    assert seen["owner"] == seen["member"] == [public.slug, private.slug]  # newest first
    assert seen["stranger"] == seen["staff"] == seen["anonymous"] == [public.slug]
    mine = clients["stranger"].get(f"/api/v1/{kind}?member=true").json()["data"]
    assert mine == []
    roles = {row["slug"]: row["role"] for row in clients["member"].get(f"/api/v1/{kind}?member=true").json()["data"]}
    assert roles == {"open": "member" if kind == "projects" else "poster", "hidden": roles["hidden"]}


def test_any_user_may_create_a_project_and_becomes_its_owner(cast):
    _, clients = cast
    for role in ("stranger", "staff"):
        response = clients[role].post("/api/v1/projects", {"slug": f"by-{role}"})
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["data"]["role"] == "owner" and body["data"]["visibility"] == "private"
        assert body["data"]["name"] == f"by-{role}" and body["meta"] == {}
    assert clients["anonymous"].post("/api/v1/projects", {"slug": "by-nobody"}).status_code == 401


def test_only_staff_may_create_a_section(cast):
    users, clients = cast
    for role in ("owner", "member", "stranger"):
        response = clients[role].post("/api/v1/sections", {"slug": "general"})
        assert response.status_code == 403
        assert response.json()["error"]["type"] == "permission_error"
    assert clients["anonymous"].post("/api/v1/sections", {"slug": "general"}).status_code == 401
    created = clients["staff"].post("/api/v1/sections", {"slug": "general", "open_to_all_posters": True})
    assert created.status_code == 201
    data = created.json()["data"]
    assert data["role"] == "owner" and data["visibility"] == "private" and data["open_to_all_posters"] is True
    assert SectionMembership.objects.get(section__slug="general").user == users["staff"]


def test_read_only_tokens_cannot_write_and_say_which_scope_is_missing(cast, make_client):
    users, _ = cast
    project = make_project(users)
    reader = make_client(users["owner"], scopes=["agent:read"])
    assert reader.get(f"/api/v1/projects/{project.slug}").status_code == 200
    response = reader.patch(f"/api/v1/projects/{project.slug}", {"name": "x"})
    assert response.status_code == 403
    assert "memories:write" in response.json()["error"]["message"]
    assert reader.post("/api/v1/projects", {"slug": "nope"}).status_code == 403
