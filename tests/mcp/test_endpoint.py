"""The /mcp view and the tool registry in-process (Django's test client): HTTP edges, schema derivation."""

from __future__ import annotations

import json
import time

import pytest
from django.db import OperationalError

from accounts import services as account_services
from config import mcp_tools
from config.database import ANSWER_BY
from config.mcp_tools import Tool
from memories.models import Entry
from tests.factories import StoreFactory, UserFactory

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def secret(db):
    return account_services.issue_token(user=UserFactory(handle="alice")).secret


def rpc(client, secret, message, **headers):
    body = message if isinstance(message, (str, bytes)) else json.dumps(message)
    return client.post(
        "/mcp",
        data=body,
        content_type=headers.pop("content_type", "application/json"),
        HTTP_ACCEPT=ACCEPT,
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        **{"HTTP_MCP_PROTOCOL_VERSION": "2025-06-18", **headers},
    )


def call(client, secret, name, arguments):
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    response = rpc(client, secret, message)
    assert response.status_code == 200, response.content
    return response.json()["result"]


@pytest.mark.parametrize("method", ["get", "delete", "put", "patch", "options"])
def test_methods_other_than_post_are_405_with_allow(client, secret, method):
    response = getattr(client, method)("/mcp", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["request_id"] == response["Request-Id"]


def test_a_foreign_browser_origin_is_refused_and_the_own_host_allowed(client, secret, settings):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    foreign = rpc(client, secret, ping, HTTP_ORIGIN="http://evil.example")
    assert foreign.status_code == 403 and foreign.json()["error"]["type"] == "permission_error"
    assert rpc(client, secret, ping, HTTP_ORIGIN="http://testserver").status_code == 200
    settings.MCP_ALLOWED_ORIGINS = ["https://console.example"]
    assert rpc(client, secret, ping, HTTP_ORIGIN="https://console.example").status_code == 200


@pytest.mark.parametrize("origin", ["http://[", "http://[::1", "https://[bad"])
def test_an_unparsable_origin_is_refused_like_a_foreign_one(client, secret, origin):
    """An Origin urlsplit cannot parse is a 403 with the SPEC §2 error object and a Request-Id, not a 500."""
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    response = rpc(client, secret, ping, HTTP_ORIGIN=origin)
    assert response.status_code == 403
    assert response.json()["error"] == {"type": "permission_error", "message": "Origin not allowed."}
    assert response.json()["request_id"] == response["Request-Id"]


def test_transport_rejections_that_are_not_json_rpc_become_the_error_object(client, secret):
    wrong_type = rpc(client, secret, "{}", content_type="text/plain")
    assert wrong_type.status_code == 400
    assert wrong_type.json()["error"] == {"type": "invalid_request_error", "message": "Invalid Content-Type header"}
    assert wrong_type.json()["request_id"] == wrong_type["Request-Id"]


def test_media_types_are_case_insensitive(client, secret):
    """RFC 9110 §8.3.1: `APPLICATION/JSON` is application/json (the SDK compared them as written: 415)."""
    response = client.post(
        "/mcp",
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        content_type="APPLICATION/JSON",
        HTTP_ACCEPT="Application/JSON, Text/Event-Stream",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_MCP_PROTOCOL_VERSION="2025-06-18",
    )
    assert response.status_code == 200 and response.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_json_rpc_errors_stay_json_rpc_and_carry_a_request_id(client, secret):
    broken = rpc(client, secret, b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700
    assert broken["Request-Id"].startswith("req_")
    unknown = rpc(client, secret, {"jsonrpc": "2.0", "id": 2, "method": "resources/list"})
    assert unknown.json()["error"]["code"] == -32601
    not_an_object = rpc(
        client, secret, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x", "arguments": [1]}}
    )
    assert not_an_object.json()["error"] == {
        "code": -32602,
        "message": "Invalid params: params.arguments: Must be an object or null, not an array.",
    }


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
@pytest.mark.parametrize(
    ("params", "problem"),
    [
        (None, "params: This field is required: an object with the tool's name and its arguments."),
        ({"name": 5, "arguments": {}}, "params.name: Must be a string, not an integer."),
        ({"arguments": {}}, "params.name: This field is required."),
        ({"name": "wake_memories", "arguments": "x"}, "params.arguments: Must be an object or null, not a string."),
        ({"name": None}, "params.name: Must be a string, not null."),
    ],
)
def test_tool_call_params_of_the_wrong_type_are_named(client, secret, version, params, problem):
    """The handshake-era SDK answered -32602 "Invalid request parameters" with `"data": ""` for all of these
    (helper-97): the code and id stay, the message names the parameter."""
    message = {"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": params}
    response = rpc(client, secret, message, HTTP_MCP_PROTOCOL_VERSION=version)
    assert response.status_code == 200 and response["Request-Id"].startswith("req_")
    expected = {"code": -32602, "message": f"Invalid params: {problem}"}
    assert response.json() == {"jsonrpc": "2.0", "id": "call-1", "error": expected}


def invalid_request(response, rid=None) -> str:
    """The message of a clean JSON-RPC -32600 answer (HTTP 400, id `rid` — null unless the message is an object
    whose id could be read —, a Request-Id, no library internals)."""
    assert response.status_code == 400 and response["Request-Id"].startswith("req_"), response.content
    assert "pydantic" not in response.content.decode() and "input_value" not in response.content.decode()
    payload = response.json()
    assert payload["id"] == rid and payload["error"]["code"] == -32600, payload
    assert len(payload["error"]["message"]) < 120
    return payload["error"]["message"]


NOT_MESSAGES = [
    b"5",
    b'"x"',
    b"null",
    b"true",
    b"{}",
    b'{"id": 1, "method": "ping"}',
    b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": 1}',
    b'{"jsonrpc": "2.0", "id": 1, "method": 5}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": 5}',
]


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("body", NOT_MESSAGES)
def test_a_body_that_is_no_json_rpc_message_is_a_short_invalid_request(client, secret, version, body):
    """JSON that is no JSON-RPC message (a scalar, no or another `jsonrpc`, no method, bad params) is
    -32600 "Invalid Request" on every revision — not -32602 with pydantic's report echoing the input."""
    parsed = json.loads(body)
    readable = isinstance(parsed, dict) and isinstance(parsed.get("id"), int)  # its id answers (helper-100)
    invalid_request(rpc(client, secret, body, HTTP_MCP_PROTOCOL_VERSION=version), parsed["id"] if readable else None)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "2026-07-28"])
