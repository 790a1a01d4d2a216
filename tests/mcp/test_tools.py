"""Every tool through the official client on real data, compared with the REST answer to the same request."""

from __future__ import annotations

import json

import pytest

from memories.models import Entry, Summary
from stores.models import ReaderGrant, Store
from tests.factories import StoreFactory
from tests.mcp.test_protocols import EXPECTED_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

STORE_TOOLS = set(EXPECTED_TOOLS) - {"list_memories", "ensure_memories", "resolve_memories"}


def body_of(result) -> dict:
    """The tool's result: structured content, checked equal to its JSON text block."""
    assert not result.is_error, result.content
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error_of(result) -> dict:
    """The SPEC §2 error object a failed tool call carries (JSON text block, no structured content)."""
    assert result.is_error, result.structured_content
    assert result.structured_content is None
    payload = json.loads(result.content[0].text)
    assert payload["type"] == "error" and payload["request_id"].startswith("req_")
    return payload["error"]


def _cursor_payload(cursor: str | None):
    """A signed cursor's payload (Django signing: ``payload:timestamp:signature``): two cursors made in
    different seconds differ in their timestamp and signature only."""
    return None if cursor is None else cursor.split(":", 1)[0]


def same_as_rest(result, response, *, ignore: tuple[str, ...] = ()) -> dict:
    """Assert the tool result equals the REST body (optionally ignoring `data` keys); return it.

    Signed cursors (`meta.next_cursor`) are compared by their payload, not their timestamped text; a nap
    job's `claimed_until` is not compared (the second nap renewed the claim).
    """
    assert response.status_code < 300, response.text
    mine, theirs = body_of(result), response.json()
    for key in ignore:
        mine["data"].pop(key, None)
        theirs["data"].pop(key, None)
    compared_mine, compared_theirs = json.loads(json.dumps(mine)), json.loads(json.dumps(theirs))
    for body in (compared_mine, compared_theirs):  # each nap renews its claims: the lapse time moves on
        data = body.get("data")
        if isinstance(data, dict):
            for job in [data.get("job"), *(data.get("jobs") or [])]:
                if isinstance(job, dict):
                    job.pop("claimed_until", None)
    if isinstance(mine.get("meta"), dict) and mine["meta"].get("next_cursor"):  # signed and timestamped
        for body in (compared_mine, compared_theirs):
            body["meta"]["next_cursor"] = _cursor_payload(body["meta"]["next_cursor"])
    assert compared_mine == compared_theirs
    return mine


def _same_nap(result, response) -> dict:
    """Assert an MCP nap and the claimant's REST nap right after it return the same claimed job.

    The claimant's repeated nap renews its claim, so `claimed_until` may only move forward; all else is equal.
    """
    mine, theirs = body_of(result), response.json()
    assert response.status_code == 200, response.text
    renewed = [
        (a.pop("claimed_until"), b.pop("claimed_until"))
        for a, b in zip(mine["data"]["jobs"], theirs["data"]["jobs"], strict=True)
    ]
    if mine["data"]["job"] is not None:
        mine["data"]["job"].pop("claimed_until"), theirs["data"]["job"].pop("claimed_until")
    assert mine == theirs
    assert all(first <= then for first, then in renewed)
    return mine


def test_every_tool_has_input_and_output_schemas(mcp_client, alice):
    with mcp_client(alice.secret) as client:
        tools = {tool.name: tool for tool in client.list_tools().tools}
    assert sorted(tools) == sorted(EXPECTED_TOOLS)
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 80, name
        assert tool.input_schema["type"] == "object" and tool.input_schema["additionalProperties"] is False
        assert tool.output_schema["type"] == "object"
        assert set(tool.output_schema["required"]) == {"data", "meta"}, name
        assert ("id" in tool.input_schema.get("required", [])) == (name in STORE_TOOLS), name
        if name in STORE_TOOLS:  # the model learns the shape of a store id, not just "a string"
            store_id = tool.input_schema["properties"]["id"]
            assert (store_id["type"], store_id["format"]) == ("string", "uuid"), name
            assert "list_memories" in store_id["description"], name
    recall = tools["recall_memories"].input_schema["properties"]
    assert recall["case_sensitive"]["type"] == "boolean"
    assert recall["limit"] == {"type": "integer", "maximum": 100, "minimum": 1, "default": 100}
    wake = tools["wake_memories"].input_schema["properties"]
    assert wake["budget"]["type"] == "integer" and (wake["budget"]["minimum"], wake["budget"]["maximum"]) == (32, 128)
    note = tools["note_memories"].input_schema
    assert note["required"] == ["id", "body_md"] and note["properties"]["client_nonce"]["maxLength"] == 128
    assert tools["share_memories"].input_schema["properties"]["active"]["type"] == "boolean"
    assert tools["delete_memories"].annotations.destructive_hint is True
    assert tools["wake_memories"].annotations.read_only_hint is True
    nap = tools["nap_memories"]
    assert nap.annotations.read_only_hint is not True  # a writer's nap claims jobs (SPEC §4 "Claims")
    assert (nap.input_schema["properties"]["limit"]["minimum"], nap.input_schema["properties"]["limit"]["maximum"]) == (
        1,
        16,
    )
    assert "data.jobs" in nap.description and "retry_after" in nap.description


