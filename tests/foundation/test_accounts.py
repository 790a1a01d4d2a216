"""Users, handles and the token command."""

from __future__ import annotations

import io

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


def test_create_token_rejects_unknown_scopes(owner):
    with pytest.raises(CommandError, match="records:write"):
        call_command("create_token", "--handle", "owner", "--scopes", "records:write", stdout=io.StringIO())


def test_create_token_for_unknown_handle_fails_clearly():
    with pytest.raises(CommandError, match="No user"):
        call_command("create_token", "--handle", "ghost", stdout=io.StringIO())


def test_ensure_demo_is_idempotent_for_the_user_and_prints_new_tokens():
    first, second = io.StringIO(), io.StringIO()
    call_command("ensure_demo", stdout=first)
    call_command("ensure_demo", stdout=second)
    assert User.objects.filter(handle__iexact="demo").count() == 1
    assert ApiToken.objects.filter(user__handle="demo").count() == 2
    assert ApiToken.objects.filter(user__handle="demo", revoked_at__isnull=True).count() == 1
    assert "Demo token" in first.getvalue()
    live = ApiToken.objects.get(user__handle="demo", revoked_at__isnull=True)
    assert second.getvalue().split("(shown once): ")[1].strip().startswith(live.prefix)
