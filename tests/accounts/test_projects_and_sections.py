"""Creating, updating and staffing projects and sections through the API (SPEC §3)."""

from __future__ import annotations

import pytest

from accounts.models import Project, ProjectMembership, RetiredSlug, Section, SectionMembership
from stores.models import Store
from tests.accounts.conftest import make_project, make_section
from tests.factories import ProjectFactory, ProjectMembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_created_project_can_be_found_by_id_and_by_slug_in_any_case(cast):
    _, clients = cast
    created = clients["stranger"].post("/api/v1/projects", {"slug": "Apollo-11", "name": "Apollo 11"}).json()["data"]
    for ref in (created["id"], "apollo-11", "APOLLO-11"):
        assert clients["stranger"].get(f"/api/v1/projects/{ref}").json()["data"] == created
    assert set(created) == {"id", "slug", "name", "visibility", "created_at", "role"}


def test_a_public_project_is_public_only_when_asked(cast):
    _, clients = cast
    created = clients["owner"].post("/api/v1/projects", {"slug": "open", "visibility": "public"}).json()["data"]
    assert created["visibility"] == "public"
    assert clients["anonymous"].get("/api/v1/projects/open").json()["data"]["role"] is None


@pytest.mark.parametrize("slug", ["apollo", "APOLLO", "Apollo"])
def test_a_taken_slug_is_a_conflict_whatever_its_case_and_whoever_can_see_it(cast, slug):
    users, clients = cast
    make_project(users)  # private: the stranger cannot see it, but slugs are one namespace
    response = clients["stranger"].post("/api/v1/projects", {"slug": slug})
    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"reason": "slug_taken", "slug": slug}
    assert Project.objects.count() == 1 and not ProjectMembership.objects.filter(user=users["stranger"]).exists()


def test_a_malformed_slug_is_told_the_rule(cast):
    _, clients = cast
    refused = clients["stranger"].post("/api/v1/projects", {"slug": "Bad Slug!"})
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "letters, digits, '_' or '-', starting and ending with a letter or digit" in message


@pytest.mark.parametrize(
    "body",
    [
        {"slug": "me"},
        {"slug": "ME"},
        {"slug": "6f1c2a3b-0000-4000-8000-000000000000"},
        {"slug": "-leading"},
        {"slug": "trailing_"},
        {"slug": "spa ce"},
        {"slug": "ünïcode"},
        {"slug": "x" * 65},
        {"slug": ""},
        {"slug": 7},
        {"slug": ["apollo"]},
        {"slug": None},
        {"slug": "apollo\u0000"},
        # Python's `$` matched before a final newline: each of these was a 201 (helper-103)
        {"slug": "apollo\n"},
        {"slug": "me\n"},
        {"slug": "6f1c2a3b-0000-4000-8000-000000000000\n"},
        {"slug": "ok", "name": ""},
        {"slug": "ok", "name": "x" * 256},
        {"slug": "ok", "name": "bell\u0007"},
        {"slug": "ok", "name": 12},
        {"slug": "ok", "visibility": "secret"},
        {"slug": "ok", "visibility": True},
        {"slug": "ok", "owner": "sam"},
        {},
    ],
)
def test_hostile_project_bodies_are_400_and_create_nothing(cast, body):
    _, clients = cast
    response = clients["stranger"].post("/api/v1/projects", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert not Project.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [b'{"slug": "a\\ud800"}', b"{bad json", b'{"slug": "ok"} trailing', b'["slug"]', b"\xff\xfe"],
)
def test_malformed_json_is_400(cast, raw):
    _, clients = cast
    response = clients["stranger"].generic("POST", "/api/v1/projects", raw, content_type="application/json")
    assert response.status_code == 400
    assert not Project.objects.exists()


def test_owners_rename_reslug_and_publish_a_project(cast):
    users, clients = cast
    project = make_project(users)
    response = clients["owner"].patch(
        "/api/v1/projects/apollo", {"slug": "artemis", "name": "Artemis", "visibility": "public"}
    )
    assert response.status_code == 200
    assert response.json()["data"] | {"created_at": None} == {
        "id": str(project.pk),
        "slug": "artemis",
        "name": "Artemis",
        "visibility": "public",
        "created_at": None,
        "role": "owner",
    }
    assert clients["anonymous"].get("/api/v1/projects/artemis").status_code == 200
    # The old slug keeps naming the project (docs/access.md "Renamed slugs").
    assert clients["owner"].get("/api/v1/projects/apollo").json()["data"]["slug"] == "artemis"