def test_a_batch_after_2025_03_26_is_an_invalid_request(client, secret, version):
    """Revisions after 2025-03-26 removed JSON-RPC batches: a short -32600 that says so."""
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    assert "2025-03-26 only" in invalid_request(rpc(client, secret, batch, HTTP_MCP_PROTOCOL_VERSION=version))


def test_a_2025_03_26_batch_answers_each_message_and_refuses_each_invalid_one(client, secret):
    """Each message of a batch gets its own reply, in order: an invalid one its -32600, an unknown method
    its -32601; an empty batch and one over 50 messages are one -32600 for the whole request."""
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        5,
        {"jsonrpc": "2.0", "id": 7, "method": "resources/list"},
    ]
    response = rpc(client, secret, batch, HTTP_MCP_PROTOCOL_VERSION="2025-03-26")
    assert response.status_code == 200 and response["Request-Id"].startswith("req_")
    ping, invalid, unknown = response.json()
    assert ping == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert invalid["id"] is None and invalid["error"]["code"] == -32600
    assert unknown["id"] == 7 and unknown["error"]["code"] == -32601
    assert "pydantic" not in response.content.decode()
    assert "not 0" in invalid_request(rpc(client, secret, [], HTTP_MCP_PROTOCOL_VERSION="2025-03-26"))
    many = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(51)]
    assert "not 51" in invalid_request(rpc(client, secret, many, HTTP_MCP_PROTOCOL_VERSION="2025-03-26"))


