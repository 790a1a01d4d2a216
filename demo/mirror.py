"""Mirror changelogs as file memories through the official `anthropic` SDK (SPEC §5), then list them.

The SDK is pointed at our server (``base_url=<server>/api``) with an agent's token; nothing here touches
the database. Paths are ``/debian/<package>/changelog.md``; contents are the changelog text, cut after the
last whole entry that fits in 102,400 UTF-8 bytes (the file-memory limit) when a changelog is longer.
Re-running is idempotent: the memory store is found again by its name, and creating a path that already
holds the same content returns the existing memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from anthropic import Anthropic

from demo.changelogs import Changelog, file_prefix

MEMORY_MAX_BYTES = 102_400
MIRROR_PREFIX = "/debian/"


@dataclass
class MirrorResult:
    """What the mirror did and what the depth-1 listing of ``/debian/`` showed.

    `paths`: the paths written; `truncated`: packages whose changelog was cut to fit; `prefixes`: the
    `memory_prefix` paths listed at depth 1; `listed_memories`: the memories listed at depth 0 under the
    prefix with their sizes; `item_types`: count of listing items by type at depth 1.
    """

    store_id: str
    store_name: str
    paths: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    item_types: dict[str, int] = field(default_factory=dict)
    listed_memories: int = 0
    listed_bytes: int = 0
    listed_paths: list[str] = field(default_factory=list)


def sdk_client(base_url: str, token: str) -> Anthropic:
    """The official SDK pointed at our server: ``<base_url>/api``, bearer `token`, no automatic retries."""
    return Anthropic(base_url=f"{base_url.rstrip('/')}/api", auth_token=token, max_retries=0)


def ensure_memory_store(client: Anthropic, *, name: str, description: str) -> str:
    """The id of the caller's memory store called `name` (created if none is listed). Returns the id."""
    for store in client.beta.memory_stores.list(limit=100):
        if store.name == name:
            return store.id
    return client.beta.memory_stores.create(name=name, description=description, metadata={"demo": "debian"}).id


def mirror_changelogs(
    client: Anthropic,
    changelogs: list[Changelog],
    *,
    store_name: str,
    workers: int = 4,
    on_file: Callable[[], None] | None = None,
) -> MirrorResult:
    """Write each changelog as ``/debian/<package>/changelog.md`` into the store `store_name`, then list.

    workers: parallel SDK calls (the SDK client is thread-safe). on_file: called after each write.
    Raises the SDK's APIStatusError on an unexpected answer (e.g. 409 when a path holds other content).
    """
    store_id = ensure_memory_store(
        client, name=store_name, description="Debian package changelogs mirrored by the real-input demo."
    )
    result = MirrorResult(store_id=store_id, store_name=store_name)
    memories = client.beta.memory_stores.memories

    def write(changelog: Changelog) -> tuple[str, bool]:
        content = file_prefix(changelog, max_bytes=MEMORY_MAX_BYTES)
        path = f"{MIRROR_PREFIX}{changelog.package}/changelog.md"
        memories.create(store_id, path=path, content=content)
        if on_file:
            on_file()
        return path, content != changelog.text

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for changelog, (path, cut) in zip(changelogs, pool.map(write, changelogs), strict=True):
            result.paths.append(path)
            if cut:
                result.truncated.append(changelog.package)

    shallow = list(memories.list(store_id, path_prefix=MIRROR_PREFIX, depth=1, limit=100))
    result.item_types = dict(Counter(item.type for item in shallow))
    result.prefixes = [item.path for item in shallow if item.type == "memory_prefix"]
    deep = list(memories.list(store_id, path_prefix=MIRROR_PREFIX, limit=100))
    result.listed_memories = len(deep)
    result.listed_bytes = sum(item.content_size_bytes for item in deep)
    result.listed_paths = [item.path for item in deep]
    return result