def test_a_renamed_slug_cannot_be_taken_and_keeps_leading_members_to_their_project(cast):
    """After `apollo` was renamed, a stranger created a new `apollo`, added its members without asking, and
    their agents' `--project apollo` notes landed in the stranger's store (a breaker)."""
    users, clients = cast
    project = make_project(users)
    store = clients["member"].post("/api/v1/memories", {"scope": "project", "subject": "apollo"}).json()["data"]
    assert clients["owner"].patch("/api/v1/projects/apollo", {"slug": "artemis"}).status_code == 200
    for slug in ("apollo", "APOLLO"):
        taken = clients["stranger"].post("/api/v1/projects", {"slug": slug})
        assert taken.status_code == 409 and taken.json()["error"]["details"] == {"reason": "slug_taken", "slug": slug}
    other = ProjectFactory(slug="other")
    ProjectMembershipFactory(project=other, user=users["stranger"], role="owner")
    assert clients["stranger"].patch("/api/v1/projects/other", {"slug": "Apollo"}).status_code == 409
    assert Project.objects.count() == 2 and Project.objects.get(pk=other.pk).slug == "other"
    # The member's agent, still set up with the old slug, reaches the same store; a stranger still sees nothing.
    again = clients["member"].post("/api/v1/memories", {"scope": "project", "subject": "apollo"})
    assert again.status_code == 200 and again.json()["data"]["id"] == store["id"]
    resolved = clients["member"].get("/api/v1/memories/resolve?scope=project&subject=apollo")
    assert resolved.json()["data"]["id"] == store["id"]
    assert clients["stranger"].get("/api/v1/projects/apollo").status_code == 404
    # The project may take its old slug back; the slug it leaves is then retired in turn.
    assert clients["owner"].patch("/api/v1/projects/artemis", {"slug": "apollo"}).json()["data"]["slug"] == "apollo"
    assert clients["stranger"].post("/api/v1/projects", {"slug": "artemis"}).status_code == 409
    assert list(RetiredSlug.objects.values_list("project_id", "slug")) == [(project.pk, "artemis")]
    # A rename in case only retires nothing.
    assert clients["owner"].patch("/api/v1/projects/apollo", {"slug": "Apollo"}).status_code == 200
    assert RetiredSlug.objects.count() == 1


def test_renames_stop_at_the_retired_slug_limit_and_taking_one_back_still_works(cast):
    """Every slug a rename leaves stays reserved for the project: unlimited renames let one owner reserve any
    number of names (a breaker). The 11th slug left is refused and changes nothing; taking an old slug back,
    or a change of case, retires no more and still works. Nobody releases them: a freed slug is how a stranger
    receives the project's members' notes (a breaker did it through a staff release action, since removed)."""
    from accounts.services import RETIRED_SLUGS_MAX

    users, clients = cast
    project = make_project(users, slug="s0")
    for n in range(1, RETIRED_SLUGS_MAX + 1):
        assert clients["owner"].patch(f"/api/v1/projects/s{n - 1}", {"slug": f"s{n}"}).status_code == 200
    assert RetiredSlug.objects.filter(project=project).count() == RETIRED_SLUGS_MAX
    refused = clients["owner"].patch(f"/api/v1/projects/s{RETIRED_SLUGS_MAX}", {"slug": "fresh", "name": "New"})
    assert refused.status_code == 409, refused.json()
    assert refused.json()["error"]["details"] == {"reason": "rename_limit", "retired_slugs": RETIRED_SLUGS_MAX}
    project.refresh_from_db()
    assert (project.slug, project.name) == (f"s{RETIRED_SLUGS_MAX}", "S0")
    assert clients["stranger"].post("/api/v1/projects", {"slug": "fresh"}).status_code == 201  # not reserved
    back = clients["owner"].patch(f"/api/v1/projects/s{RETIRED_SLUGS_MAX}", {"slug": "s3"})
    assert back.status_code == 200 and back.json()["data"]["slug"] == "s3"
    assert clients["owner"].patch("/api/v1/projects/s3", {"slug": "S3"}).status_code == 200  # case only
    assert RetiredSlug.objects.filter(project=project).count() == RETIRED_SLUGS_MAX
    assert clients["owner"].get("/api/v1/projects/s0").json()["data"]["slug"] == "S3"  # old slugs still lead here


def test_deleting_a_project_frees_the_slugs_it_retired(cast):
    users, clients = cast
    project = make_project(users, slug="gemini")  # no store: a project with one cannot be deleted
    assert clients["owner"].patch("/api/v1/projects/gemini", {"slug": "mercury"}).status_code == 200
    Project.objects.filter(pk=project.pk).delete()
    assert not RetiredSlug.objects.exists()
    assert clients["stranger"].post("/api/v1/projects", {"slug": "gemini"}).status_code == 201


