"""The SDK's own session memory sync engine (`anthropic.lib.tools._memories.SessionMemoryStores`, the one its
worker runs) against a live server, authenticated only with the work item's sessions token (SPEC §5).

`SessionMemoryStores` is not public API: `anthropic` is pinned exactly, and this test is what proves it
still speaks our API. The engine's clock (its module's `monotonic`) is the only thing faked, so its
15 s cadence and 30 s delete corroboration run in milliseconds; every request is real.
"""

from __future__ import annotations

import asyncio
import hashlib

import anthropic
import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.tools import _memories
from anthropic.lib.tools._memories import SessionMemoryStores

from versions import services as version_services
from versions.actors import Actor
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db(transaction=True)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_memories, "monotonic", fake)
    return fake


def test_the_sdk_sync_engine_downloads_pushes_pulls_and_deletes_with_the_sessions_token(
    api_url, tmp_path, clock, owner, owner_token, notes_store, make_session, claim, client_for
):
    from tests.factories import StoreFactory

    prefs = StoreFactory(owner=owner, canonical=False, name="User preferences")
    seed = Actor.api(owner_token.token.pk)
    for path, content in [("/decisions.md", "v1"), ("/todo.md", "buy milk"), ("/old.md", "obsolete")]:
        version_services.create_memory(store=notes_store, path=path, content=content, actor=seed)
    version_services.create_memory(store=prefs, path="/editor.md", content="vim", actor=seed)
    session = make_session(notes_store, (prefs, "read_only"))
    claimed = claim()
    mounts = tmp_path / "mnt"
    notes_dir, prefs_dir = mounts / "team-notes", mounts / "user-preferences"
    sent: list[tuple[str, str]] = []

    async def record(request) -> None:
        sent.append((request.method, str(request.url)))

    async def run() -> None:
        http = anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [record]})
        agent = AsyncAnthropic(base_url=api_url, auth_token=claimed.token, max_retries=0, http_client=http)
        owner_client = AsyncAnthropic(base_url=api_url, auth_token=owner_token.secret, max_retries=0)
        try:
            frozen = await agent.beta.sessions.retrieve(str(session.pk))
            # A worker without a writable /mnt/memory relocates the mounts (its --mount-root).
            for resource in frozen.resources:
                resource.mount_path = str(mounts / resource.mount_path.rsplit("/", 1)[1])
            stores = SessionMemoryStores(agent, workdir=tmp_path / "work", sync_interval=15.0)
            await stores.download(frozen)
            assert (notes_dir / "decisions.md").read_text() == "v1"
            assert (notes_dir / "todo.md").read_text() == "buy milk"
            assert (prefs_dir / "editor.md").read_text() == "vim"
            assert stores.read_only_roots == [prefs_dir.resolve()]

            (notes_dir / "todo.md").write_text("buy oat milk")  # a local edit
            (notes_dir / "old.md").unlink()  # a local delete
            (prefs_dir / "editor.md").write_text("emacs")  # a local edit in a read-only store
            decisions = (await owner_client.beta.memory_stores.memories.list(str(notes_store.pk))).data
            decisions = next(m for m in decisions if m.path == "/decisions.md")
            await owner_client.beta.memory_stores.memories.update(  # a remote edit
                decisions.id, memory_store_id=str(notes_store.pk), content="v2"
            )

            clock.now += 20
            await stores.sync_if_due()
            assert (notes_dir / "decisions.md").read_text() == "v2"  # pulled
            assert await _content(owner_client, notes_store, "/todo.md") == "buy oat milk"  # pushed
            assert await _content(owner_client, notes_store, "/old.md") == "obsolete"  # not yet: corroborating

            clock.now += 40
            await stores.sync_if_due()
            assert await _content(owner_client, notes_store, "/old.md") is None  # corroborated, deleted

            (notes_dir / "summary.md").write_text("done")
            await stores.finish()
            (notes_dir / "late.md").write_text("written after the final sync")
            await stores.flush_writes()
            await stores.dispose()
            assert not notes_dir.exists() and not prefs_dir.exists()
        finally:
            await agent.close()
            await owner_client.close()

    asyncio.run(run())

    memories = dict(Memory.objects.filter(store=notes_store).values_list("path", "content"))
    assert memories == {
        "/decisions.md": "v2",
        "/todo.md": "buy oat milk",
        "/summary.md": "done",
        "/late.md": "written after the final sync",
    }
    by_session = Version.objects.filter(session_id=session.pk)
    assert sorted((v.operation, v.path) for v in by_session) == [
        ("created", "/late.md"),
        ("created", "/summary.md"),
        ("deleted", "/old.md"),
        ("modified", "/todo.md"),
    ]
    assert {v.store_id for v in by_session} == {notes_store.pk}
    assert all(v.created_by == {"type": "session_actor", "session_id": str(session.pk)} for v in by_session)
    # The delete went out with its precondition: the sha the engine had downloaded.
    deletes = [url for method, url in sent if method == "DELETE"]
    assert len(deletes) == 1 and f"expected_content_sha256={sha('obsolete')}" in deletes[0]
    # Nothing was ever pushed to the read-only store.
    assert not [(method, url) for method, url in sent if method != "GET" and f"/memory_stores/{prefs.pk}/" in url]
    assert Memory.objects.get(store=prefs).content == "vim"
    assert not Version.objects.filter(store=prefs, session_id__isnull=False).exists()
    # The owner's SDK finds the session's writes by session_id.
    owner_sdk = client_for(owner_token.secret)
    listed = owner_sdk.beta.memory_stores.memory_versions.list(str(notes_store.pk), session_id=str(session.pk))
    assert sorted(v.operation for v in listed) == ["created", "created", "deleted", "modified"]


async def _content(client: AsyncAnthropic, store, path: str) -> str | None:
    """The current content at `path` (None when no memory is there), read with `client`."""
    async for item in client.beta.memory_stores.memories.list(str(store.pk), view="full", limit=20):
        if item.type == "memory" and item.path == path:
            return item.content
    return None
