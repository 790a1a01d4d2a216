"""The session memory sync engine: the SDK's `SessionMemoryStores`, extended where it falls short of the SPEC.

SPEC §5 "The self-hosted worker". The engine is `anthropic.lib.tools._memories.SessionMemoryStores` from
`anthropic==2.10.0` (pinned exactly: it is not public API; tests/worker proves it still behaves as relied
on here). Three extensions, each at one of the engine's own decision points:

- **Conflicts keep the local text.** Whenever the engine is about to overwrite a local file with the server's
  text (a pull, the remote side of a both-sides change, a read-only root's update) `_write` first reads the
  file's bytes; when they are neither the last synced content nor the incoming one — a local edit the server
  does not hold, made at any time up to that instant — they are copied to
  `<workdir>/.memory-conflicts/<slug>/<path>~<UTC time>` and the conflict recorded. If the copy cannot be
  made, the file is not overwritten (the next pass tries again).
- **Nothing is lost when a mount is removed.** `preserve_unsynced` walks each mount on disk and copies every
  regular file whose bytes the server does not hold (the flush could not push it: lost lease, refusal, time
  bound, read-only root, a name or content the server cannot take — binary, a backslash, too long) to
  `<workdir>/.memory-unsynced/<slug>/<path>` (`<path>~<UTC time>` when an earlier item left a different copy
  there) before `dispose` removes the mounts, one file at a time (one failure costs no other file its copy).

- **Only memories with a file of their own are mounted.** The engine's file store reads a backslash in a
  path as a separator (`_file_store._resolve_under_root`), so the server's `/x\\y.md` and `/x/y.md` were one
  file on disk: whichever arrived last was written there and the next sync pushed it over the other memory,
  and `/p\\q.md` came back as a new memory `/p/q.md`. `_list_memories` leaves out every memory whose path
  does not map to itself on disk (`mountable`), as the engine leaves out its marker path: it is neither
  pulled nor pushed nor deleted, stays on the server untouched, and is logged once per run.

Everything else — SHA-256 preconditions, read-only roots pulled and never pushed, corroborated deletes, wipe
recovery, the trust marker — is the engine's, unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from anthropic.lib.tools import _memories
from anthropic.lib.tools._memories import MARKER_PATH, SessionMemoryStores

from config.text import quoted

log = logging.getLogger("memories_worker")


def file_name_text(name: str) -> str:
    """`name` as text that any encoder takes: a file name's undecodable bytes (Python holds them as lone
    surrogates, `surrogateescape`) written as ``\\xff`` escapes, another lone surrogate as its ``\\udXXX``
    escape; any other name as it is. The spelling of the summary's paths and of the log's (helper-99/100)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate that stands for no byte
            return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return name


def shown(name: str) -> str:
    """A file name the agent chose as a log message shows it: `file_name_text` as a JSON string."""
    return quoted(file_name_text(name))


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


def mountable(path: str) -> bool:
    """Whether a memory's server path (``/x/y.md``) is a file of its own under a mount: True when the engine's
    file store maps it to itself. False for a backslash anywhere (the store reads it as ``/``: ``/x\\y.md``
    would be ``x/y.md``, another memory's file), for a segment over 255 UTF-8 bytes (no Linux file system
    takes the name) and for the mount's marker file in any case — paths the server refuses since 2026-12-06
    but a store may hold from before. The server refuses empty, ``.`` and ``..`` segments."""
    rel = path.lstrip("/")
    if "\\" in rel or PurePosixPath(rel).as_posix() != rel:
        return False
    if rel.casefold() == MARKER_PATH.casefold():
        return False
    return all(len(segment.encode("utf-8", "surrogatepass")) <= 255 for segment in rel.split("/"))