def test_a_renamed_section_slug_cannot_be_taken_either(cast):
    users, clients = cast
    make_section(users)
    assert clients["owner"].patch("/api/v1/sections/needhelp", {"slug": "help"}).status_code == 200
    assert clients["staff"].post("/api/v1/sections", {"slug": "NeedHelp"}).status_code == 409
    assert clients["owner"].get("/api/v1/sections/needhelp").json()["data"]["slug"] == "help"
    assert clients["staff"].post("/api/v1/projects", {"slug": "needhelp"}).status_code == 201  # another namespace


def test_renaming_onto_a_taken_slug_is_a_conflict_and_changes_nothing(cast):
    users, clients = cast
    make_project(users)
    ProjectFactory(slug="taken")
    response = clients["owner"].patch("/api/v1/projects/apollo", {"slug": "TAKEN", "name": "Changed"})
    assert response.status_code == 409
    assert Project.objects.get(slug="apollo").name == "Apollo"


def test_a_project_store_follows_its_project_visibility(cast):
    users, clients = cast
    make_project(users)
    store = clients["member"].post("/api/v1/memories", {"scope": "project", "subject": "apollo"}).json()["data"]
    assert clients["stranger"].get(f"/api/v1/memories/{store['id']}").status_code == 404
    clients["owner"].patch("/api/v1/projects/apollo", {"visibility": "public"})
    assert clients["stranger"].get(f"/api/v1/memories/{store['id']}").json()["data"]["visibility"] == "public"


def test_members_are_added_changed_and_removed_with_active_false(cast):
    users, clients = cast
    make_project(users)
    api = clients["owner"]
    added = api.post("/api/v1/projects/apollo/members", {"handle": "SAM"})
    assert added.status_code == 201
    assert added.json()["data"]["handle"] == "sam" and added.json()["data"]["role"] == "member"
    assert added.json()["meta"] == {"created": True}
    promoted = api.post("/api/v1/projects/apollo/members", {"handle": "sam", "role": "owner"})
    assert promoted.status_code == 200 and promoted.json()["data"]["role"] == "owner"
    assert promoted.json()["meta"] == {"created": False}
    assert clients["stranger"].patch("/api/v1/projects/apollo", {"name": "By Sam"}).status_code == 200
    removed = api.post("/api/v1/projects/apollo/members", {"handle": "sam", "active": False})
    assert removed.status_code == 200 and removed.json()["data"]["active"] is False
    assert removed.json()["data"]["role"] == "owner"  # kept: re-adding restores it
    assert clients["stranger"].get("/api/v1/projects/apollo").status_code == 404
    again = api.post("/api/v1/projects/apollo/members", {"handle": "sam"})
    assert again.json()["data"] | {"created_at": None} == {
        "handle": "sam",
        "role": "owner",
        "active": True,
        "created_at": None,
    }
    assert ProjectMembership.objects.filter(user=users["stranger"]).count() == 1


def test_removing_a_non_member_stores_nothing(cast):
    users, clients = cast
    make_project(users)
    response = clients["owner"].post("/api/v1/projects/apollo/members", {"handle": "sam", "active": False})
    assert response.status_code == 200
    assert response.json()["data"]["active"] is False
    assert not ProjectMembership.objects.filter(user=users["stranger"]).exists()


def test_unknown_and_inactive_handles_are_404_naming_them(cast):
    users, clients = cast
    make_project(users)
    UserFactory(handle="gone", is_active=False)
    for handle in ("nobody", "gone"):
        response = clients["owner"].post("/api/v1/projects/apollo/members", {"handle": handle})
        assert response.status_code == 404
        assert response.json()["error"]["details"] == {"handle": handle}
        assert handle in response.json()["error"]["message"]


def test_the_last_active_owner_can_neither_leave_nor_be_demoted(cast):
    users, clients = cast
    make_project(users)  # olivia is the only *active* owner (fatima's ownership is inactive)
    for body in ({"handle": "olivia", "active": False}, {"handle": "olivia", "role": "member"}):
        response = clients["owner"].post("/api/v1/projects/apollo/members", body)
        assert response.status_code == 409
        assert response.json()["error"]["details"]["reason"] == "last_owner"
    assert ProjectMembership.objects.get(user=users["owner"]).role == "owner"
    clients["owner"].post("/api/v1/projects/apollo/members", {"handle": "mateo", "role": "owner"})
    left = clients["owner"].post("/api/v1/projects/apollo/members", {"handle": "olivia", "active": False})
    assert left.status_code == 200
    assert clients["owner"].get("/api/v1/projects/apollo").status_code == 404


