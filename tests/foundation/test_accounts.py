"""Users, handles and the token command."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from accounts import services
from accounts.models import ApiToken, User
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_handles_are_unique_regardless_of_case():
    UserFactory(handle="Alice")
    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.create(handle="aLiCe")


def test_natural_key_lookup_ignores_case():
    user = UserFactory(handle="Bob")
    assert User.objects.get_by_natural_key("BOB") == user


def test_create_token_prints_a_working_secret_once(owner):
    out = io.StringIO()
    call_command("create_token", "--handle", "OWNER", "--scopes", "agent:read", "--expires-in", "3", stdout=out)
    secret = out.getvalue().strip()
    token = ApiToken.objects.get(digest=services.token_digest(secret))
    assert token.user == owner
    assert token.scopes == ["agent:read"]
    assert token.expires_at is not None


def test_create_token_says_when_another_spelling_of_the_handle_names_an_existing_user(owner):
    """A tester: `--handle OWNER --create-user` silently gave a token for `owner`; it now says so."""
    out, err = io.StringIO(), io.StringIO()
    call_command("create_token", "--handle", "OWNER", "--create-user", "--expires-in-days", "2", stdout=out, stderr=err)
    token = ApiToken.objects.get(digest=services.token_digest(out.getvalue().strip()))
    assert token.user == owner and token.expires_at is not None
    assert 'existing user "owner"' in err.getvalue()
    same = io.StringIO()
    call_command("create_token", "--handle", "owner", stdout=io.StringIO(), stderr=same)
    assert same.getvalue() == ""


@pytest.mark.parametrize("handle", ["dave\n", "me\n", "x\n\n"])
def test_a_handle_with_a_final_newline_is_no_handle(handle):
    """`create_token --handle $'dave\\n' --create-user` made a user "dave\\n" beside "dave" (helper-103): the
    handle rule's `$` matched before the newline. Every user is made through `full_clean`."""
    with pytest.raises(CommandError, match="handle"):
        call_command("create_token", "--handle", handle, "--create-user", stdout=io.StringIO(), stderr=io.StringIO())
    assert not User.objects.exists()


@pytest.mark.parametrize("handle", ["me", "00000000-0000-0000-0000-000000000000"])
def test_ensure_demo_with_a_handle_no_user_may_have_is_a_clear_error(handle):
    with pytest.raises(CommandError, match=f'--handle "{handle}": The handle'):
        call_command("ensure_demo", "--handle", handle, stdout=io.StringIO())
    assert not User.objects.filter(handle__iexact=handle).exists()


def test_create_token_rejects_unknown_scopes(owner):
    with pytest.raises(CommandError, match="records:write"):
        call_command("create_token", "--handle", "owner", "--scopes", "records:write", stdout=io.StringIO())


@pytest.mark.parametrize(
    ("scopes", "problem"), [("memories:write", "needs agent:read too"), (",", "At least one scope")]
)
def test_create_token_refuses_scopes_the_api_refuses(owner, scopes, problem):
    """The command issued a memories:write-only token — one that could do nothing, not even revoke itself (a
    breaker) — where the API refuses it: one rule, `accounts.services.normalise_scopes`."""
    with pytest.raises(CommandError, match=problem):
        call_command("create_token", "--handle", "owner", "--scopes", scopes, stdout=io.StringIO())
    assert not ApiToken.objects.filter(user=owner).exists()
    with pytest.raises(CommandError, match=problem):  # and a user made for the refused token is not kept
        call_command("create_token", "--handle", "nobody9", "--create-user", "--scopes", scopes, stdout=io.StringIO())
    assert not User.objects.filter(handle="nobody9").exists()


def test_create_token_takes_scopes_repeated_or_comma_separated(owner):
    out = io.StringIO()
    scopes = ["--scopes", "agent:read", "--scopes", "memories:write"]
    call_command("create_token", "--handle", "owner", *scopes, stdout=out)
    token = ApiToken.objects.get(digest=services.token_digest(out.getvalue().strip()))
    assert token.scopes == ["agent:read", "memories:write"]


