"""Bearer tokens and scopes (SPEC §2): who gets 401, who gets 403."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiToken, TokenScope
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.foundation.urls")]


def assert_error(response, status: int, error_type: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["error"]["message"]
    assert body["request_id"].startswith("req_")
    assert response["Request-Id"] == body["request_id"]
    return body


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_me_returns_the_token_owner_and_scopes(owner_client, owner):
    response = owner_client.get("/api/v1/me")
    assert response.status_code == 200
    assert response.json()["data"]["handle"] == owner.handle
    assert response.json()["data"]["token"]["scopes"] == ["agent:read", "memories:write"]
    assert "secret" not in response.content.decode()


def test_missing_token_is_401(anon_client):
    body = assert_error(anon_client.get("/api/v1/me"), 401, "authentication_error")
    assert "Bearer" in body["error"]["message"]


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer a b", "Basic dXNlcjpwYXNz", "Token abc", "bearer", "Bearer\tx y"],
)
def test_malformed_authorization_header_is_401(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    assert_error(client.get("/api/v1/me"), 401, "authentication_error")


def test_unknown_token_is_401():
    assert_error(bearer("mem_not-a-real-token").get("/api/v1/me"), 401, "authentication_error")


def test_revoked_token_is_401(owner):
    issued = services.issue_token(user=owner)
    services.revoke_token(token=issued.token)
    body = assert_error(bearer(issued.secret).get("/api/v1/me"), 401, "authentication_error")
    assert "revoked" in body["error"]["message"]


def test_expired_token_is_401(owner):
    issued = services.issue_token(user=owner, expires_in_days=1)
    ApiToken.objects.filter(pk=issued.token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    body = assert_error(bearer(issued.secret).get("/api/v1/me"), 401, "authentication_error")
    assert "expired" in body["error"]["message"]


def test_token_that_has_not_expired_yet_works(owner):
    issued = services.issue_token(user=owner, expires_in_days=1)
    assert bearer(issued.secret).get("/api/v1/me").status_code == 200


def test_inactive_user_is_401():
    user = UserFactory(is_active=False)
    issued = services.issue_token(user=user)
    assert_error(bearer(issued.secret).get("/api/v1/me"), 401, "authentication_error")


def write_only_client(make_client, owner):
    """A client whose token holds memories:write alone: no longer issued (`accounts.services.normalise_scopes`),
    but `manage.py create_token` made such tokens before, and the scope check must still hold for them."""
    client = make_client(owner)
    ApiToken.objects.filter(pk=client.token.pk).update(scopes=[TokenScope.MEMORIES_WRITE.value])
    return client


def test_read_without_agent_read_scope_is_403(make_client, owner):
    client = write_only_client(make_client, owner)
    body = assert_error(client.get("/api/v1/me"), 403, "permission_error")
    assert "agent:read" in body["error"]["message"]


def test_write_without_memories_write_scope_is_403(make_client, owner):
    client = make_client(owner, scopes=[TokenScope.AGENT_READ])
    body = assert_error(client.post("/probe", {"count": 1}), 403, "permission_error")
    assert "memories:write" in body["error"]["message"]


def test_write_needs_agent_read_too(make_client, owner):
    client = write_only_client(make_client, owner)
    body = assert_error(client.post("/probe", {"count": 1}), 403, "permission_error")
    assert "agent:read" in body["error"]["message"]


def test_write_with_both_scopes_passes(owner_client):
    assert owner_client.post("/probe", {"count": 1}).status_code == 201


def test_anonymous_write_is_401_even_where_reads_are_open(anon_client):
    assert anon_client.get("/probe").status_code == 200
    assert_error(anon_client.post("/probe", {"count": 1}), 401, "authentication_error")


def test_token_secret_is_stored_only_as_a_digest(owner):
    issued = services.issue_token(user=owner)
    row = ApiToken.objects.get(pk=issued.token.pk)
    assert issued.secret not in (row.digest, row.prefix, row.name)
    assert row.digest == services.token_digest(issued.secret)
    assert issued.secret.startswith(row.prefix)


def test_last_used_at_is_recorded(owner):
    issued = services.issue_token(user=owner)
    assert issued.token.last_used_at is None
    bearer(issued.secret).get("/api/v1/me")
    issued.token.refresh_from_db()
    assert issued.token.last_used_at is not None