def test_store_tools_answer_like_rest(mcp_client, rest, alice, bob):
    api = rest(alice.secret)
    with mcp_client(alice.secret) as client:
        ensured = body_of(client.call_tool("ensure_memories", {"name": "Alice's memory"}))
        assert ensured["meta"] == {"created": True}
        store_id = ensured["data"]["id"]
        again = api.post("/memories", json={"scope": "user", "subject": "me"})
        assert again.status_code == 200 and again.json()["data"] == ensured["data"]

        same_as_rest(client.call_tool("get_memories", {"id": store_id}), api.get(f"/memories/{store_id}"))
        same_as_rest(client.call_tool("resolve_memories", {}), api.get("/memories/resolve"))
        same_as_rest(
            client.call_tool("resolve_memories", {"scope": "user", "subject": "ALICE"}),
            api.get("/memories/resolve", params={"scope": "user", "subject": "ALICE"}),
        )
        same_as_rest(
            client.call_tool("resolve_memories", {"ref": f"^{store_id}"}),
            api.get("/memories/resolve", params={"ref": f"^{store_id}"}),
        )
        StoreFactory(owner=alice.user, canonical=False, name="Second")
        page = same_as_rest(client.call_tool("list_memories", {"limit": 1}), api.get("/memories", params={"limit": 1}))
        cursor = page["meta"]["next_cursor"]
        assert cursor
        same_as_rest(
            client.call_tool("list_memories", {"limit": 1, "cursor": cursor}),
            api.get("/memories", params={"limit": 1, "cursor": cursor}),
        )

        update = {"name": "Renamed", "description_md": "What *Alice* remembers.", "visibility": "public"}
        updated = client.call_tool("update_memories", {"id": store_id, **update})
        same_as_rest(updated, api.patch(f"/memories/{store_id}", json=update), ignore=("updated_at",))
        assert Store.objects.get(pk=store_id).name == "Renamed"

        shared = client.call_tool("share_memories", {"id": store_id, "handle": "bob"})
        grant = same_as_rest(
            shared, api.post(f"/memories/{store_id}/share", json={"handle": "bob"}), ignore=("updated_at",)
        )
        assert grant["data"]["active"] is True and ReaderGrant.objects.get(store_id=store_id).user == bob.user
        revoked = body_of(client.call_tool("share_memories", {"id": store_id, "handle": "bob", "active": False}))
        assert revoked["data"]["active"] is False
        same_as_rest(
            client.call_tool("list_memories_readers", {"id": store_id}), api.get(f"/memories/{store_id}/readers")
        )


def _twins(api, count: int) -> list[str]:
    """Two user stores of the caller holding the same `count` entries (REST notes)."""
    ids = [api.post("/memories", json={}).json()["data"]["id"]]
    ids.append(str(StoreFactory(owner=Store.objects.get(pk=ids[0]).owner, canonical=False, name="Twin").pk))
    for store_id in ids:
        for seq in range(count):
            assert api.post(f"/memories/{store_id}/note", json={"body_md": f"entry {seq}"}).status_code == 201
    return ids