def test_create_token_for_unknown_handle_fails_clearly():
    with pytest.raises(CommandError) as refused:
        call_command("create_token", "--handle", "it's", stdout=io.StringIO())
    assert str(refused.value) == """No user with handle "it's" (use --create-user to create one)."""


def test_ensure_demo_without_a_token_file_prints_new_tokens_and_revokes_none():
    first, second = io.StringIO(), io.StringIO()
    call_command("ensure_demo", stdout=first)
    call_command("ensure_demo", stdout=second)
    assert User.objects.filter(handle__iexact="demo").count() == 1
    assert ApiToken.objects.filter(user__handle="demo", revoked_at__isnull=True).count() == 2
    assert "earlier demo tokens still work" in second.getvalue()


def _secret(output: str) -> str:
    return output.split("): ", 1)[1].split()[0]


def test_ensure_demo_keeps_one_token_across_starts_in_a_private_file(tmp_path):
    path = tmp_path / "data" / "demo-token"
    outputs = []
    for _ in range(2):
        out = io.StringIO()
        call_command("ensure_demo", "--token-file", str(path), stdout=out)
        outputs.append(out.getvalue())
    assert _secret(outputs[0]) == _secret(outputs[1]) == path.read_text().strip()
    assert "the same as the last start" in outputs[1]
    assert path.stat().st_mode & 0o777 == 0o600
    assert ApiToken.objects.filter(user__handle="demo").count() == 1


def test_ensure_demo_replaces_a_revoked_or_foreign_kept_token(tmp_path):
    path = tmp_path / "demo-token"
    call_command("ensure_demo", "--token-file", str(path), stdout=io.StringIO())
    first = path.read_text().strip()
    services.revoke_token(token=ApiToken.objects.get(digest=services.token_digest(first)))
    out = io.StringIO()
    call_command("ensure_demo", "--token-file", str(path), stdout=out)
    assert _secret(out.getvalue()) == path.read_text().strip() != first
    path.write_text(services.issue_token(user=UserFactory(handle="someone")).secret)
    call_command("ensure_demo", "--token-file", str(path), stdout=io.StringIO())
    assert ApiToken.objects.get(digest=services.token_digest(path.read_text().strip())).user.handle == "demo"


@pytest.mark.parametrize("handle", ["alice", "ALICE"])
@pytest.mark.parametrize("interactive", [True, False])
def test_createsuperuser_with_a_taken_handle_fails_before_asking_for_a_password(monkeypatch, handle, interactive):
    UserFactory(handle="Alice")
    monkeypatch.setattr("getpass.getpass", lambda *a, **k: pytest.fail("asked for a password"))
    with pytest.raises(CommandError, match='"Alice" already exists'):
        call_command("createsuperuser", "--handle", handle, interactive=interactive, stdout=io.StringIO())
    assert User.objects.count() == 1


def test_createsuperuser_noinput_takes_the_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a long enough passphrase")
    call_command("createsuperuser", "--handle", "admin", "--noinput", stdout=io.StringIO())
    admin = User.objects.get(handle="admin")
    assert admin.is_staff and admin.is_superuser and admin.check_password("a long enough passphrase")


def test_a_host_not_in_allowed_hosts_is_named_in_the_answer_and_the_log(client, caplog):
    """A tester behind a proxy without ALLOWED_HOSTS got "Malformed request." and no log line."""
    security = logging.getLogger("django.security")  # it does not propagate: our settings give it a handler
    security.addHandler(caplog.handler)
    try:
        api = client.get("/api/v1/me", HTTP_HOST="example.com")
        page = client.get("/backoffice/", HTTP_HOST="example.com")
    finally:
        security.removeHandler(caplog.handler)
    assert api.status_code == 400 and "ALLOWED_HOSTS" in api.json()["error"]["message"]
    assert page.status_code == 400 and "ALLOWED_HOSTS" in page.content.decode()
    assert any("example.com" in record.getMessage() for record in caplog.records)
    assert client.get("/api/v1/me").status_code == 401  # a served host: the normal answer
