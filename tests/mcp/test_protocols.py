"""Protocol revisions and workers: 2025-03-26 … 2026-07-28 clients, on any gunicorn worker (SPEC §8)."""

from __future__ import annotations

import json

import httpx
import mcp.client.session as client_session
import pytest
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from memories.models import Entry
from stores.models import Store

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED_TOOLS = [
    "list_memories",
    "ensure_memories",
    "resolve_memories",
    "get_memories",
    "update_memories",
    "list_memories_readers",
    "share_memories",
    "delete_memories",
    "note_memories",
    "wake_memories",
    "nap_memories",
    "compact_memories",
    "recall_memories",
    "zoom_memories",
    "forget_memories",
    "redact_memories_entry",
]


def _ensure_and_note(client, body: str) -> dict:
    store = client.call_tool("ensure_memories", {})
    assert not store.is_error, store.content
    noted = client.call_tool("note_memories", {"id": store.structured_content["data"]["id"], "body_md": body})
    assert not noted.is_error, noted.content
    return noted.structured_content


def test_a_current_client_negotiates_2026_07_28_without_initialize(mcp_client, alice):
    with mcp_client(alice.secret) as client:
        assert client.protocol_version == LATEST_MODERN_VERSION == "2026-07-28"
        assert [tool.name for tool in client.list_tools().tools] == EXPECTED_TOOLS
        noted = _ensure_and_note(client, "from a 2026-07-28 client")
    assert noted["data"]["seq"] == 0
    assert Entry.objects.get(store__owner=alice.user).body_md == "from a 2026-07-28 client"


def test_a_legacy_client_runs_the_initialize_handshake(mcp_client, alice):
    with mcp_client(alice.secret, mode="legacy") as client:
        assert client.protocol_version == LATEST_HANDSHAKE_VERSION == "2025-11-25"
        assert client.session.initialize_result.server_info.name == "memories"
        assert [tool.name for tool in client.list_tools().tools] == EXPECTED_TOOLS
        _ensure_and_note(client, "from a 2025-11-25 client")
    assert Entry.objects.filter(store__owner=alice.user).count() == 1


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18"])
def test_the_official_client_offering_an_older_revision_gets_it(mcp_client, alice, monkeypatch, version):
    # The SDK's client always offers its newest handshake revision; offering an older one is what an
    # older client does on the wire (initialize.params.protocolVersion, then that MCP-Protocol-Version).
    monkeypatch.setattr(client_session, "LATEST_HANDSHAKE_VERSION", version)
    with mcp_client(alice.secret, mode="legacy") as client:
        assert client.protocol_version == version
        _ensure_and_note(client, f"from a {version} client")
    assert Entry.objects.get(store__owner=alice.user).body_md == f"from a {version} client"


def _rpc(http: httpx.Client, url: str, message: dict, headers: dict | None = None) -> httpx.Response:
    return http.post(
        url,
        json=message,
        headers={"Accept": "application/json, text/event-stream", **(headers or {})},
    )