def note_message(rid, store, body):
    arguments = {"id": str(store.pk), "body_md": body}
    params = {"name": "note_memories", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def test_a_refused_batch_member_with_a_lone_surrogate_id_is_answered_not_a_500(client, secret):
    """Found by a breaker: a refused initialize kept its id, a lone surrogate, which the batch's answer
    could not encode as UTF-8 — a 500 after the note beside it had been stored, its reply lost. Since
    2026-12-07 such an id is itself refused and never echoed (a strict client could not parse it): id null."""
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    initialize = {"jsonrpc": "2.0", "id": "\udfff\ud800", "method": "initialize", "params": {}}
    batch = [initialize, note_message(2, store, "kept")]
    response = rpc(client, secret, json.dumps(batch), HTTP_MCP_PROTOCOL_VERSION="2025-03-26")
    assert response.status_code == 200 and b"\\ud" not in response.content.lower()
    refused, noted = response.json()
    assert refused["id"] is None and refused["error"]["code"] == -32600
    assert "lone surrogate" in refused["error"]["message"]
    assert noted["id"] == 2 and noted["result"]["isError"] is False
    assert list(Entry.objects.values_list("body_md", flat=True)) == ["kept"]


def test_a_batch_member_with_a_lone_surrogate_is_a_parse_error_naming_the_field_and_keeps_its_id(client, secret):
    """The SDK could not read the member (pydantic-core refuses a lone surrogate escape), so its -32700 carried
    id null and "unexpected end of hex escape"; we parsed it: the member's id and the field (helper-98)."""
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    batch = [note_message(1, store, "kept"), note_message(2, store, "bad \ud800")]
    response = rpc(client, secret, json.dumps(batch), HTTP_MCP_PROTOCOL_VERSION="2025-03-26")
    assert response.status_code == 200
    noted, refused = response.json()
    assert noted["id"] == 1 and noted["result"]["isError"] is False
    message = "Parse error: params.arguments.body_md: Contains a lone surrogate."
    assert refused == {"jsonrpc": "2.0", "id": 2, "error": {"code": -32700, "message": message}}
    assert list(Entry.objects.values_list("body_md", flat=True)) == ["kept"]
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"reason": "x \ud800"}}
    alone = rpc(client, secret, json.dumps([notification]), HTTP_MCP_PROTOCOL_VERSION="2025-03-26")
    assert alone.status_code == 202 and not alone.content  # a notification gets no reply (it got a -32700)


