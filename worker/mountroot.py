"""One worker per mount root, and no agent outliving its worker (SPEC §5: "A lost lease stops the agent; nothing
it writes afterwards lands").

Mount paths are `<mount-root>/<slug>` — the same path for every session attaching a store of that name, by
contract. So a worker holds an exclusive `flock` on `<mount-root>/.memories-worker.lock` for its whole life
(`MountRootLock`): a second worker on the same mount root refuses to start instead of taking over the first
one's live mounts, and only the lock holder may treat a mount path it finds on disk as a dead run's leftovers.
The kernel drops the lock when its holder dies, however it dies; the lock file is not inherited by the agent.

The agent must not outlive the worker either (Linux only): `agent_command` starts it through a tiny helper that
sets `PR_SET_PDEATHSIG` = SIGKILL before it execs the agent, so the agent dies with the worker; and since that
does not reach the agent's own children, the lock holder records the running agent's process group in
`<mount-root>/.memories-worker.agent` (`record_agent`). A worker that takes the lock first kills
(`end_orphaned_agent`: SIGKILL to the group) whatever group a dead predecessor recorded that is still running,
before any mount path is set aside and downloaded to again (`set_aside_leftovers`). The record names the group
leader's start time too (`/proc/<pid>/stat`), so a process that merely got a recorded pid again is never killed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from config.text import quoted

log = logging.getLogger("memories_worker")

LOCK_FILE = ".memories-worker.lock"
AGENT_FILE = ".memories-worker.agent"
LEFTOVERS_DIR = ".memories-worker.leftovers"  # what `set_aside_leftovers` moves out of the way
# Left in a mount root when a worker first takes it, and never removed: what is in a root that has it is a
# worker's (`MountRootLock.refuse_foreign`).
ROOT_MARKER = ".memories-worker.root"
# What a mount root may hold that is never a leftover: the worker's own files, and the folder a file system
# keeps at its root (a volume mounted at /mnt/memory has one).
_OWN_NAMES = frozenset({LOCK_FILE, AGENT_FILE, LEFTOVERS_DIR, ROOT_MARKER, "lost+found"})

# Run as `python -I -c PDEATHSIG_HELPER <worker pid> <agent command…>` (isolated: nothing from the agent's work
# directory or environment is imported). The signal survives the exec; the parent check closes the race of a
# worker that died before the prctl. A preexec_fn would do the same, but is not safe in a process with threads.
# Python's start-up ignores SIGPIPE (and SIGXFSZ) and an exec keeps what is ignored: agents ran with them
# ignored, so `yes | head` in an agent's shell never ended `yes` (helper-107). They are reset before the exec.
PDEATHSIG_HELPER = """\
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
    sys.exit("memories-worker: prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.exit("memories-worker: the worker ended before its agent started")
for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # Python ignores these; an exec would pass that on to the agent
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    print("memories-worker: cannot run the agent command %r: %s" % (sys.argv[2], e), file=sys.stderr)
    sys.exit(127)
"""

EXIT_MOUNT_ROOT = 3  # the process exit status of a worker that cannot use its mount root (cli.py, README)


class MountRootError(Exception):
    """The mount root cannot be used: another worker holds it, it cannot be created or locked, or a dead
    worker's agent there cannot be killed. `str()` is the one-line message for the operator."""


def agent_command(agent_cmd: tuple[str, ...] | list[str]) -> list[str]:
    """The argv that starts `agent_cmd` so it is SIGKILLed when the worker dies (Linux; elsewhere unchanged).

    The helper execs the agent in place: the child's pid, process group and start time are the agent's. The
    agent must be started from a thread that lives as long as the worker (PR_SET_PDEATHSIG fires when the
    creating *thread* ends): the runner starts it from the event loop's thread. A command that cannot be run
    makes the agent exit 127 with a message on stderr.
    """
    if not sys.platform.startswith("linux"):
        return list(agent_cmd)
    return [sys.executable, "-I", "-c", PDEATHSIG_HELPER, str(os.getpid()), *agent_cmd]


@dataclass(frozen=True)
class _Stat:
    state: str
    pgrp: int
    session: int
    start_time: int  # clock ticks since boot


def _stat(pid: int) -> _Stat | None:
    """`/proc/<pid>/stat`'s fields we use, or None when there is no such process (or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces and parentheses
    try:
        return _Stat(state=fields[0], pgrp=int(fields[2]), session=int(fields[3]), start_time=int(fields[19]))
    except (IndexError, ValueError):
        return None


def process_start_time(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot, `/proc/<pid>/stat` field 22), None if unknown.

    With the pid it names one process for good: a later process reusing the pid starts later.
    """
    stat = _stat(pid)
    return stat.start_time if stat else None


def group_members(pgid: int, start_time: int) -> list[int] | None:
    """The live (non-zombie) processes of the agent process group `pgid` whose leader started at `start_time`.

    Returns None when the group is not that agent's: its leader pid now belongs to a process that started at
    another time. The agent was its own session's leader (`start_new_session`), so a member has session
    `pgid` and started no earlier than the leader. The kernel never reuses a pid that still names a live
    process group, so members of the group found this way are the agent's own (the residual case — the group
    emptied, the pid was reused by a new group leader that has also died while its group lives — is accepted).
    """
    leader = _stat(pgid)
    if leader is not None and leader.start_time != start_time:
        return None
    members = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            stat = _stat(int(entry.name))
            if (
                stat
                and stat.pgrp == pgid
                and stat.session == pgid
                and stat.state not in ("Z", "X")
                and stat.start_time >= start_time
            ):
                members.append(int(entry.name))
    return sorted(members)


def _refuse_shared_file(fd: int, path: Path) -> None:
    """Raise MountRootError (closing `fd`) unless `fd` is a regular file with no other name: the lock file is
    truncated and written, and a hard link planted at its path (by an agent) had the next worker overwrite
    the file it shares (a breaker: O_NOFOLLOW only stops symbolic links)."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return
    os.close(fd)
    raise MountRootError(f"{path} is not a worker's lock file (another name links to it, or it is no file); remove it")


class MountRootLock:
    """An exclusive `flock` on `<root>/.memories-worker.lock`, held from `acquire` to `release` (or the
    process's death). The lock file holds the holder's pid, for the message of a worker that is refused."""

    def __init__(self, root: Path, fd: int, *, inherited: bool = False) -> None:
        self.root = root
        self._fd: int | None = fd
        # The lock file was there before this worker: one that died left it (a normal exit removes it), so
        # whatever else is in the root is that worker's (`refuse_foreign`).
        self.inherited = inherited

    @property
    def held(self) -> bool:
        """Whether this lock is still held (not yet released)."""
        return self._fd is not None

    @classmethod
    def acquire(cls, root: Path) -> MountRootLock:
        """Create `root` if needed and take its lock without waiting; returns the held lock.

        Raises MountRootError when another process holds it ("another memories-worker is using mount root
        <root> (pid N); …") or when the root or its lock file cannot be created or locked.
        """
        path = root / LOCK_FILE
        try:
            root.mkdir(parents=True, exist_ok=True)
            inherited = path.exists()
            while True:
                # Never through a link: one planted there (by an agent) had the next worker truncate and write
                # its pid into the file it names (a breaker).
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                    os.close(fd)
                    raise MountRootError(
                        f"another memories-worker is using mount root {root} (pid {holder}); "
                        "give each worker its own --mount-root"
                    ) from None
                except BaseException:
                    os.close(fd)
                    raise
                # A releasing holder unlinks the file: a lock on an unlinked file protects nothing, so try again.
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(path))
                except FileNotFoundError:
                    same = False
                if same:
                    _refuse_shared_file(fd, path)
                    break
                os.close(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise MountRootError(f"{path} is a symbolic link, not a worker's lock file; remove it") from e
            raise MountRootError(f"cannot lock mount root {root}: {e}") from e
        return cls(root, fd, inherited=inherited)

    def refuse_foreign(self) -> None:
        """Raise MountRootError when the root may hold what no worker left there; otherwise mark it as a
        worker's for good (`ROOT_MARKER`).

        A root a worker has taken before (the marker), or one a worker died holding (its lock file was there:
        a worker before the marker), holds only what workers and their agents left, which clearing it before
        an item (`set_aside_leftovers`) moves aside. Any other root must hold nothing but a worker's own names:
        clearing it would move someone's files away — a home directory given as `--mount-root` was emptied
        into the leftovers folder (a breaker).
        """
        self._require()
        marker = self.root / ROOT_MARKER
        if marker.is_file() and not marker.is_symlink():
            return
        foreign = [] if self.inherited else sorted(p.name for p in self.root.iterdir() if p.name not in _OWN_NAMES)
        if foreign:
            more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
            raise MountRootError(
                f"mount root {self.root} holds {quoted(foreign[0])}{more} and is no memories-worker's (it has no "
                f"{ROOT_MARKER}); give the worker an empty directory of its own, or move those away"
            )
        try:  # created, never opened if there: nothing is written through a link planted at its path
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, b"A memories-worker mount root: what is here is moved aside, never deleted.\n")
            finally:
                os.close(fd)
        except OSError as e:
            raise MountRootError(f"cannot mark mount root {self.root} as a worker's ({marker}): {e}") from e

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent). Unlinking before unlocking: a worker that
        opened the old file then finds it unlinked and tries again (see `acquire`)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            (self.root / LOCK_FILE).unlink()
        os.close(self._fd)
        self._fd = None

    def _require(self) -> None:
        if self._fd is None:
            raise RuntimeError(f"the lock on mount root {self.root} is not held")

    def record_agent(self, pid: int) -> None:
        """Record the agent `pid` (the leader of its own process group) with its start time, so a worker
        starting after this one died can kill what is left of it. Raises RuntimeError unless held."""
        self._require()
        start_time = process_start_time(pid)
        if start_time is None:  # no /proc, or the agent already exited: nothing to identify it by later
            return
        record = {"pgid": pid, "start_time": start_time, "worker_pid": os.getpid()}
        tmp = self.root / f"{AGENT_FILE}.tmp"
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(self.root / AGENT_FILE)

    def forget_agent(self, pgid: int, timeout: float = 1.0) -> bool:
        """Remove the record of agent group `pgid` once nothing of it runs any more (waiting up to `timeout`
        seconds for processes just SIGKILLed to end); returns whether it did. A group still running stays
        recorded for the next worker. Raises RuntimeError unless held."""
        self._require()
        record = self._read_record()
        if record is None or record["pgid"] != pgid:
            return True
        deadline = time.monotonic() + timeout
        while group_members(pgid, record["start_time"]):
            if time.monotonic() > deadline:
                log.warning("the agent's process group %d still runs; it stays recorded for the next worker", pgid)
                return False
            time.sleep(0.05)
        self._remove_record()
        return True

    def end_orphaned_agent(self, timeout: float = 5.0) -> list[int]:
        """SIGKILL the process group a dead worker's agent left running in this mount root, wait up to
        `timeout` seconds for it to end, and remove the record; returns the pids that were killed ([] when
        there was nothing to do). Call before any mount path is set aside.

        Raises MountRootError when the group cannot be killed (another user's, or still running after
        `timeout`): its processes would write into the mounts of the next items. RuntimeError unless held.
        """
        self._require()
        record = self._read_record()
        if record is None:
            return []
        pgid, start_time = record["pgid"], record["start_time"]
        members = group_members(pgid, start_time)
        if not members:  # ended already, or the pid belongs to another process now
            self._remove_record()
            return []
        log.warning(
            "the agent of a dead worker (pid %s) still runs in %s: SIGKILL to its process group %d (pids %s)",
            record.get("worker_pid"),
            self.root,
            pgid,
            " ".join(map(str, members)),
        )
        killed, deadline = members, time.monotonic() + timeout
        while members:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError as e:
                raise MountRootError(
                    f"the agent a dead worker left running in mount root {self.root} (process group {pgid}) "
                    f"cannot be killed: {e}; stop it, then start the worker again"
                ) from e
            if time.monotonic() > deadline:
                raise MountRootError(
                    f"the agent a dead worker left running in mount root {self.root} (process group {pgid}) "
                    f"did not end within {timeout:g}s of SIGKILL; stop it, then start the worker again"
                )
            time.sleep(0.05)
            members = group_members(pgid, start_time) or []
        self._remove_record()
        return killed

    def _read_record(self) -> dict | None:
        try:
            record = json.loads((self.root / AGENT_FILE).read_text(encoding="utf-8"))
            if isinstance(record.get("pgid"), int) and isinstance(record.get("start_time"), int):
                return record
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError) as e:
            log.warning("ignoring an unreadable agent record in %s: %s", self.root, e)
        else:
            log.warning("ignoring a malformed agent record in %s", self.root)
        self._remove_record()
        return None

    def _remove_record(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / AGENT_FILE).unlink()


def set_aside_leftovers(resources, *, stamp: str, mount_lock: MountRootLock) -> list[str]:
    """Clear the mount root before an item's download: move everything in it but the worker's own files into
    `<mount-root>/.memories-worker.leftovers/<stamp>/`, and rename a mount path *outside* the root that already
    exists to `<path>.leftover-<stamp>` beside it. Returns the new paths (the item's summary lists them).

    What can be there: a dead run's mounts (the worker was SIGKILLed: every byte, the agent's unpushed edits
    included), a mount the engine left because the agent deleted its `.anthropic-memory-store` marker, folders
    an agent made beside its mounts. Left in place they were in every later agent's view — `ls /mnt/memory`
    listed another session's store, which that session was never given (a breaker) — and the engine refused
    every later session attaching a store of that name. The leftovers folder is hidden and mode 0700, outside
    every mount path, so the file tools (rooted at the work directory and the mounts) cannot reach it; nothing
    in it is read or uploaded (docs/worker.md "Leftover mounts"). The operator deletes it.

    resources: the session's memory-store resources, `mount_path` already relocated. mount_lock: the held
    lock on the mount root — only then is no other worker using a path there, so what is there is a dead
    run's. Raises RuntimeError when the lock is not held.
    """
    if not mount_lock.held:
        raise RuntimeError("mount paths may be set aside only under the mount root's lock")
    moved = []
    root = mount_lock.root
    leftovers = root / LEFTOVERS_DIR
    planted = None
    if leftovers.is_symlink() or (leftovers.exists() and not leftovers.is_dir()):
        # Not the worker's: something (an agent) put a link or a file there. Following it would move the next
        # strays where it points and chmod its target; it becomes a stray itself, kept like the others.
        planted = root / f"{LEFTOVERS_DIR}.planted-{stamp}"
        try:
            leftovers.rename(planted)
        except OSError as e:
            log.error("could not move %s (not the worker's folder) aside: %s", leftovers, e)
            return moved
    strays = sorted(p for p in root.iterdir() if p.name not in _OWN_NAMES)
    if strays:
        try:
            folder = _stamp_folder(leftovers, stamp)
        except OSError as e:  # each stray then stays; a mount path among them is refused by the download
            log.error("could not make a leftovers folder in %s: %s", leftovers, e)
            strays = []
    for path in strays:
        aside = folder / (LEFTOVERS_DIR if path == planted else path.name)
        try:
            path.rename(aside)
        except OSError as e:
            log.error("could not move %s out of the mount root: %s", path, e)
            continue
        moved.append(str(aside))
        log.warning("moved %s (a dead run's mount or an agent's folder) out of the mount root to %s", path, aside)
    for resource in resources:
        if not resource.mount_path:
            continue
        path = Path(resource.mount_path)
        if path.is_relative_to(root) or not (path.exists() or path.is_symlink()):
            continue
        name = path.name
        if len(f"{name}.leftover-{stamp}".encode("utf-8", "surrogateescape")) > 255:  # keep a hash of it
            digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
            name = name.encode("utf-8", "surrogateescape")[:150].decode("utf-8", "surrogateescape") + digest
        aside = path.with_name(f"{name}.leftover-{stamp}")
        try:
            path.rename(aside)
        except OSError as e:  # the download then refuses the path, with the engine's own message
            log.error("could not move the leftover mount %s aside: %s", path, e)
            continue
        moved.append(str(aside))
        log.warning("a mount path already existed (a dead run's leftovers?); moved aside to %s", aside)
    return moved


def _stamp_folder(leftovers: Path, name: str) -> Path:
    """A new folder `name` (0700; `name-2`, … when taken) in the leftovers folder, made private first."""
    leftovers.mkdir(mode=0o700, exist_ok=True)
    leftovers.chmod(0o700)
    return _new_folder(leftovers, name)


def _new_folder(parent: Path, name: str) -> Path:
    """Make a new folder (mode 0700) named `name` in `parent`, or `name-2`, `name-3`, … when it exists: never
    one made before (a link planted under that name included)."""
    for attempt in range(1, 1000):
        folder = parent / (name if attempt == 1 else f"{name}-{attempt}")
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"no free folder name for {name} in {parent}")


def set_aside_copies(workdir: Path, names: tuple[str, ...], *, stamp: str, mount_lock: MountRootLock) -> list[str]:
    """Move the copies earlier items kept in the work directory — the folders `names` (`.memory-conflicts`,
    `.memory-unsynced`) — into `<mount-root>/.memories-worker.leftovers/<stamp>.workdir/`, before the next
    item's agent starts. Returns the new paths (the item's summary lists them under `leftovers`).

    They hold other sessions' store files (a losing edit, what a flush could not push): in the work directory
    the next session's agent read them with its file tools, stores it was never given included (a breaker,
    helper-81). In the leftovers folder they are out of the file tools' reach and still kept for the operator,
    never deleted (SPEC §5: "never lost"). A link or a file planted under one of the names moves as itself,
    never followed. Across filesystems (a work volume and a mount volume) the move copies, links as links, and
    then removes the original. A folder that cannot be moved stays, and is logged.
    """
    if not mount_lock.held:
        raise RuntimeError("copies may be set aside only under the mount root's lock")
    present = [workdir / name for name in names if os.path.lexists(workdir / name)]
    if not present:
        return []
    leftovers = mount_lock.root / LEFTOVERS_DIR
    try:
        if leftovers.is_symlink() or (leftovers.exists() and not leftovers.is_dir()):
            raise OSError(f"{leftovers} is not the worker's folder")  # set_aside_leftovers moves it first
        folder = _stamp_folder(leftovers, f"{stamp}.workdir")
    except OSError as e:
        log.error("could not make a folder for the work directory's copies in %s: %s", leftovers, e)
        return []
    moved = []
    for path in present:
        aside = folder / path.name
        try:
            shutil.move(path, aside)  # os.rename, or copy (links as links) and remove across filesystems
        except OSError as e:
            log.error("could not move %s out of the work directory: %s", path, e)
            continue
        moved.append(str(aside))
        log.warning("moved %s (copies kept by earlier items) out of the work directory to %s", path, aside)
    return moved


def _unescape(field: str) -> str:
    """A path field of /proc/self/mountinfo: the kernel writes space, tab, newline and backslash as octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts(mountinfo: str) -> list[tuple[str, PurePosixPath, PurePosixPath]]:
    """(device, root within its filesystem, mount point) of each line of a /proc/self/mountinfo text."""
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)[0].split()
        if len(fields) >= 5:
            mounts.append((fields[2], PurePosixPath(_unescape(fields[3])), PurePosixPath(_unescape(fields[4]))))
    return mounts


