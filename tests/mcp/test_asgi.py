"""/mcp is not tied to the serving stack: the same view and tools under gunicorn's plain gthread (WSGI) worker."""

from __future__ import annotations

import pytest

from memories.models import Entry
from tests.mcp.conftest import gunicorn
from tests.mcp.test_tools import body_of, error_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_current_and_legacy_clients_work_under_the_wsgi_gthread_worker(mcp_client, alice, tmp_path):
    with gunicorn(tmp_path, app="config.wsgi:application", worker_class="gthread") as server:
        with (
            mcp_client(alice.secret, server=server) as modern,
            mcp_client(alice.secret, mode="legacy", server=server) as legacy,
        ):
            assert (modern.protocol_version, legacy.protocol_version) == ("2026-07-28", "2025-11-25")
            store = body_of(modern.call_tool("ensure_memories", {}))["data"]["id"]
            body_of(modern.call_tool("note_memories", {"id": store, "body_md": "under WSGI", "client_nonce": "a"}))
            replay = body_of(
                legacy.call_tool("note_memories", {"id": store, "body_md": "under WSGI", "client_nonce": "a"})
            )
            assert replay["meta"]["replayed"] is True
            woke = body_of(legacy.call_tool("wake_memories", {"id": store}))
            assert [line["text"] for line in woke["data"]["lines"]] == ["under WSGI"]
            assert (
                error_of(modern.call_tool("wake_memories", {"id": store, "budget": "32"}))["type"]
                == "invalid_request_error"
            )
            served = server.served_by(modern.request_ids() + legacy.request_ids())
        assert len(served) == len(modern.request_ids() + legacy.request_ids())
    assert Entry.objects.get().body_md == "under WSGI"