def test_a_2025_03_26_client_without_the_protocol_header_works_message_by_message(live, alice):
    """2025-03-26 predates MCP-Protocol-Version: initialize, initialized, tools/list, tools/call, bare."""
    with httpx.Client(headers={"Authorization": f"Bearer {alice.secret}"}, timeout=30) as http:
        init = _rpc(
            http,
            live.mcp_url,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {},
                    "clientInfo": {"name": "old", "version": "0"},
                },
            },
        )
        assert init.status_code == 200 and "mcp-session-id" not in init.headers  # stateless: no session
        assert init.json()["result"]["protocolVersion"] == "2025-03-26"
        assert _rpc(http, live.mcp_url, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        listed = _rpc(http, live.mcp_url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).json()
        assert [tool["name"] for tool in listed["result"]["tools"]] == EXPECTED_TOOLS
        ensured = _rpc(
            http,
            live.mcp_url,
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ensure_memories", "arguments": {}}},
        ).json()["result"]
    assert ensured["isError"] is False
    assert ensured["structuredContent"]["data"]["id"] == str(Store.objects.get(owner=alice.user).pk)


def test_a_2025_03_26_client_may_send_a_batch(live, alice):
    """2025-03-26 servers MUST accept JSON-RPC batches (removed in 2025-06-18): a batch without the protocol
    header (2025-03-26 predates it) is answered with the array of its requests' replies, in order — here a
    ping, tools/list and a tool call that really ran — and a batch of notifications alone with 202."""
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ensure_memories", "arguments": {}}},
    ]
    with httpx.Client(headers={"Authorization": f"Bearer {alice.secret}"}, timeout=30) as http:
        response = http.post(live.mcp_url, json=batch, headers={"Accept": "application/json, text/event-stream"})
        notified = http.post(live.mcp_url, json=[batch[1]], headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 200 and response.headers["request-id"].startswith("req_")
    ping, listed, ensured = response.json()
    assert [ping["id"], listed["id"], ensured["id"]] == [1, 2, 3]
    assert ping["result"] == {}
    assert [tool["name"] for tool in listed["result"]["tools"]] == EXPECTED_TOOLS
    assert ensured["result"]["structuredContent"]["data"]["id"] == str(Store.objects.get(owner=alice.user).pk)
    assert notified.status_code == 202 and notified.content == b""


BAD_IDS = [None, 1.5, 1.0, True, [1], {"a": 1}]


@pytest.mark.parametrize("bad_id", BAD_IDS)
@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25"])
def test_a_request_whose_id_is_no_string_or_integer_is_invalid_not_a_notification(live, alice, bad_id, version):
    """The SDK read such a request as a notification: 202, nothing run, no reply — the client waits for one
    forever. MCP allows string and integer ids only (never null): -32600 with id null, and nothing runs."""
    message = {"jsonrpc": "2.0", "id": bad_id, "method": "tools/call"}
    message["params"] = {"name": "ensure_memories", "arguments": {}}
    with httpx.Client(headers={"Authorization": f"Bearer {alice.secret}"}, timeout=30) as http:
        response = _rpc(http, live.mcp_url, message, {"MCP-Protocol-Version": version})
    assert response.status_code == 400
    body = response.json()
    assert body["id"] is None and body["error"]["code"] == -32600
    assert "id must be a string or an integer" in body["error"]["message"]
    assert not Store.objects.filter(owner=alice.user).exists()


@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25", "2026-07-28"])
def test_a_request_id_holding_a_lone_surrogate_is_invalid_and_never_echoed(live, alice, version):
    """JSON-RPC echoes the id, and a lone surrogate has no UTF-8 form: the reply carried ``"\\ud800"``, which
    strict clients cannot parse (a breaker). It is -32600 with id null, alone and in a batch; nothing runs."""
    message = {"jsonrpc": "2.0", "id": "req-\ud800", "method": "tools/call"}
    message["params"] = {"name": "ensure_memories", "arguments": {}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": version,
    }
    with httpx.Client(headers={"Authorization": f"Bearer {alice.secret}"}, timeout=30) as http:
        # json.dumps writes the surrogate as an escape (httpx's own encoding would fail on it)
        response = http.post(live.mcp_url, content=json.dumps(message), headers=headers)
        batch = None
        if version == "2025-03-26":
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            batch = http.post(live.mcp_url, content=json.dumps([message, ping]), headers=headers)
    assert response.status_code == 400
    assert b"\\ud800" not in response.content.lower()
    body = response.json()
    assert body["id"] is None and body["error"]["code"] == -32600
    assert body["error"]["message"] == (
        "Invalid Request: a request's id must be a string of Unicode text; this one holds a lone surrogate."
    )
    if batch is not None:
        assert batch.status_code == 200 and b"\\ud800" not in batch.content.lower()
        bad, ping = batch.json()
        assert bad["id"] is None and bad["error"]["code"] == -32600 and "lone surrogate" in bad["error"]["message"]
        assert ping == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert not Store.objects.filter(owner=alice.user).exists()


@pytest.mark.parametrize("batch", [False, True])
def test_an_encoded_surrogate_is_no_utf_8_and_a_parse_error(live, alice, batch):
    """ED A0 80 is a surrogate encoded as UTF-8 would, which UTF-8 forbids: Python's `json.loads(bytes)` took it
    (surrogatepass), so the id was refused as "holds a lone surrogate" (helper-102). It is -32700 like any
    other byte that is not UTF-8, and nothing runs."""
    message = b'{"jsonrpc":"2.0","id":"\xed\xa0\x80","method":"tools/call","params":{"name":"ensure_memories"}}'
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(headers={"Authorization": f"Bearer {alice.secret}"}, timeout=30) as http:
        response = http.post(live.mcp_url, content=b"[" + message + b"]" if batch else message, headers=headers)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["id"] is None and body["error"]["code"] == -32700, body
    assert not Store.objects.filter(owner=alice.user).exists()


def test_a_batch_answers_its_invalid_members_in_place_and_runs_the_rest(live, alice):
    """JSON-RPC answers each invalid member of a batch with its own error: a request with an array id
    (id null in the reply) and an initialize (MCP 2025-03-26: never part of a batch; its own id) — the
    valid members around them are answered in order and run."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}},
    }
    batch = [
        {"jsonrpc": "2.0", "id": [1], "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        initialize,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ensure_memories", "arguments": {}}},
    ]
    with httpx.Client(headers={"Authorization": f"Bearer {alice.secret}"}, timeout=30) as http:
        response = http.post(live.mcp_url, json=batch, headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 200
    bad, ping, init, ensured = response.json()
    assert bad["id"] is None and bad["error"]["code"] == -32600 and "id must be" in bad["error"]["message"]
    assert ping == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert init["id"] == 4 and init["error"]["code"] == -32600 and "batch" in init["error"]["message"]
    assert ensured["id"] == 3
    assert ensured["result"]["structuredContent"]["data"]["id"] == str(Store.objects.get(owner=alice.user).pk)


@pytest.mark.serial  # counts which workers served
def test_messages_of_one_conversation_served_by_different_workers_all_succeed(live, mcp_client, alice):
    """New TCP connection per request, so the kernel spreads them over both workers; the access log (pid +
    Request-Id) proves the initialize and later tool calls were answered by different processes."""
    store_id = None
    with mcp_client(alice.secret, mode="legacy", keepalive=False) as client:
        store_id = client.call_tool("ensure_memories", {}).structured_content["data"]["id"]
        for attempt in range(40):  # bounded: stop as soon as both workers have served a tool call
            result = client.call_tool("note_memories", {"id": store_id, "body_md": f"note {attempt}"})
            assert not result.is_error, result.content
            served = live.served_by(client.request_ids())
            if len(set(served.values())) >= 2:
                break
        request_ids = client.request_ids()
    served = live.served_by(request_ids)
    assert len(served) == len(request_ids)  # every message is in the log
    assert set(served.values()) == live.worker_pids()  # both workers took part in one conversation
    first_worker = served[request_ids[0]]  # the initialize
    assert any(pid != first_worker for pid in served.values())
    notes = Entry.objects.filter(store_id=store_id).order_by("seq")
    assert [entry.body_md for entry in notes] == [f"note {n}" for n in range(notes.count())]
