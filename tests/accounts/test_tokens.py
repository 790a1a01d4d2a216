"""The caller's own tokens: `GET/POST /api/v1/me/tokens`, `DELETE /api/v1/me/tokens/{id}` (SPEC §3)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import services
from accounts.errors import TokenPowerExceeded
from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def test_a_minted_token_is_shown_once_and_works(owner_client, make_client):
    response = owner_client.post("/api/v1/me/tokens", {"name": "ci", "scopes": ["agent:read"], "expires_in_days": 7})
    assert response.status_code == 201
    data = response.json()["data"]
    assert data["token"].startswith("mem_") and data["prefix"] == data["token"][:12]
    assert data["scopes"] == ["agent:read"] and data["name"] == "ci" and data["current"] is False
    assert data["revoked_at"] is None and data["last_used_at"] is None
    stored = ApiToken.objects.get(pk=data["id"])
    assert stored.digest == services.token_digest(data["token"]) and data["token"] not in str(stored.__dict__)
    assert timedelta(days=6, hours=23) < stored.expires_at - timezone.now() <= timedelta(days=7)
    new = make_client(None)
    new.credentials(HTTP_AUTHORIZATION=f"Bearer {data['token']}")
    me = new.get("/api/v1/me").json()["data"]["token"]
    assert me["id"] == data["id"]
    assert me["expires_at"] == data["expires_at"] and me["expires_at"].endswith("Z")  # one spelling everywhere
    listed = owner_client.get("/api/v1/me/tokens").json()["data"]
    assert all("token" not in row for row in listed)
    assert [row["current"] for row in listed] == [False, True]  # newest first; the caller's is marked


def test_tokens_are_private_to_their_user(owner_client, stranger_client, anon_client):
    mine = owner_client.post("/api/v1/me/tokens", {"name": "mine", "scopes": ["agent:read"]}).json()["data"]
    assert [row["id"] for row in stranger_client.get("/api/v1/me/tokens").json()["data"]] == [
        str(stranger_client.token.pk)
    ]
    foreign = stranger_client.delete(f"/api/v1/me/tokens/{mine['id']}")
    unknown = stranger_client.delete("/api/v1/me/tokens/00000000-0000-4000-8000-000000000000")
    malformed = stranger_client.delete("/api/v1/me/tokens/not-a-uuid")
    assert foreign.status_code == unknown.status_code == malformed.status_code == 404
    strip = lambda r: {**r.json(), "request_id": None}  # noqa: E731
    assert strip(foreign) == strip(unknown) == strip(malformed)
    assert ApiToken.objects.get(pk=mine["id"]).revoked_at is None
    assert anon_client.get("/api/v1/me/tokens").status_code == 401
    assert anon_client.post("/api/v1/me/tokens", {"name": "x", "scopes": ["agent:read"]}).status_code == 401


def test_revoking_is_idempotent_and_the_revoked_token_stops_working(owner_client, make_client, owner):
    other = make_client(owner)
    first = owner_client.delete(f"/api/v1/me/tokens/{other.token.pk}")
    assert first.status_code == 200 and first.json()["data"]["revoked_at"] is not None
    again = owner_client.delete(f"/api/v1/me/tokens/{other.token.pk}")
    assert again.json()["data"]["revoked_at"] == first.json()["data"]["revoked_at"]
    assert other.get("/api/v1/me").status_code == 401
    itself = owner_client.delete(f"/api/v1/me/tokens/{owner_client.token.pk}")
    assert itself.status_code == 200 and itself.json()["data"]["current"] is True
    assert owner_client.get("/api/v1/me").status_code == 401


def test_minting_and_revoking_another_token_are_writes_and_need_both_scopes(make_client, owner):
    writer = make_client(owner)
    reader = make_client(owner, scopes=["agent:read"])
    assert reader.get("/api/v1/me/tokens").status_code == 200
    response = reader.post("/api/v1/me/tokens", {"name": "x", "scopes": ["agent:read"]})
    assert response.status_code == 403
    refused = reader.delete(f"/api/v1/me/tokens/{writer.token.pk}")
    assert refused.status_code == 403 and "memories:write" in refused.json()["error"]["message"]
    assert ApiToken.objects.filter(user=owner).count() == 2
    assert ApiToken.objects.filter(user=owner, revoked_at__isnull=False).count() == 0


def test_any_token_can_revoke_itself(make_client, owner):
    """Whoever holds a token may end it: a leaked read-only token could not be revoked with itself (a breaker)."""
    reader = make_client(owner, scopes=["agent:read"])
    response = reader.delete(f"/api/v1/me/tokens/{str(reader.token.pk).upper()}")
    assert response.status_code == 403  # another spelling of its id is not "itself": the write scopes apply
    response = reader.delete(f"/api/v1/me/tokens/{reader.token.pk}")
    assert response.status_code == 200 and response.json()["data"]["current"] is True
    assert ApiToken.objects.get(pk=reader.token.pk).revoked_at is not None
    assert reader.get("/api/v1/me").status_code == 401


def test_a_token_never_mints_more_scopes_than_it_has(owner):
    caller = services.issue_token(user=owner, scopes=["agent:read"]).token
    with pytest.raises(TokenPowerExceeded, match="memories:write"):
        services.mint_token(user=owner, caller=caller, name="x", scopes=["agent:read", "memories:write"])
    with pytest.raises(TokenPowerExceeded):
        services.mint_token(user=owner, caller=None, name="x", scopes=["agent:read"])
    assert ApiToken.objects.filter(user=owner).count() == 1


def test_an_expiring_token_mints_tokens_that_expire_no_later(make_client, owner):
    client = make_client(owner, expires_in_days=3)
    inherited = client.post("/api/v1/me/tokens", {"name": "child", "scopes": ["agent:read"]}).json()["data"]
    assert inherited["expires_at"] is not None
    assert ApiToken.objects.get(pk=inherited["id"]).expires_at == client.token.expires_at
    shorter = client.post("/api/v1/me/tokens", {"name": "c2", "scopes": ["agent:read"], "expires_in_days": 2})
    assert shorter.status_code == 201
    longer = client.post("/api/v1/me/tokens", {"name": "c3", "scopes": ["agent:read"], "expires_in_days": 4})
    assert longer.status_code == 403 and "expires" in longer.json()["error"]["message"]
    assert ApiToken.objects.filter(user=owner).count() == 3


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": "5"},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": 5.0},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": " 5"},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": "５"},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": True},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": 0},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": 3651},
        {"name": "x", "scopes": ["agent:read"], "expires_in_days": None},
        {"name": "x", "scopes": ["records:write"]},
        {"name": "x", "scopes": ["memories:write"]},
        {"name": "x", "scopes": ["agent:read", "agent:read"]},
        {"name": "x", "scopes": []},
        {"name": "x", "scopes": "agent:read"},
        {"name": "", "scopes": ["agent:read"]},
        {"name": "x" * 101, "scopes": ["agent:read"]},
        {"name": "tab\there", "scopes": ["agent:read"]},
        {"name": "x\u0000", "scopes": ["agent:read"]},
        {"name": 3, "scopes": ["agent:read"]},
        {"scopes": ["agent:read"]},
        {"name": "x"},
        {"name": "x", "scopes": ["agent:read"], "user": "sam"},
    ],
)
def test_hostile_token_bodies_are_400_and_mint_nothing(owner_client, owner, body):
    response = owner_client.post("/api/v1/me/tokens", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert ApiToken.objects.filter(user=owner).count() == 1


def test_token_list_pages_newest_first(owner_client, owner, django_assert_max_num_queries):
    for n in range(4):
        services.issue_token(user=owner, name=f"t{n}")
    with django_assert_max_num_queries(3):
        first = owner_client.get("/api/v1/me/tokens?limit=3").json()
    names = [row["name"] for row in first["data"]]
    second = owner_client.get(f"/api/v1/me/tokens?limit=3&cursor={first['meta']['next_cursor']}").json()
    names += [row["name"] for row in second["data"]]
    assert names == ["t3", "t2", "t1", "t0", ""]
    assert second["meta"]["next_cursor"] is None


def test_an_unknown_scope_is_told_the_scopes(owner_client):
    refused = owner_client.post("/api/v1/me/tokens", {"name": "ci", "scopes": ["bogus"]}, format="json")
    assert refused.status_code == 400
    assert '"bogus" is not a scope; the scopes: agent:read, memories:write.' in refused.json()["error"]["message"]
    assert not ApiToken.objects.filter(name="ci").exists()