def test_log_tools_answer_like_rest_through_a_full_compaction(mcp_client, rest, alice):
    api = rest(alice.secret)
    store_id = api.post("/memories", json={}).json()["data"]["id"]
    with mcp_client(alice.secret) as client:
        noted = body_of(
            client.call_tool(
                "note_memories", {"id": store_id, "body_md": "Decision: ship on Friday.", "client_nonce": "n-1"}
            )
        )
        assert noted["meta"] == {"replayed": False} and noted["data"]["seq"] == 0
        replay = body_of(
            client.call_tool(
                "note_memories", {"id": store_id, "body_md": "Decision: ship on Friday.", "client_nonce": "n-1"}
            )
        )
        assert replay["meta"] == {"replayed": True} and replay["data"] == noted["data"]
        rest_replay = api.post(
            f"/memories/{store_id}/note", json={"body_md": "Decision: ship on Friday.", "client_nonce": "n-1"}
        )
        assert rest_replay.status_code == 200 and rest_replay.json() == replay
        for seq in range(1, 6):
            body_of(client.call_tool("note_memories", {"id": store_id, "body_md": f"Note {seq}: PostgreSQL {seq}"}))
        assert Entry.objects.filter(store_id=store_id).count() == 6

        woke = same_as_rest(client.call_tool("wake_memories", {"id": store_id}), api.get(f"/memories/{store_id}/wake"))
        assert [line["kind"] for line in woke["data"]["lines"]] == ["entry"] * 6
        same_as_rest(
            client.call_tool("wake_memories", {"id": store_id, "budget": 64, "snapshot": 4}),
            api.get(f"/memories/{store_id}/wake", params={"budget": 64, "snapshot": 4}),
        )

        submitted = 0
        while True:  # the full job round trip: nap → (our "model") → compact, until complete
            nap = _same_nap(client.call_tool("nap_memories", {"id": store_id}), api.get(f"/memories/{store_id}/nap"))
            if nap["data"]["complete"]:
                break
            job = nap["data"]["job"]
            assert len(job["children"]) == 2 and job["max_bytes"] == 1024 and job["prompt"]
            submission = {
                "range": job["range"],
                "generation": job["generation"],
                "source_digest": job["source_digest"],
                "summary_md": f"Summary of {job['range']}: " + " / ".join(c["text"][:40] for c in job["children"]),
                "model": "test-model-1",
            }
            compacted = body_of(client.call_tool("compact_memories", {"id": store_id, **submission}))
            assert compacted["meta"]["created"] is True and compacted["data"]["range"] == job["range"]
            resubmitted = api.post(f"/memories/{store_id}/compact", json=submission)  # idempotent: 200, same summary
            assert resubmitted.status_code == 200 and resubmitted.json()["data"] == compacted["data"]
            submitted += 1
        assert submitted == Summary.objects.filter(store_id=store_id).count() == 4  # 0-1, 2-3, 4-5, 0-3
        woke = same_as_rest(client.call_tool("wake_memories", {"id": store_id}), api.get(f"/memories/{store_id}/wake"))
        assert woke["data"]["complete"] is True

        zoomed = same_as_rest(
            client.call_tool("zoom_memories", {"id": store_id, "range": "0-3"}),
            api.get(f"/memories/{store_id}/zoom", params={"range": "0-3"}),
        )
        assert [half["range"] for half in zoomed["data"]["halves"]] == ["0-1", "2-3"]
        same_as_rest(
            client.call_tool("zoom_memories", {"id": store_id, "range": "5"}),
            api.get(f"/memories/{store_id}/zoom", params={"range": "5"}),
        )

        insensitive = same_as_rest(
            client.call_tool("recall_memories", {"id": store_id, "pattern": "postgresql", "case_sensitive": False}),
            api.get(f"/memories/{store_id}/recall", params={"pattern": "postgresql", "case_sensitive": "false"}),
        )
        assert [match["seq"] for match in insensitive["data"]] == [5, 4, 3, 2, 1]
        sensitive = same_as_rest(
            client.call_tool("recall_memories", {"id": store_id, "pattern": "postgresql", "case_sensitive": True}),
            api.get(f"/memories/{store_id}/recall", params={"pattern": "postgresql", "case_sensitive": "true"}),
        )
        assert sensitive["data"] == []
        paged = same_as_rest(
            client.call_tool("recall_memories", {"id": store_id, "pattern": "Note", "limit": 2}),
            api.get(f"/memories/{store_id}/recall", params={"pattern": "Note", "limit": 2}),
        )
        cursor = paged["meta"]["next_cursor"]
        same_as_rest(  # the cursor is bound to the caller, and the MCP caller is the REST caller
            client.call_tool("recall_memories", {"id": store_id, "pattern": "Note", "limit": 2, "cursor": cursor}),
            api.get(f"/memories/{store_id}/recall", params={"pattern": "Note", "limit": 2, "cursor": cursor}),
        )
        for value in ("true", "false", "maybe", 1):
            error = error_of(
                client.call_tool("recall_memories", {"id": store_id, "pattern": "x", "case_sensitive": value})
            )
            assert error["type"] == "invalid_request_error" and "case_sensitive" in error["message"]