def test_the_member_list_is_oldest_first_and_pages_with_a_bound_cursor(cast, make_client, django_assert_num_queries):
    users, clients = cast
    project = make_project(users)
    for n in range(5):
        clients["owner"].post("/api/v1/projects/apollo/members", {"handle": UserFactory(handle=f"extra{n}").handle})
    with django_assert_num_queries(4):  # token, project, page, last_used_at touch… at most
        first = clients["member"].get("/api/v1/projects/apollo/members?limit=3")
    body = first.json()
    assert [m["handle"] for m in body["data"]] == ["olivia", "mateo", "fatima"]
    handles = [m["handle"] for m in body["data"]]
    cursor = body["meta"]["next_cursor"]
    while cursor:
        page = clients["member"].get(f"/api/v1/projects/apollo/members?limit=3&cursor={cursor}").json()
        handles += [m["handle"] for m in page["data"]]
        cursor = page["meta"]["next_cursor"]
    assert handles == ["olivia", "mateo", "fatima", *[f"extra{n}" for n in range(5)]]
    other = make_project(users, slug="other")
    foreign = clients["owner"].get(f"/api/v1/projects/{other.slug}/members?cursor={body['meta']['next_cursor']}")
    assert foreign.status_code == 400
    tampered = clients["owner"].get("/api/v1/projects/apollo/members?cursor=" + body["meta"]["next_cursor"][:-2])
    assert tampered.status_code == 400
    another_caller = clients["owner"].get(f"/api/v1/projects/apollo/members?cursor={body['meta']['next_cursor']}")
    assert another_caller.status_code == 400  # bound to the caller too (a breaker reused someone else's)
    assert project.memberships.count() == 8


def test_a_member_cursor_carries_no_serial_row_id(cast):
    """Cursors are signed, not encrypted: a serial id in one told a reader how many memberships the whole
    server made between two pages (a breaker). The tie-breaker is the member's user id."""
    from django.core import signing

    users, clients = cast
    make_project(users)
    cursor = clients["member"].get("/api/v1/projects/apollo/members?limit=1").json()["meta"]["next_cursor"]
    keys = signing.loads(cursor, salt="memories.cursor.project-members")["k"]
    assert keys[1] == str(users["owner"].pk) and not any(isinstance(key, int) for key in keys)


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=101", "limit=5.0", "limit=%205", "limit=%EF%BC%95", "member=yes", "member=1", "x=1"]
)
def test_list_queries_are_strict(cast, query):
    _, clients = cast
    assert clients["owner"].get(f"/api/v1/projects?{query}").status_code == 400
    assert clients["owner"].get(f"/api/v1/sections?{query}").status_code == 400


def test_project_list_costs_a_constant_number_of_queries(cast, django_assert_max_num_queries):
    users, clients = cast
    for n in range(15):
        make_project(users, slug=f"p{n}", visibility="public" if n % 2 else "private")
    with django_assert_max_num_queries(3):
        response = clients["member"].get("/api/v1/projects?limit=100")
    assert len(response.json()["data"]) == 15


@pytest.mark.parametrize(
    "body",
    [
        {"handle": "sam", "role": "admin"},
        {"handle": "sam", "role": "poster"},
        {"handle": "sam", "active": "false"},
        {"handle": "sam", "active": 0},
        {"handle": 5},
        {"handle": "sa m"},
        {"handle": "sam\u0000"},
        {"handle": "sam", "extra": True},
        {},
    ],
)
def test_hostile_member_bodies_are_400_and_change_nothing(cast, body):
    users, clients = cast
    make_project(users)
    before = sorted(ProjectMembership.objects.values_list("user__handle", "role", "active"))
    response = clients["owner"].post("/api/v1/projects/apollo/members", body, format="json")
    assert response.status_code == 400, response.content
    assert sorted(ProjectMembership.objects.values_list("user__handle", "role", "active")) == before


# --- sections --------------------------------------------------------------------------------------


