"""The session memory sync engine: the SDK's `SessionMemoryStores`, extended where it falls short of the SPEC.

SPEC §5 "The self-hosted worker". The engine is `anthropic.lib.tools._memories.SessionMemoryStores` from
`anthropic==2.10.0` (pinned exactly: it is not public API; tests/worker proves it still behaves as relied
on here). Two extensions, both at the engine's own decision points:

- **Conflicts keep the local text.** On a path changed both locally and remotely the engine keeps the remote
  version and overwrites the file. Before it does, `_sync_path` copies the local bytes to
  `<workdir>/.memory-conflicts/<slug>/<path>~<UTC time>` and records the conflict.
- **Nothing is lost when a mount is removed.** `preserve_unsynced` copies every file whose content the server
  does not hold (the flush could not push it: lost lease, refusal, time bound, read-only root) to
  `<workdir>/.memory-unsynced/<slug>/<path>` (`<path>~<UTC time>` when an earlier item left a different copy
  there) before `dispose` removes the mounts.

Everything else — SHA-256 preconditions, read-only roots pulled and never pushed, corroborated deletes, wipe
recovery, the trust marker — is the engine's, unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from anthropic.lib.tools import _memories
from anthropic.lib.tools._memories import MARKER_PATH, SessionMemoryStores

log = logging.getLogger("memories_worker")

CONFLICTS_DIR = ".memory-conflicts"
UNSYNCED_DIR = ".memory-unsynced"


@dataclass(frozen=True)
class KeptFile:
    """A local text the worker kept outside the mount: `slug`/`path` in the store, `kept_at` on disk."""

    slug: str
    path: str
    kept_at: str


def set_delete_corroboration(seconds: float) -> None:
    """Set how long a locally deleted file must stay missing before its server delete goes out (seconds, ≥ 1).

    The engine reads the module constant `DELETE_CORROBORATION_SECONDS` at each pass (default 30 s); this is
    the worker's `--delete-after`. The delete still waits for a later pass than the one that saw it missing.
    """
    if not seconds >= 1:
        raise ValueError("the delete corroboration window must be at least 1 second")
    _memories.DELETE_CORROBORATION_SECONDS = float(seconds)


def utc_stamp() -> str:
    """The conflict-file suffix: UTC time to the microsecond, e.g. ``20261201T140102.123456Z``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


class WorkerMemoryStores(SessionMemoryStores):
    """`SessionMemoryStores` that never discards a local text (SPEC §5).

    workdir: the agent's work directory; conflicts and unsynced copies go beneath it.
    slugs: ``{memory_store_id: slug}`` (the last component of each `mount_path`) naming the copies' folders.
    Other arguments are the engine's (`sync_interval` ≥ 5 s). `conflicts` and `unsynced` list what was kept.
    """

    def __init__(self, client, *, workdir: Path, slugs: dict[str, str], **kwargs) -> None:
        super().__init__(client, workdir=workdir, **kwargs)
        self._work_path = Path(workdir)
        self._slugs = slugs
        self.conflicts: list[KeptFile] = []
        self.unsynced: list[KeptFile] = []

    async def _sync_path(self, store, rel, remote, local_sha, *, pulls):
        """The engine's per-path merge, after keeping the local text of a both-sides change."""
        if remote is not None and local_sha is not None and not store.read_only:
            base_sha = store.baseline.get(rel)
            if remote.content_sha256 != base_sha and local_sha not in (base_sha, remote.content_sha256):
                await self._keep_conflict(store, rel)
        return await super()._sync_path(store, rel, remote, local_sha, pulls=pulls)

    async def _keep_conflict(self, store, rel: str) -> None:
        data = await store.files.get(rel)
        if data is None:
            return
        slug = self._slug(store)
        target = self._work_path / CONFLICTS_DIR / slug / f"{rel}~{utc_stamp()}"
        _write_copy(target, data)
        self.conflicts.append(KeptFile(slug=slug, path=rel, kept_at=str(target)))
        log.warning(
            "conflict: %s/%s changed both locally and remotely; the remote version wins, the local text is kept at %s",
            slug,
            rel,
            target,
        )

    def _slug(self, store) -> str:
        return self._slugs.get(store.memory_store_id, store.memory_store_id)

    @property
    def last_sync(self) -> float:
        """The engine's monotonic time of its last completed sync (changes when `sync_if_due` ran one)."""
        return self._last_sync

    async def after_sync(self) -> None:
        """Make the files of read-only roots read-only again (a pull replaces files with fresh ones)."""
        for root in self.read_only_roots:
            make_read_only(root)

    async def preserve_unsynced(self) -> list[KeptFile]:
        """Copy every file whose content the server does not hold to `<workdir>/.memory-unsynced/<slug>/<path>`.

        Run after the last flush and before `dispose`. A file counts when its SHA-256 differs from the engine's
        baseline (the last content known to be on the server) — new, edited, refused or never pushed. A store
        folder that failed the engine's trust check is left on disk by `dispose` and is not copied. Returns
        (and appends to `unsynced`) what it kept; never raises.
        """
        kept: list[KeptFile] = []
        for store in self._stores:
            try:
                scan = await self._scan_marker(store)
                if not scan.marker_ok:
                    continue
                for rel, sha in sorted(scan.files.items()):
                    if rel == MARKER_PATH or sha == store.baseline.get(rel):
                        continue
                    data = await store.files.get(rel)
                    if data is None:
                        continue
                    slug = self._slug(store)
                    target = self._work_path / UNSYNCED_DIR / slug / rel
                    if target.exists() and target.read_bytes() != data:
                        # An earlier item's copy of the same path (a reused work directory): keep both.
                        target = target.with_name(f"{target.name}~{utc_stamp()}")
                    _write_copy(target, data)
                    kept.append(KeptFile(slug=slug, path=rel, kept_at=str(target)))
                    log.warning("unsynced: %s/%s did not reach the server; kept at %s", slug, rel, target)
            except Exception as e:  # one store's failure must not cost the others their copies
                log.warning("could not preserve unsynced files memory_store_id=%s: %s", store.memory_store_id, e)
        self.unsynced.extend(kept)
        return kept

    async def dispose(self) -> None:
        """The engine's dispose, after making read-only roots writable again so they can be removed."""
        for root in self.read_only_roots:
            make_writable(root)
        await super().dispose()


def _write_copy(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def make_read_only(root: Path) -> None:
    """Clear the write bits of every file beneath `root` (directories stay writable for pulls)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if name == MARKER_PATH and Path(dirpath) == Path(root):
                continue
            with contextlib.suppress(OSError):
                path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(root: Path) -> None:
    """Give every file beneath `root` its owner's write bit back."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            with contextlib.suppress(OSError):
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
