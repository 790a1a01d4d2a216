"""Hostile arguments end in tool errors (SPEC §2 error object) and change nothing (SPEC §2, §8)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from config import mcp_tools
from config.fields import JSON_TYPE_NAMES
from memories.models import Entry
from stores.models import ReaderGrant, Store
from tests.factories import ReaderGrantFactory, StoreFactory
from tests.mcp.test_tools import error_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice_store(alice):
    return StoreFactory(owner=alice.user, name="Alice")


def snapshot() -> tuple:
    """Everything a hostile call could have changed."""
    stores = sorted(Store.objects.values_list("id", "name", "description", "visibility", "entry_count", "generation"))
    entries = sorted(Entry.objects.values_list("store_id", "seq", "body_md"))
    grants = sorted(ReaderGrant.objects.values_list("store_id", "user_id", "active"))
    return stores, entries, grants


WRONG_TYPES = [
    ("note_memories", {"body_md": 5}, "body_md"),
    ("note_memories", {"body_md": "x", "client_nonce": 7}, "client_nonce"),
    ("wake_memories", {"budget": "64"}, "budget"),
    ("wake_memories", {"budget": 64.0}, "budget"),
    ("wake_memories", {"budget": True}, "budget"),
    ("wake_memories", {"snapshot": "5"}, "snapshot"),
    ("recall_memories", {"pattern": "x", "case_sensitive": "true"}, "case_sensitive"),
    ("recall_memories", {"pattern": "x", "case_sensitive": "false"}, "case_sensitive"),
    ("recall_memories", {"pattern": "x", "case_sensitive": "maybe"}, "case_sensitive"),
    ("recall_memories", {"pattern": "x", "case_sensitive": 0}, "case_sensitive"),
    ("recall_memories", {"pattern": "x", "limit": "5"}, "limit"),
    ("share_memories", {"handle": "bob", "active": "true"}, "active"),
    ("share_memories", {"handle": "bob", "active": "false"}, "active"),
    ("share_memories", {"handle": "bob", "active": 1}, "active"),
    ("update_memories", {"visibility": True}, "visibility"),
    ("update_memories", {"name": ["a"]}, "name"),
    ("delete_memories", {"expected_entry_count": "0", "generation": 1}, "expected_entry_count"),
    ("delete_memories", {"expected_entry_count": 0, "generation": "1"}, "generation"),
    ("forget_memories", {"range": "0-1", "generation": "1"}, "generation"),
    (
        "compact_memories",
        {"range": 0, "generation": 1, "source_digest": "0" * 64, "summary_md": "s", "model": "m"},
        "range",
    ),
    ("zoom_memories", {"range": "0", "snapshot": True}, "snapshot"),
    ("get_memories", {"id": 5}, "id"),
]


def test_a_wrong_json_type_is_a_tool_error_never_coerced(mcp_client, alice, bob, alice_store):
    # One test (one database flush) for the whole table; each row names the case that failed.
    before = snapshot()
    with mcp_client(alice.secret) as client:
        for tool, arguments, field in WRONG_TYPES:
            error = error_of(client.call_tool(tool, {"id": str(alice_store.pk), **arguments}))
            assert error["type"] == "invalid_request_error", (tool, arguments)
            assert error["message"].startswith(f"{field}: Must be "), (tool, arguments, error)
            assert error["details"]["fields"][field].startswith("Must be "), (tool, arguments)
    assert snapshot() == before


def test_unknown_arguments_are_tool_errors(mcp_client, alice, alice_store):
    before = snapshot()
    with mcp_client(alice.secret) as client:
        note = error_of(client.call_tool("note_memories", {"id": str(alice_store.pk), "body_md": "x", "author": "eve"}))
        wake = error_of(client.call_tool("wake_memories", {"id": str(alice_store.pk), "pk": "x"}))
        ensure = error_of(client.call_tool("ensure_memories", {"owner": "eve"}))
        empty = error_of(client.call_tool("note_memories", {"id": str(alice_store.pk), "body_md": "x", "": 1}))
    assert note["message"] == "author: Unknown field." and wake["message"] == "pk: Unknown field."
    assert ensure["details"]["fields"] == {"owner": "Unknown field."}
    assert empty["message"] == '"": Unknown field.' and empty["details"]["fields"] == {'""': "Unknown field."}
    assert snapshot() == before


NULS = [
    ("note_memories", {"body_md": "a\x00b"}, "body_md"),
    ("note_memories", {"body_md": "ok", "client_nonce": "n\x00"}, "client_nonce"),
    ("recall_memories", {"pattern": "a\x00"}, "pattern"),
    ("update_memories", {"name": "x\x00"}, "name"),
    ("share_memories", {"handle": "bob\x00"}, "handle"),
    ("get_memories", {"id": "\x00"}, "id"),
]


def test_nul_characters_are_tool_errors(mcp_client, alice, alice_store):
    before = snapshot()
    with mcp_client(alice.secret) as client:
        for tool, arguments, field in NULS:
            error = error_of(client.call_tool(tool, {"id": str(alice_store.pk), **arguments}))
            assert error["type"] == "invalid_request_error", (tool, arguments)
            assert error["message"] == f"{field}: Contains a NUL character.", (tool, arguments, error)
    assert snapshot() == before


MODERN = {"MCP-Protocol-Version": "2026-07-28"}


def _raw_call(live, token: str, raw_arguments: str, *, version: str = "2026-07-28") -> httpx.Response:
    """A tools/call whose arguments are written as raw JSON text (the official client cannot send lone
    surrogates: it refuses to encode them), at protocol `version`."""
    meta = ""
    if version == "2026-07-28":  # the single-exchange envelope carries the version and client in _meta
        meta = (
            '"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", '
            '"io.modelcontextprotocol/clientCapabilities": {}, '
            '"io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}, '
        )
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {' + meta + '"name": "note_memories", '
        f'"arguments": {raw_arguments}}}}}'
    )
    return httpx.post(
        live.mcp_url,
        content=body.encode("utf-8"),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": version,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "note_memories",
        },
        timeout=30,
    )


SURROGATES = [
    ('{{"id": "{id}", "body_md": "\\ud800"}}', "body_md: Contains a lone surrogate."),
    ('{{"id": "{id}", "body_md": "ok \\udfff"}}', "body_md: Contains a lone surrogate."),
    ('{{"id": "{id}", "body_md": "ok", "\\ud800": 1}}', "arguments: Has a key that contains a lone surrogate."),
    ('{{"id": "{id}\\ud800", "body_md": "ok"}}', "id: Contains a lone surrogate."),
]


def test_lone_surrogates_are_tool_errors(live, alice, alice_store):
    """2026-07-28 requests are parsed by Python's json (which keeps lone surrogates): our screening names
    the argument in a tool error."""
    before = snapshot()
    for raw, message in SURROGATES:
        response = _raw_call(live, alice.secret, raw.format(id=alice_store.pk))
        assert response.status_code == 200, raw
        result = response.json()["result"]
        assert result["isError"] is True and "structuredContent" not in result, raw
        error = json.loads(result["content"][0]["text"])
        assert error["error"]["message"] == message, (raw, error)
        assert error["request_id"] == response.headers["Request-Id"]
    assert snapshot() == before


def test_lone_surrogates_on_handshake_revisions_are_a_parse_error_naming_the_field(live, alice, alice_store):
    """The handshake-era transport parses with pydantic-core, which refuses a lone surrogate escape as
    invalid JSON: JSON-RPC -32700 with HTTP 400, before any tool runs. Its words ("unexpected end of hex escape
    at line 1 column 167") named no field and called valid JSON broken (helper-98): the message names the
    field in the words of REST and of 2026-07-28's tool error."""
    before = snapshot()
    for raw, message in SURROGATES:
        response = _raw_call(live, alice.secret, raw.format(id=alice_store.pk), version="2025-06-18")
        assert response.status_code == 400, raw
        assert response.headers["Request-Id"].startswith("req_")
        error = response.json()["error"]
        assert response.json()["id"] == 1  # parsed by us, so answered with it (was null; helper-99)
        field = "params." if message.startswith("arguments:") else "params.arguments."
        assert error == {"code": -32700, "message": f"Parse error: {field}{message}"}, (raw, error)
    assert snapshot() == before


def test_other_parse_errors_keep_the_sdks_words(live, alice):
    """Only a lone surrogate is renamed: JSON that no parser reads keeps the SDK's report."""
    response = httpx.post(
        live.mcp_url,
        content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"',
        headers={
            "Authorization": f"Bearer {alice.secret}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
        timeout=30,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (
        error["code"] == -32700 and error["message"].startswith("Parse error: ") and "arguments" not in error["message"]
    )


def test_an_entry_over_1024_utf8_bytes_is_a_tool_error_exactly_1024_is_stored(mcp_client, alice, alice_store):
    with mcp_client(alice.secret) as client:
        error = error_of(client.call_tool("note_memories", {"id": str(alice_store.pk), "body_md": "é" * 512 + "x"}))
        assert error["message"] == "body_md: Text is 1025 UTF-8 bytes; the limit is 1024 bytes."
        assert not Entry.objects.exists()
        stored = client.call_tool("note_memories", {"id": str(alice_store.pk), "body_md": "é" * 512})
    assert not stored.is_error and Entry.objects.get().size_bytes == 1024


def test_a_request_body_over_the_ceiling_is_413_before_any_json_rpc(live, alice, alice_store, settings):
    before = snapshot()
    filler = "x" * (1024 * 1024)
    response = _raw_call(live, alice.secret, json.dumps({"id": str(alice_store.pk), "body_md": filler}))
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"
    assert response.json()["request_id"] == response.headers["Request-Id"]
    assert snapshot() == before


def test_oversized_and_malformed_scalars_are_tool_errors(mcp_client, alice, alice_store):
    before = snapshot()
    store = str(alice_store.pk)
    with mcp_client(alice.secret) as client:
        huge = error_of(client.call_tool("wake_memories", {"id": store, "budget": 10**30}))
        long_pattern = error_of(client.call_tool("recall_memories", {"id": store, "pattern": "a" * 201}))
        hostile_regex = error_of(client.call_tool("recall_memories", {"id": store, "pattern": "(a)\\1"}))
        bad_range = error_of(client.call_tool("zoom_memories", {"id": store, "range": "1-2"}))
        tampered = error_of(client.call_tool("recall_memories", {"id": store, "pattern": "a", "cursor": "x" * 50}))
    assert huge["details"]["fields"]["budget"].startswith("Ensure this value is less than or equal to 128")
    assert "200" in long_pattern["message"] and "pattern" in hostile_regex["message"]
    assert "range" in bad_range["message"] and "cursor" in tampered["message"]
    assert snapshot() == before


def test_another_users_store_is_not_found_exactly_like_a_missing_one(mcp_client, alice, bob):
    private = StoreFactory(owner=bob.user, name="Bob's secrets")
    Entry.objects.create(store=private, seq=0, author=bob.user, body_md="secret", size_bytes=6)
    Store.objects.filter(pk=private.pk).update(entry_count=1)
    before = snapshot()
    missing = str(uuid.uuid4())
    calls = [
        ("get_memories", {}),
        ("wake_memories", {}),
        ("recall_memories", {"pattern": "secret"}),
        ("zoom_memories", {"range": "0"}),
        ("nap_memories", {}),
        ("note_memories", {"body_md": "pwned"}),
        ("update_memories", {"name": "pwned"}),
        ("share_memories", {"handle": "alice"}),
        ("forget_memories", {"range": "0", "generation": 1}),
        ("delete_memories", {"expected_entry_count": 1, "generation": 1}),
        ("list_memories_readers", {}),
    ]
    with mcp_client(alice.secret) as client:
        for tool, arguments in calls:
            theirs = error_of(client.call_tool(tool, {"id": str(private.pk), **arguments}))
            nobody = error_of(client.call_tool(tool, {"id": missing, **arguments}))
            assert theirs == nobody == {"type": "not_found_error", "message": "Store not found."}, tool
        for weird in ("not-a-uuid", "../../memories", f"{private.pk}/readers", "%2e%2e", f"{missing}\n"):
            assert error_of(client.call_tool("get_memories", {"id": weird}))["type"] == "not_found_error"
        resolved = error_of(client.call_tool("resolve_memories", {"scope": "user", "subject": "bob"}))
    assert resolved["type"] == "not_found_error"
    assert snapshot() == before


# Every tool with a path parameter, with the other arguments it needs to pass its own validation.
PATH_TOOLS = {
    "get_memories": {},
    "update_memories": {"name": "x"},
    "list_memories_readers": {},
    "share_memories": {"handle": "bob"},
    "delete_memories": {"expected_entry_count": 0, "generation": 1},
    "note_memories": {"body_md": "x"},
    "wake_memories": {},
    "nap_memories": {},
    "compact_memories": {"range": "0", "generation": 1, "source_digest": "0" * 64, "summary_md": "s", "model": "m"},
    "recall_memories": {"pattern": "x"},
    "zoom_memories": {"range": "0"},
    "forget_memories": {"range": "0", "generation": 1},
    "redact_memories_entry": {"seq": 0, "reason": "r"},
}


def test_an_id_that_spells_another_route_reaches_no_other_operation(mcp_client, alice, bob, alice_store):
    """A tool runs only its own operation's view: an `id` such as `resolve` or `imports` (a route next to
    `/memories/{id}`), a slash or an empty id is that view's "Store not found.", exactly as a random UUID,
    for every tool with a path parameter; and nothing changes (before, `get_memories {"id": "resolve"}`
    answered resolve_memories, and `"imports"` reached the import views)."""
    assert set(PATH_TOOLS) == {name for name, operation in mcp_tools.catalogue().items() if operation.path_params}
    before = snapshot()
    spellings = ("resolve", "imports", f"imports/{uuid.uuid4()}", f"{alice_store.pk}/readers", "me", "", "..")
    with mcp_client(alice.secret) as client:
        for tool, arguments in PATH_TOOLS.items():
            missing = error_of(client.call_tool(tool, {"id": str(uuid.uuid4()), **arguments}))
            assert missing == {"type": "not_found_error", "message": "Store not found."}, tool
            for spelling in spellings:
                assert error_of(client.call_tool(tool, {"id": spelling, **arguments})) == missing, (tool, spelling)
    assert snapshot() == before


def test_an_own_store_id_with_a_trailing_newline_is_not_found(mcp_client, alice, alice_store):
    """Found by a breaker: the id check's `$` let "<uuid>\\n" through to uuid.UUID — an api_error (500)."""
    with mcp_client(alice.secret) as client:
        for tool in ("get_memories", "wake_memories", "note_memories"):
            arguments = {"id": f"{alice_store.pk}\n", **({"body_md": "x"} if tool == "note_memories" else {})}
            assert error_of(client.call_tool(tool, arguments)) == {
                "type": "not_found_error",
                "message": "Store not found.",
            }, tool
        resolved = error_of(client.call_tool("resolve_memories", {"ref": f"^{alice_store.pk}\n"}))
    assert resolved["type"] == "invalid_request_error"
    assert not Entry.objects.exists()


def test_a_reader_may_read_but_writing_is_a_permission_tool_error(mcp_client, alice, bob):
    shared = StoreFactory(owner=bob.user, name="Bob's shared notes")
    ReaderGrantFactory(store=shared, user=alice.user)
    before = snapshot()
    with mcp_client(alice.secret) as client:
        assert not client.call_tool("wake_memories", {"id": str(shared.pk)}).is_error
        denied = error_of(client.call_tool("note_memories", {"id": str(shared.pk), "body_md": "mine now"}))
        not_owner = error_of(client.call_tool("update_memories", {"id": str(shared.pk), "visibility": "public"}))
    assert denied["type"] == not_owner["type"] == "permission_error"
    assert snapshot() == before


def test_an_archived_store_refuses_writes_with_the_spec_reason(mcp_client, alice):
    from django.utils import timezone

    archived = StoreFactory(owner=alice.user, archived_at=timezone.now())
    with mcp_client(alice.secret) as client:
        error = error_of(client.call_tool("note_memories", {"id": str(archived.pk), "body_md": "late"}))
    assert error["type"] == "conflict_error" and error["details"] == {"reason": "store_archived"}
    assert not Entry.objects.exists()


@pytest.mark.parametrize("version", ["2026-07-28", "2025-06-18"])
def test_a_key_given_twice_is_a_parse_error_as_over_rest_and_nothing_is_noted(live, alice, alice_store, version):
    """REST refuses `{"body_md": "a", "body_md": "b"}` (400); through /mcp the last key must not win either."""
    before = snapshot()
    raw = f'{{"id": "{alice_store.pk}", "body_md": "FIRST", "body_md": "SECOND"}}'
    response = _raw_call(live, alice.secret, raw, version=version)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32700 and '"body_md" appears more than once' in error["message"]
    assert response.headers["Request-Id"].startswith("req_")
    assert snapshot() == before


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b'{"a": 1, "b": {"c": 1, "c": 2}}', '"c"'),  # nested objects too
        (b'{"a": 1}', None),
        (b"\xff\xfe{\x00}\x00", None),  # not UTF-8: the SDK's own parse error, not ours
        (b'\xef\xbb\xbf{"a": 1, "a": 2}', None),  # a BOM is not JSON: left to the SDK as before
        (b"[" * 100_000, None),  # too deep to parse: left to the SDK
        (b"not json", None),
    ],
)
def test_duplicate_key_names_only_a_repeated_key(raw, named):
    from config.parsers import duplicate_key

    found = duplicate_key(raw)
    assert (found is None) if named is None else (named in found)