def utc_stamp() -> str:
    """The conflict-file suffix: UTC time to the microsecond, e.g. ``20261201T140102.123456Z``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


class WorkerMemoryStores(SessionMemoryStores):
    """`SessionMemoryStores` that never discards a local text (SPEC §5).

    workdir: the agent's work directory; conflicts and unsynced copies go beneath it.
    slugs: ``{memory_store_id: slug}`` (the last component of each `mount_path`) naming the copies' folders.
    Other arguments are the engine's (`sync_interval` ≥ 5 s). `conflicts` and `unsynced` list what was kept.
    `listed` holds the ids of the stores whose listing of memories completed (reset by the caller before a
    pass it judges): the engine syncs nothing of a store it could not list — a 401 once the session is gone —
    or would not (its marker damaged, its folder replaced by a file), and logs and swallows why.
    """

    def __init__(self, client, *, workdir: Path, slugs: dict[str, str], **kwargs) -> None:
        super().__init__(client, workdir=workdir, **kwargs)
        self._work_path = Path(workdir)
        self._slugs = slugs
        self.conflicts: list[KeptFile] = []
        self.unsynced: list[KeptFile] = []
        self._not_mounted: set[tuple[str, str]] = set()  # (store id, path) already logged
        self.listed: set[str] = set()

    async def _list_memories(self, memory_store_id: str, **kwargs):
        """The engine's listing of a store's memories, without those that have no file of their own on disk
        (`mountable`): they are never pulled, pushed or deleted. Each is logged once (WARNING). A listing that
        completes adds the store to `listed`."""
        async for item in super()._list_memories(memory_store_id, **kwargs):
            if mountable(item.path):
                yield item
                continue
            if (memory_store_id, item.path) not in self._not_mounted:
                self._not_mounted.add((memory_store_id, item.path))
                log.warning(
                    "not mounted: %s has no file of its own on disk (a backslash is a folder separator "
                    "there, a name is at most 255 bytes, the marker's name is the engine's); it stays on "
                    "the server untouched",
                    shown(f"{self._slugs.get(memory_store_id, memory_store_id)}/{item.path.lstrip('/')}"),
                )
        self.listed.add(memory_store_id)

    async def _write(self, store, rel: str, content: str) -> bool:
        """The engine's write of the server's text to disk, after keeping a local edit it would overwrite.

        Returns the engine's result, or False (nothing written; the next pass retries) when the local bytes
        had to be kept and could not be.
        """
        local = _local_file(store, rel)
        data = _read_regular(local) if local is not None else None
        if data is not None:
            sha = _sha256(data)
            if sha != store.baseline.get(rel) and sha != _sha256(content.encode("utf-8")):
                slug = self._slug(store)
                target = self._work_path / CONFLICTS_DIR / slug / _stamped(rel)
                try:
                    _write_copy(target, data)
                except OSError as e:
                    shown_name = shown(f"{slug}/{rel}")
                    log.error("conflict: could not keep the local text of %s (%s); not overwriting it", shown_name, e)
                    return False
                self.conflicts.append(KeptFile(slug=slug, path=rel, kept_at=str(target)))
                log.warning(
                    "conflict: %s changed on both sides; the remote version wins, the local text is kept at %s",
                    shown(f"{slug}/{rel}"),
                    shown(str(target)),
                )
        return await super()._write(store, rel, content)

    def _slug(self, store) -> str:
        return self._slugs.get(store.memory_store_id, store.memory_store_id)

    def not_mounted(self) -> list[dict[str, str]]:
        """``[{slug, path}]``: memories left on the server because no file of their own could hold them on disk
        (`mountable`); the agent never saw them. Sorted."""
        return [
            {"slug": self._slugs.get(store_id, store_id), "path": path.lstrip("/")}
            for store_id, path in sorted(self._not_mounted)
        ]

    def unlisted(self) -> list[str]:
        """The slugs of the stores not in `listed`: not synced in the passes since `listed` was cleared."""
        return sorted(self._slug(store) for store in self._stores if store.memory_store_id not in self.listed)

    def deletes_not_sent(self) -> list[dict[str, str]]:
        """``[{slug, path}]``: files the agent deleted whose server delete never went out. Read after the last
        flush, before `dispose`: every path of a store's baseline (what the server held at the last sync)
        with no file on disk, and the engine's `pending_deletes` (SDK internals, pinned;
        tests/worker/test_run.py). That covers a delete still inside the corroboration window, held back by
        the per-pass cap, dropped by the engine's re-check (a folder replaced by a file of the same name), or
        never looked at because the store was not synced (its marker damaged, its folder replaced) — the
        summary said nothing of any of them (breakers)."""
        missing: set[tuple[str, str]] = set()
        for store in self._stores:
            slug = self._slug(store)
            try:
                root: Path | None = Path(store.files.root().path)
            except Exception:  # no root: nothing was ever written there
                root = None
            missing.update((slug, path) for path in store.pending_deletes)
            # A mount the agent replaced by a link or a file holds nothing of the store: never look through it.
            gone = root is None or root.is_symlink() or not root.is_dir()
            missing.update((slug, path) for path in store.baseline if gone or not os.path.lexists(root / path))
        return [{"slug": slug, "path": path} for slug, path in sorted(missing)]

    @property
    def last_sync(self) -> float:
        """The engine's monotonic time of its last completed sync (changes when `sync_if_due` ran one)."""
        return self._last_sync

    async def after_sync(self) -> None:
        """Make the files of read-only roots read-only again (a pull replaces files with fresh ones)."""
        for root in self.read_only_roots:
            make_read_only(root)

    async def preserve_unsynced(self) -> list[KeptFile]:
        """Copy every file whose bytes the server does not hold to `<workdir>/.memory-unsynced/<slug>/<path>`.

        Run after the last flush and before `dispose`. Walks each mount on disk (symlinks are not followed
        and not copied), so files the engine itself skips — binary, names it cannot map — are kept too. A file
        counts when its SHA-256 differs from the engine's baseline (the last content known to be on the
        server): new, edited, refused or never pushed. Returns (and appends to `unsynced`) what it kept; never
        raises: a file that cannot be copied is logged and the others are still copied.
        """
        kept: list[KeptFile] = []
        for store in self._stores:
            slug = self._slug(store)
            try:
                root = Path(store.files.root().path)
            except Exception as e:  # no root: nothing was ever written there
                log.warning("could not preserve unsynced files memory_store_id=%s: %s", store.memory_store_id, e)
                continue
            if root.is_symlink():  # the agent replaced its mount by a link: what it points at is not the mount's
                log.warning("unsynced: %s is a symbolic link now; not followed, nothing under it kept", root)
                continue
            for dirpath, _dirs, names in os.walk(root):
                for name in sorted(names):
                    path = Path(dirpath) / name
                    rel = path.relative_to(root).as_posix()
                    if rel == MARKER_PATH:
                        continue
                    try:
                        data = _read_regular(path)
                        if data is None or _sha256(data) == store.baseline.get(rel):
                            continue
                        target = _keep_unsynced(self._work_path / UNSYNCED_DIR / slug, rel, data)
                    except Exception as e:  # one file's failure must not cost the others their copies
                        log.error("unsynced: could not keep %s: %s", shown(f"{slug}/{rel}"), e)
                        continue
                    kept.append(KeptFile(slug=slug, path=rel, kept_at=str(target)))
                    log.warning(
                        "unsynced: %s did not reach the server; kept at %s", shown(f"{slug}/{rel}"), shown(str(target))
                    )
        self.unsynced.extend(kept)
        return kept

    async def dispose(self) -> None:
        """The engine's dispose, after making read-only roots writable again so they can be removed, and
        after removing a mount the agent replaced by a symbolic link (the link only, never what it points at:
        the engine could not remove it, and it stayed in the mount root, a breaker)."""
        for root in self.read_only_roots:
            make_writable(root)
        for store in self._stores:
            try:
                root = Path(store.files.root().path)
                if root.is_symlink():
                    root.unlink()
                    log.warning("removed %s: the agent had replaced its mount by a symbolic link", root)
            except Exception as e:  # no root, or the link cannot go: the engine's dispose reports the rest
                log.warning("could not remove a linked mount memory_store_id=%s: %s", store.memory_store_id, e)
        await super().dispose()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _keep_unsynced(base: Path, rel: str, data: bytes) -> Path:
    """Write `data` as `base/rel`; returns where it went.

    When an earlier item (a reused work directory) left something else there — other bytes, or a folder
    where this is a file, or a file where this needs a folder — the copy goes beside it under a stamped,
    flat name (`<path with / as ∕>~<UTC time>`) instead: both are kept.
    """
    target = base / rel
    if target.is_file() and not target.is_symlink() and target.read_bytes() == data:
        return target
    candidate = target if not (target.exists() or target.is_symlink()) else target.with_name(_stamped(target.name))
    try:
        _write_copy(candidate, data)
        return candidate
    except OSError:  # a parent is a file (or the name cannot be made): a flat stamped name in `base` itself
        flat = base / _stamped(rel.replace("/", "∕"))
        _write_copy(flat, data)
        return flat


def _stamped(name: str) -> str:
    """`name~<UTC time>`, shortened (keeping a hash of the whole name) when it would pass 255 bytes."""
    head, _, last = name.rpartition("/")
    suffix = f"~{utc_stamp()}"
    if len((last + suffix).encode("utf-8", "surrogateescape")) > 255:
        digest = hashlib.sha256(last.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        last = last.encode("utf-8", "surrogateescape")[:150].decode("utf-8", "surrogateescape") + f"…{digest}"
    return f"{head}/{last}{suffix}" if head else f"{last}{suffix}"


def _local_file(store, rel: str) -> Path | None:
    """The on-disk path of `rel` inside the store's mount, or None when it would leave the mount."""
    try:
        root = Path(store.files.root().path)
    except Exception:
        return None
    path = root / rel
    try:
        path.parent.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return None
    return path


def _read_regular(path: Path) -> bytes | None:
    """The bytes of `path` when it is a regular file (not a symlink), else None."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return path.read_bytes()
    except OSError:
        return None


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