def test_forget_and_delete_answer_like_rest_on_twin_stores(mcp_client, rest, alice):
    api = rest(alice.secret)
    by_mcp, by_rest = _twins(api, 4)
    for store_id in (by_mcp, by_rest):
        job = api.get(f"/memories/{store_id}/nap").json()["data"]["job"]
        submission = {key: job[key] for key in ("range", "generation", "source_digest")}
        assert (
            api.post(f"/memories/{store_id}/compact", json={**submission, "summary_md": "s", "model": "m"}).status_code
            == 201
        )
    with mcp_client(alice.secret) as client:
        forgot = body_of(client.call_tool("forget_memories", {"id": by_mcp, "range": "0-1", "generation": 1}))
        rest_forgot = api.post(f"/memories/{by_rest}/forget", json={"range": "0-1", "generation": 1})
        assert rest_forgot.status_code == 200 and forgot == rest_forgot.json()
        assert forgot["data"] == {"invalidated": ["0-1"], "generation": 2}
        stale = error_of(client.call_tool("forget_memories", {"id": by_mcp, "range": "0-1", "generation": 1}))
        assert stale["details"]["reason"] == "stale_generation"

        refused = error_of(
            client.call_tool("delete_memories", {"id": by_mcp, "expected_entry_count": 3, "generation": 2})
        )
        assert refused["type"] == "conflict_error" and refused["details"]["reason"] == "stale_confirmation"
        assert Store.objects.filter(pk=by_mcp).exists()
        deleted = body_of(
            client.call_tool("delete_memories", {"id": by_mcp, "expected_entry_count": 4, "generation": 2})
        )
        rest_deleted = api.delete(f"/memories/{by_rest}", params={"expected_entry_count": 4, "generation": 2})
        assert rest_deleted.status_code == 200
        assert deleted == {"data": {"id": by_mcp, "deleted": True}, "meta": {}}
        assert rest_deleted.json() == {"data": {"id": by_rest, "deleted": True}, "meta": {}}
        gone = error_of(client.call_tool("get_memories", {"id": by_mcp}))
    assert (
        gone
        == api.get(f"/memories/{by_mcp}").json()["error"]
        == {"type": "not_found_error", "message": "Store not found."}
    )
    assert not Store.objects.filter(pk__in=[by_mcp, by_rest]).exists()


def test_redact_answers_like_rest_and_the_text_never_comes_back_through_mcp(mcp_client, rest, alice):
    api = rest(alice.secret)
    by_mcp, by_rest = _twins(api, 4)
    secret = "entry 2"  # the text of seq 2 in both twins
    with mcp_client(alice.secret) as client:
        redacted = body_of(
            client.call_tool("redact_memories_entry", {"id": by_mcp, "seq": 2, "reason": "leaked a secret"})
        )
        rest_redacted = api.post(f"/memories/{by_rest}/entries/2/redact", json={"reason": "leaked a secret"})
        assert rest_redacted.status_code == 200
        expected = rest_redacted.json()
        for body in (redacted, expected):  # twin stores: only the times differ
            body["data"].pop("redacted_at")
            body["data"].pop("created_at")
        assert redacted == expected
        assert redacted["data"]["body_md"] is None and redacted["data"]["seq"] == 2
        again = body_of(client.call_tool("redact_memories_entry", {"id": by_mcp, "seq": 2, "reason": "again"}))
        assert again["meta"]["changed"] is False
        wrong_type = error_of(client.call_tool("redact_memories_entry", {"id": by_mcp, "seq": "2", "reason": "x"}))
        assert wrong_type["type"] == "invalid_request_error"
        reads = [
            client.call_tool("wake_memories", {"id": by_mcp}),
            client.call_tool("zoom_memories", {"id": by_mcp, "range": "2"}),
            client.call_tool("zoom_memories", {"id": by_mcp, "range": "0-3"}),
            client.call_tool("recall_memories", {"id": by_mcp, "pattern": "entry"}),
            client.call_tool("nap_memories", {"id": by_mcp}),
        ]
    for result in reads:
        text = json.dumps(body_of(result))
        assert secret not in text and "leaked a secret" not in text
    lines = {line["range"]: line for line in body_of(reads[0])["data"]["lines"]}
    assert lines["2"]["kind"] == "redacted" and lines["2"]["text"] is None
    assert [match["seq"] for match in body_of(reads[3])["data"]] == [3, 1, 0]
    assert Entry.objects.get(store_id=by_mcp, seq=2).body_md is None
