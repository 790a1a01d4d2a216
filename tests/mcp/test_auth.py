"""The same bearer tokens and scopes as REST: 401 with WWW-Authenticate at the HTTP level, 403 tool errors."""

from __future__ import annotations

import httpx
import pytest
from django.utils import timezone
from mcp.shared.exceptions import MCPError

from accounts import services as account_services
from accounts.models import ApiToken
from memories.models import Entry
from stores.models import Store
from tests.factories import StoreFactory
from tests.mcp.test_tools import body_of, error_of

pytestmark = pytest.mark.django_db(transaction=True)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def post(live, message: dict, token: str | None = None, **headers) -> httpx.Response:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(live.mcp_url, json=message, headers={**ACCEPT, **auth, **headers}, timeout=30)


def test_no_token_is_401_with_a_bearer_challenge_before_any_json_rpc(live):
    response = post(live, INITIALIZE)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="memories"'
    body = response.json()
    assert body["error"]["type"] == "authentication_error" and body["request_id"] == response.headers["Request-Id"]


@pytest.mark.parametrize("header", ["Bearer mem_not-a-real-token", "Basic YWxpY2U6cHc=", "Bearer", "Bearer a b"])
def test_a_bad_token_or_header_is_401_invalid_token(live, header):
    response = httpx.post(live.mcp_url, json=INITIALIZE, headers={**ACCEPT, "Authorization": header}, timeout=30)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="memories", error="invalid_token"'
    assert response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("secret", "kind"), [("menv_anything", "an environment key"), ("mwork_anything", "a per-work credential")]
)
def test_an_agent_credential_is_401_naming_what_mcp_takes(live, secret, kind):
    """REST names the credential an endpoint does not take; /mcp said "Invalid API token." (a breaker)."""
    response = post(live, INITIALIZE, secret)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == f"This endpoint does not accept {kind}; it takes an API token."


def test_revoked_and_expired_tokens_and_inactive_users_are_401(live, alice, make_agent):
    ApiToken.objects.filter(user=alice.user).update(revoked_at=timezone.now())
    assert post(live, INITIALIZE, alice.secret).json()["error"]["message"] == "This API token has been revoked."
    carol = make_agent("carol")
    ApiToken.objects.filter(user=carol.user).update(expires_at=timezone.now())
    assert post(live, INITIALIZE, carol.secret).status_code == 401
    dave = make_agent("dave")
    dave.user.is_active = False
    dave.user.save(update_fields=["is_active"])
    assert post(live, INITIALIZE, dave.secret).status_code == 401


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def test_the_official_client_with_a_bad_token_cannot_connect(mcp_client):
    with pytest.raises(BaseException) as failure, mcp_client("mem_wrong"):
        pytest.fail("connected with a bad token")
    assert any(isinstance(leaf, MCPError) for leaf in _leaves(failure.value)), failure.value


def test_a_read_only_token_reads_and_gets_a_scope_error_for_writes(mcp_client, make_agent):
    reader = make_agent("reader", scopes=["agent:read"])
    store = StoreFactory(owner=reader.user)
    with mcp_client(reader.secret) as client:
        assert body_of(client.call_tool("wake_memories", {"id": str(store.pk)}))["data"]["entry_count"] == 0
        denied = error_of(client.call_tool("note_memories", {"id": str(store.pk), "body_md": "x"}))
        ensure = error_of(client.call_tool("ensure_memories", {}))
    assert denied == ensure == {"type": "permission_error", "message": "This token lacks the scope(s): memories:write."}
    assert not Entry.objects.exists() and Store.objects.count() == 1


def test_a_token_without_agent_read_cannot_read(mcp_client, make_agent):
    """No token is issued so any more (`normalise_scopes`), but `manage.py create_token` made them before."""
    writer = make_agent("writer")
    ApiToken.objects.filter(user__handle="writer").update(scopes=["memories:write"])
    with mcp_client(writer.secret) as client:
        error = error_of(client.call_tool("list_memories", {}))
    assert error["type"] == "permission_error" and "agent:read" in error["message"]


def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(live, alice):
    response = post(
        live,
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "drop_tables", "arguments": {}}},
        alice.secret,
        **{"MCP-Protocol-Version": "2025-06-18"},
    )
    assert response.status_code == 200
    assert response.json()["error"] == {"code": -32602, "message": "Unknown tool: drop_tables"}


def test_tool_errors_quote_the_request_id_of_their_http_response(live, alice):
    response = post(
        live,
        {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "get_memories", "arguments": {"id": "x"}},
        },
        alice.secret,
        **{"MCP-Protocol-Version": "2025-06-18"},
    )
    result = response.json()["result"]
    assert result["isError"] is True
    assert f'"request_id": "{response.headers["Request-Id"]}"' in result["content"][0]["text"]


def test_the_token_is_the_caller_on_every_tool(mcp_client, alice):
    """The note's author and the cursor binding are the token's user, as on REST."""
    other = account_services.issue_token(user=alice.user).secret  # a second token of the same user
    with mcp_client(alice.secret) as first, mcp_client(other) as second:
        store = body_of(first.call_tool("ensure_memories", {}))["data"]["id"]
        body_of(second.call_tool("note_memories", {"id": store, "body_md": "via another token"}))
    assert Entry.objects.get().author == alice.user