# tool, the REST method and path under /api/v1/memories/{id} it calls, valid other arguments, the field tried,
# and the JSON types that field takes (a value of those would be a valid call, so it is not tried)
TYPED_FIELDS = [
    ("note_memories", "POST", "/note", {}, "body_md", {"string"}),
    ("note_memories", "POST", "/note", {"body_md": "x"}, "client_nonce", {"string", "null"}),
    ("update_memories", "PATCH", "", {}, "name", {"string"}),
    ("forget_memories", "POST", "/forget", {"range": "0-1"}, "generation", {"integer"}),
    (
        "compact_memories",
        "POST",
        "/compact",
        {"generation": 1, "source_digest": "0" * 64, "summary_md": "s", "model": "m"},
        "range",
        {"string"},
    ),
]
JSON_VALUES = {"null": None, "integer": 5, "number": 2.5, "boolean": True, "array": [], "object": {}, "string": "x"}


def test_rest_and_mcp_refuse_a_json_type_in_the_same_words(live, mcp_client, alice, alice_store):
    """REST said "This field may not be null." and "A valid integer is required." where /mcp said "Must be a
    string, not null." (a tester): one message for the same argument, whichever door."""
    before = snapshot()
    headers = {"Authorization": f"Bearer {alice.secret}"}
    tried = 0
    with mcp_client(alice.secret) as client:
        for tool, method, suffix, others, field, takes in TYPED_FIELDS:
            for kind, value in JSON_VALUES.items():
                if kind in takes:
                    continue
                arguments = {**others, field: value}
                url = f"{live.url}/api/v1/memories/{alice_store.pk}{suffix}"
                rest = httpx.request(method, url, json=arguments, headers=headers)
                mcp = error_of(client.call_tool(tool, {"id": str(alice_store.pk), **arguments}))
                assert rest.status_code == 400, (tool, arguments, rest.text)
                said = rest.json()["error"]["details"]["fields"][field]
                assert said == mcp["details"]["fields"][field], (tool, arguments)
                assert said.startswith("Must be ") and said.endswith(f", not {JSON_TYPE_NAMES[kind]}.")
                tried += 1
    assert tried == 29
    assert snapshot() == before