def test_a_batch_starts_no_member_it_could_not_answer_in_time(client, secret, settings, monkeypatch):
    """The front answers 503 at REQUEST_TIMEOUT whatever a batch has committed; so a batch starts no member
    later than DB_LOCK_TIMEOUT + 1 s before that: the rest are answered "not run" (retry_after), unstored."""
    settings.DB_LOCK_TIMEOUT = 0
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    real_call = mcp_tools.call

    def slow_call(*args, **kwargs):
        time.sleep(0.4)
        return real_call(*args, **kwargs)

    monkeypatch.setattr(mcp_tools, "call", slow_call)
    batch = [note_message(1, store, "first"), {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    batch += [note_message(2, store, "second")]
    answer_by = time.monotonic() + 1.0 + 0.2  # members may start for 0.2 s: the first does, then runs 0.4 s
    response = rpc(client, secret, batch, HTTP_MCP_PROTOCOL_VERSION="2025-03-26", **{ANSWER_BY: answer_by})
    assert response.status_code == 200
    first, second = response.json()
    assert first["id"] == 1 and first["result"]["isError"] is False
    assert second["id"] == 2 and second["error"]["code"] == -32000
    assert second["error"]["data"] == {"type": "overloaded_error", "retry_after": settings.RETRY_AFTER}
    assert list(Entry.objects.values_list("body_md", flat=True)) == ["first"]


def test_a_tool_call_in_process_writes_through_the_rest_service(client, secret):
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    result = call(client, secret, "note_memories", {"id": str(store.pk), "body_md": "in-process", "client_nonce": "k"})
    assert result["isError"] is False and result["structuredContent"]["data"]["seq"] == 0
    assert Entry.objects.get().client_nonce == "k"


def test_a_database_fault_is_a_tool_error_that_says_when_to_retry(client, secret, settings, monkeypatch):
    """REST answers a database fault 503 with Retry-After; a tool result has no headers, so the §2 error
    object carries `retry_after` (whole seconds) — and nothing is written."""
    from memories import services as memory_services

    settings.RETRY_AFTER = 7

    def failing(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(memory_services, "append_entry", failing)
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    result = call(client, secret, "note_memories", {"id": str(store.pk), "body_md": "x", "client_nonce": "k"})
    error = json.loads(result["content"][0]["text"])["error"]
    assert result["isError"] is True and error["type"] == "overloaded_error" and error["retry_after"] == 7
    assert not Entry.objects.exists()


def test_a_fault_before_the_view_also_says_when_to_retry(client, secret, settings, monkeypatch):
    settings.RETRY_AFTER = 3

    def failing(*args, **kwargs):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(mcp_tools, "rest_request", failing)
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    result = call(client, secret, "wake_memories", {"id": str(store.pk)})
    error = json.loads(result["content"][0]["text"])["error"]
    assert result["isError"] is True and error["type"] == "overloaded_error" and error["retry_after"] == 3


@pytest.fixture
def auth_fault(monkeypatch, settings):
    """The database fails while the bearer token is checked — the first query of every /mcp request."""
    from accounts.authentication import BearerTokenAuthentication

    settings.RETRY_AFTER = 4

    def failing(self, request):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(BearerTokenAuthentication, "authenticate", failing)


@pytest.mark.usefixtures("auth_fault")
def test_a_fault_while_the_token_is_checked_is_answered_in_the_protocol(client, secret):
    """REST's 503 body is no JSON-RPC message: the official client reported "Server returned an error
    response" even for `initialize`, and no agent learnt the call was worth repeating (a breaker)."""
    import mcp_types as types

    initialize = {"jsonrpc": "2.0", "id": "i-1", "method": "initialize", "params": {}}
    response = rpc(client, secret, initialize)
    assert response.status_code == 200 and response["Request-Id"]
    reply = types.JSONRPCError.model_validate(response.json())  # what the official client reads
    assert reply.id == "i-1" and reply.error.code == -32000
    assert reply.error.data == {"type": "overloaded_error", "retry_after": 4}

    note = {"id": "00000000-0000-4000-8000-000000000000", "body_md": "x", "client_nonce": "k"}
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "note_memories", "arguments": note},
    }
    response = rpc(client, secret, message)
    assert response.status_code == 200 and response.json()["id"] == 7
    result = types.CallToolResult.model_validate(response.json()["result"])
    error = json.loads(result.content[0].text)
    assert result.is_error and error["error"]["type"] == "overloaded_error" and error["error"]["retry_after"] == 4
    assert error["request_id"] == response["Request-Id"]
    assert not Entry.objects.exists()


@pytest.mark.usefixtures("auth_fault")
def test_a_fault_while_the_token_is_checked_changes_answers_never_which_bodies_are_answered(client, secret):
    """The fault answer runs after every check a body gets anyway: a first version answered each member of a
    1 MB batch (107 MB out), an empty batch, a batch on 2025-06-18 and a JSON-RPC response (a breaker)."""
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert rpc(client, secret, notification).status_code == 202
    assert rpc(client, secret, {"jsonrpc": "2.0", "id": 9, "result": {}}).status_code == 202  # a response
    batch = [notification, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    response = rpc(client, secret, json.dumps(batch), HTTP_MCP_PROTOCOL_VERSION="2025-03-26")
    assert response.status_code == 200
    [reply] = response.json()
    assert reply["id"] == 1 and reply["error"]["data"]["type"] == "overloaded_error"
    for body, version in [
        ([{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(51)], "2025-03-26"),
        ([], "2025-03-26"),
        (batch, "2025-06-18"),
    ]:
        refused = rpc(client, secret, json.dumps(body), HTTP_MCP_PROTOCOL_VERSION=version)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600, refused.content
    unreadable = rpc(client, secret, b"{not json")
    assert unreadable.status_code == 400 and unreadable.json()["error"]["code"] == -32700


def test_a_tool_error_that_is_not_worth_retrying_has_no_retry_after(client, secret):
    result = call(client, secret, "wake_memories", {"id": "00000000-0000-4000-8000-000000000000"})
    error = json.loads(result["content"][0]["text"])["error"]
    assert result["isError"] is True and error["type"] == "not_found_error" and "retry_after" not in error


def test_integers_must_be_json_integers(client, secret):
    store = StoreFactory(owner=UserFactory._meta.model.objects.get(handle="alice"))
    for budget in (32.0, "32", True, None):
        result = call(client, secret, "wake_memories", {"id": str(store.pk), "budget": budget})
        assert result["isError"] is True, budget
        assert json.loads(result["content"][0]["text"])["error"]["message"].startswith("budget: Must be an integer")


# --- the registry: schemas come from the REST operation ------------------------------------------------


def test_a_new_tool_is_one_declaration_for_an_existing_rest_operation(db, client, secret):
    """Declaring a Tool for any documented operation yields its schemas and a working call (here: search)."""
    catalogue = mcp_tools.build_catalogue(
        [Tool(name="search", title="Search", description="Search store names and descriptions.")],
        mcp_tools.openapi_document(),
    )
    search = catalogue["search"]
    assert (search.method, search.path) == ("GET", "/api/v1/search")
    assert search.input_schema["required"] == ["q"]
    assert search.input_schema["properties"]["limit"] == {
        "type": "integer",
        "maximum": 100,
        "minimum": 1,
        "default": 20,
    }
    assert search.output_schema["properties"]["data"]["type"] == "array"


def test_a_tool_naming_no_rest_operation_fails_loudly(db):
    with pytest.raises(LookupError, match="names no REST operation"):
        mcp_tools.build_catalogue([Tool(name="note_memory", title="x", description="y")], mcp_tools.openapi_document())


def test_openapi_schemas_become_self_contained_json_schema():
    """References are inlined; a nullable reference or choice (`oneOf: [X, NullEnum]` + nullable, as
    config.schema writes them for OpenAPI 3.0.3) becomes X admitting null."""
    components = {
        "Job": {"type": "object", "properties": {"range": {"type": "string", "readOnly": True}}},
        "Kind": {"enum": ["a", "b"], "type": "string"},
        "NullEnum": {"enum": [None]},
    }
    null = {"$ref": "#/components/schemas/NullEnum"}
    converted = mcp_tools.json_schema(
        {
            "type": "object",
            "properties": {
                "job": {"oneOf": [{"$ref": "#/components/schemas/Job"}, null], "nullable": True},
                "kind": {"allOf": [{"$ref": "#/components/schemas/Kind"}], "default": "a"},
                "maybe": {"oneOf": [{"$ref": "#/components/schemas/Kind"}, null], "nullable": True},
                "text": {"type": "string", "nullable": True},
            },
        },
        components,
    )
    assert converted["properties"] == {
        "job": {"type": ["object", "null"], "properties": {"range": {"type": "string"}}},
        "kind": {"enum": ["a", "b"], "type": "string", "default": "a"},
        "maybe": {"enum": ["a", "b", None], "type": ["string", "null"]},
        "text": {"type": ["string", "null"]},
    }
    with pytest.raises(ValueError, match="cycle"):
        mcp_tools.json_schema({"$ref": "#/components/schemas/Loop"}, {"Loop": {"$ref": "#/components/schemas/Loop"}})


def test_every_schema_matches_the_serializer_limits_it_came_from():
    """A REST limit is the MCP limit: the schemas are read from the same serializers."""
    from memories import tree
    from memories.api import serializers as log
    from memories.models import NONCE_MAX_CHARS
    from stores.api.pagination import MAX_LIMIT

    catalogue = mcp_tools.catalogue()
    note = catalogue["note_memories"].input_schema["properties"]
    assert note["client_nonce"]["maxLength"] == NONCE_MAX_CHARS
    assert note["body_md"]["description"] == log.NoteRequestSerializer().fields["body_md"].help_text
    wake = catalogue["wake_memories"].input_schema["properties"]["budget"]
    field = log.WakeQuerySerializer().fields["budget"]
    assert (wake["minimum"], wake["maximum"], wake["default"]) == (field.min_value, field.max_value, field.default)
    assert catalogue["list_memories"].input_schema["properties"]["limit"]["maximum"] == MAX_LIMIT
    zoom = catalogue["zoom_memories"].input_schema["properties"]["range"]
    assert (zoom["pattern"], zoom["maxLength"]) == (f"^{tree.RANGE_SYNTAX}$", log.RANGE_MAX_CHARS)


@pytest.mark.parametrize("version", ["2099-01-01", "garbage", "2026-07-28 "])
def test_an_unknown_protocol_version_is_named_as_such(client, secret, version):
    """The SDK answered an unknown MCP-Protocol-Version with the 2026 envelope's "params._meta must be an
    object carrying …" (helper-97, helper-100): HTTP 400 with the SDK's UNSUPPORTED_PROTOCOL_VERSION error."""
    response = rpc(client, secret, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, HTTP_MCP_PROTOCOL_VERSION=version)
    assert response.status_code == 400 and response["Request-Id"].startswith("req_")
    supported = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {
            "code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": supported, "requested": version},
        },
    }