def _physical(path: Path, mounts) -> tuple[str, PurePosixPath] | None:
    """Where resolved `path` really is: (device, path within that device's filesystem), by the mount that
    holds it (the deepest mount point above it; of several on one point, the last, which hides the others)."""
    best = None
    for device, root, point in mounts:
        if PurePosixPath(path).is_relative_to(point) and (best is None or len(point.parts) >= len(best[2].parts)):
            best = (device, root, point)
    if best is None:
        return None
    device, root, point = best
    return device, root / PurePosixPath(path).relative_to(point)


def check_layout(mount_root: Path, workdir: Path, mountinfo: str | None = None) -> None:
    """Raise MountRootError unless the work directory and the mount root lie beside each other.

    The work directory the mount root or inside it: a store's mount (`<mount-root>/<slug>`) could land on the
    work directory, and clearing the mount root before an item (`set_aside_leftovers`) would move it away.
    The mount root inside the work directory: the agent's file tools, rooted at the work directory, would
    reach `<mount-root>/.memories-worker.leftovers/` — other sessions' stores and unpushed edits — and every
    mount, read-only ones included, through the work directory's root. Paths are compared resolved, and then
    where they really are (`mountinfo`, default /proc/self/mountinfo; skipped where there is none): a bind
    mount or a container's volumes (`-v host/work:/work -v host/work/mnt:/mnt/memory`) put one inside the
    other under unrelated names (a breaker, helper-80).
    """
    root, work = mount_root.resolve(), workdir.resolve()
    if work.is_relative_to(root):
        raise MountRootError(f"--workdir {workdir} lies inside --mount-root {mount_root}; give it a place outside")
    if root.is_relative_to(work):
        raise MountRootError(
            f"--mount-root {mount_root} lies inside --workdir {workdir}: the agent's file tools would reach the "
            "leftovers of other sessions through the work directory; give them places beside each other"
        )
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return
    mounts = _mounts(mountinfo)
    here, there = _physical(root, mounts), _physical(work, mounts)
    for folder, other, seen in ((work, root, here), (root, work, there)):
        for reached in _reachable(folder, mounts) if seen is not None else []:
            if reached[0] == seen[0] and (reached[1].is_relative_to(seen[1]) or seen[1].is_relative_to(reached[1])):
                raise MountRootError(
                    f"--mount-root {mount_root} ({root}) and --workdir {workdir} ({work}) reach into each other on "
                    f"disk: {folder} shows {other} (device {seen[0]}: {reached[1]} and {seen[1]}), through a bind "
                    "mount or a volume; give them places beside each other"
                )


def _reachable(folder: Path, mounts) -> list[tuple[str, PurePosixPath]]:
    """What resolved `folder` shows, as (device, path within its filesystem): its own place, and the source of
    every mount point beneath it (`mount --bind R W/view` shows R inside W, a breaker, helper-82)."""
    own = _physical(folder, mounts)
    beneath = [(device, root) for device, root, point in mounts if point != folder and point.is_relative_to(folder)]
    return ([own] if own is not None else []) + beneath
