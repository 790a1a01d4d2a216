"""`rog projects|boards|tokens|me` and `--query` against a live server (in-process click runner)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from accounts import services as account_services
from accounts.models import ApiToken, ProjectMembership, Section
from rog.cli import main as rog_main
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(live_server):
    """``run(*args, user=…, code=0)`` → stdout text; the user's fresh token is ROG_TOKEN."""
    runner = CliRunner()
    tokens: dict = {}

    def invoke(*args: str, user, code: int = 0) -> str:
        if user.pk not in tokens:
            tokens[user.pk] = account_services.issue_token(user=user).secret
        env = {"ROG_API_URL": live_server.url, "ROG_TOKEN": tokens[user.pk]}
        result = runner.invoke(rog_main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == code, (args, result.output)
        return result.stdout if code == 0 else result.stderr

    return invoke


def test_query_prints_plain_strings_for_capture_and_json_otherwise(run):
    alice = UserFactory(handle="alice")
    project_id = run("projects", "create", "apollo", "-q", "data.id", user=alice)
    assert project_id.strip() == str(ProjectMembership.objects.get().project_id)
    assert json.loads(run("projects", "view", "APOLLO", "-q", "data.[slug, role]", user=alice)) == ["apollo", "owner"]
    assert run("me", "-q", "data.handle", user=alice) == "alice\n"
    error = json.loads(run("me", "-q", "data[", user=alice, code=2))
    assert error["error"]["type"] == "usage_error"


def test_query_never_prints_stored_control_characters_raw(run):
    alice = UserFactory(handle="alice")
    run("memories", "init", user=alice)
    run("memories", "note", "\x1b[2Jwiped", user=alice)
    out = run("memories", "wake", "-q", "data.lines[0].text", user=alice)
    assert "\x1b" not in out and json.loads(out) == "\x1b[2Jwiped"


def test_projects_members_add_change_and_remove(run):
    alice, bob = UserFactory(handle="alice"), UserFactory(handle="bob")
    run("projects", "create", "apollo", "--name", "Apollo", "--public", user=alice)
    added = json.loads(run("projects", "members", "add", "apollo", "bob", user=alice))
    assert added["data"]["role"] == "member" and added["meta"]["created"] is True
    run("projects", "members", "add", "apollo", "bob", "--role", "owner", user=alice)
    listed = json.loads(run("projects", "members", "list", "apollo", user=bob))
    assert [(m["handle"], m["role"], m["active"]) for m in listed["data"]] == [
        ("alice", "owner", True),
        ("bob", "owner", True),
    ]
    assert listed["meta"] == {"count": 2, "pages": 1}
    run("projects", "members", "remove", "apollo", "alice", user=bob)
    error = json.loads(run("projects", "members", "remove", "apollo", "bob", user=bob, code=3))
    assert error["error"]["details"]["reason"] == "last_owner"
    edited = json.loads(run("projects", "edit", "apollo", "--private", "--name", "Apollo 2", user=bob))
    assert edited["data"]["visibility"] == "private" and edited["data"]["name"] == "Apollo 2"
    assert json.loads(run("projects", "list", "--mine", user=alice))["data"] == []
    run("projects", "edit", "apollo", user=bob, code=2)  # nothing to change


def test_boards_need_staff_to_create_and_take_roles(run):
    staff, carol = UserFactory(handle="stella", is_staff=True), UserFactory(handle="carol")
    refused = json.loads(run("boards", "create", "general", user=carol, code=3))
    assert refused["error"]["type"] == "permission_error"
    # the API says "section" where rog says "board" (a tester): the hint joins the two words
    assert "section" in refused["error"]["message"] and "sections" in refused["error"]["hint"]
    assert "forum sections" in json.loads(run("boards", "view", "nowhere", user=carol, code=3))["error"]["hint"]
    created = json.loads(run("boards", "create", "General", "--open-to-all-posters", "--public", user=staff))
    assert created["data"]["open_to_all_posters"] is True and created["data"]["visibility"] == "public"
    run("boards", "members", "add", "general", "carol", "--role", "reader", user=staff)
    assert run("boards", "view", "general", "-q", "data.role", user=carol) == "reader\n"
    run("boards", "edit", "general", "--members-post", user=staff)
    assert Section.objects.get().posting == "members"


def test_tokens_create_list_and_revoke_with_yes(run):
    alice = UserFactory(handle="alice")
    secret = run("tokens", "create", "--name", "ci", "--scopes", "agent:read", "--expires-in-days", "7",
                 "-q", "data.token", user=alice).strip()  # fmt: skip
    token = ApiToken.objects.get(digest=account_services.token_digest(secret))
    assert token.scopes == ["agent:read"] and token.name == "ci"
    listed = json.loads(run("tokens", "list", user=alice))["data"]
    assert {row["name"] for row in listed} == {"ci", ""} and all("token" not in row for row in listed)
    run("tokens", "revoke", str(token.pk), user=alice, code=2)
    token.refresh_from_db()
    assert token.revoked_at is None
    run("tokens", "revoke", str(token.pk), "--yes", user=alice)
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_tokens_create_takes_scopes_repeated_or_comma_separated(run):
    """`--scopes agent:read --scopes memories:write` kept the last one only, which the server refused (a tester)."""
    alice = UserFactory(handle="alice")
    for scopes in (["--scopes", "agent:read", "--scopes", "memories:write"], ["--scopes", "memories:write,agent:read"]):
        secret = run("tokens", "create", "--name", "both", *scopes, "-q", "data.token", user=alice).strip()
        token = ApiToken.objects.get(digest=account_services.token_digest(secret))
        assert token.scopes == ["agent:read", "memories:write"]


def test_names_are_one_path_segment_and_cannot_reach_other_endpoints(run):
    alice = UserFactory(handle="alice")
    run("projects", "create", "apollo", user=alice)
    for ref in ("apollo?x=1", "%2e%2e", "apollo#x"):
        error = json.loads(run("projects", "view", ref, user=alice, code=3))
        assert error["error"]["type"] == "not_found_error", ref
    for ref in ("../me/tokens", "apollo/members", "..", "."):
        error = json.loads(run("projects", "view", ref, user=alice, code=2))
        assert error["error"]["type"] == "usage_error", ref
    run("memories", "wake", "--store", "../../me", user=alice, code=2)


@pytest.mark.parametrize(
    "command",
    [
        ["me"],
        ["tokens", "create"],
        ["tokens", "list"],
        ["tokens", "revoke"],
        *[[group, sub] for group in ("projects", "boards") for sub in ("create", "list", "view", "edit")],
        *[[group, "members", sub] for group in ("projects", "boards") for sub in ("list", "add", "remove")],
    ],
)
def test_every_account_command_has_help_and_query(command):
    result = CliRunner().invoke(rog_main, [*command, "--help"])
    assert result.exit_code == 0 and "--query" in result.output