def test_section_roles_map_to_posting_rights_on_the_board_store(cast, make_client):
    users, clients = cast
    make_section(users, visibility="private")
    board = clients["owner"].post("/api/v1/memories", {"scope": "board", "subject": "NeedHelp"}).json()["data"]
    note = f"/api/v1/memories/{board['id']}/note"
    clients["owner"].post("/api/v1/sections/needhelp/members", {"handle": "sam", "role": "reader"})
    assert clients["stranger"].post(note, {"body_md": "hi"}).status_code == 403  # reads, may not post
    assert clients["stranger"].get(f"/api/v1/memories/{board['id']}/wake").status_code == 200
    promoted = clients["owner"].post("/api/v1/sections/needhelp/members", {"handle": "sam", "role": "poster"})
    assert promoted.json()["data"]["role"] == "poster"
    assert clients["stranger"].post(note, {"body_md": "hi"}).status_code == 201
    listed = clients["stranger"].get("/api/v1/sections/needhelp/members").json()["data"]
    assert {m["handle"]: (m["role"], m["active"]) for m in listed} == {
        "olivia": ("owner", True),
        "mateo": ("poster", True),
        "fatima": ("owner", False),
        "sam": ("poster", True),
    }


def test_a_board_open_to_all_posters_takes_notes_from_every_active_reader(cast):
    users, clients = cast
    make_section(users, visibility="public")
    board = clients["owner"].post("/api/v1/memories", {"scope": "board", "subject": "needhelp"}).json()["data"]
    note = f"/api/v1/memories/{board['id']}/note"
    assert clients["stranger"].post(note, {"body_md": "hi"}).status_code == 403
    opened = clients["owner"].patch("/api/v1/sections/needhelp", {"open_to_all_posters": True})
    assert opened.json()["data"]["open_to_all_posters"] is True
    assert Section.objects.get().posting == "open"
    assert clients["stranger"].post(note, {"body_md": "hi"}).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        {"slug": "general", "open_to_all_posters": "true"},
        {"slug": "general", "open_to_all_posters": 1},
        {"slug": "general", "posting": "open"},
        {"slug": "00000000-0000-4000-8000-000000000001"},
        {"slug": "general", "visibility": None},
    ],
)
def test_hostile_section_bodies_are_400(cast, body):
    _, clients = cast
    response = clients["staff"].post("/api/v1/sections", body, format="json")
    assert response.status_code == 400
    assert not Section.objects.exists()


def test_section_members_reject_project_roles_and_keep_one_owner(cast):
    users, clients = cast
    make_section(users)
    api = clients["owner"]
    assert api.post("/api/v1/sections/needhelp/members", {"handle": "sam", "role": "member"}).status_code == 400
    demoted = api.post("/api/v1/sections/needhelp/members", {"handle": "olivia", "role": "poster"})
    assert demoted.status_code == 409 and demoted.json()["error"]["details"]["reason"] == "last_owner"
    assert SectionMembership.objects.get(user=users["owner"]).role == "owner"
    assert not Store.objects.exists()


def test_the_set_up_helper_changes_members_by_the_same_rules_as_the_api():
    """`ensure_project_membership` (the demo's and tests' set-up) used to update the row directly: no row
    lock, no last-owner rule, no rights version for a demotion. It now goes through `set_project_member`."""
    from accounts import services
    from accounts.errors import LastOwner

    project = ProjectFactory(slug="set-up")
    boss, dave = UserFactory(handle="boss"), UserFactory(handle="dave")
    services.ensure_project_membership(project=project, user=boss, role="owner")
    services.ensure_project_membership(project=project, user=dave, role="owner")
    with pytest.raises(LastOwner):
        services.ensure_project_membership(project=project, user=boss, role="member")
        services.ensure_project_membership(project=project, user=dave, role="member")
    project.refresh_from_db()
    assert project.rights_version == 1  # boss's demotion narrowed; dave's was refused
    roles = dict(ProjectMembership.objects.filter(project=project).values_list("user__handle", "role"))
    assert roles == {"boss": "member", "dave": "owner"}


def test_a_slug_or_handle_with_a_final_newline_is_refused_everywhere(cast):
    """`^…$` in Python also matches "apollo\\n" (RegexValidator searches): a second project "apollo\\n" beside
    "apollo", a section "sec\\n", a member "olivia\\n" looked up (helper-103). Whole strings only now."""
    users, clients = cast
    make_project(users)
    staff_section = clients["staff"].post("/api/v1/sections", {"slug": "sec\n"}, format="json")
    renamed = clients["owner"].patch("/api/v1/projects/apollo", {"slug": "apollo2\n"}, format="json")
    member = clients["owner"].post("/api/v1/projects/apollo/members", {"handle": "olivia\n"}, format="json")
    for response, field in ((staff_section, "slug"), (renamed, "slug"), (member, "handle")):
        assert response.status_code == 400, response.content
        assert list(response.json()["error"]["details"]["fields"]) == [field]
    assert not Section.objects.filter(slug__startswith="sec").exists()
    assert Project.objects.get().slug == "apollo"
