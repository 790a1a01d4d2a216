"""The worker's copy helpers (worker/sync.py, worker/runner.py): a copy is always made somewhere, whatever an
earlier item left in the work directory, and whatever the file or mount is called."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from worker.mountroot import (
    LEFTOVERS_DIR,
    LOCK_FILE,
    MountRootError,
    MountRootLock,
    check_layout,
    set_aside_copies,
    set_aside_leftovers,
)
from worker.sync import _keep_unsynced, _stamped


def test_a_copy_lands_beside_an_earlier_different_one_or_flat_when_a_folder_or_file_is_in_the_way(tmp_path):
    base = tmp_path / "unsynced" / "notes"
    assert _keep_unsynced(base, "a.md", b"one").read_bytes() == b"one"
    assert _keep_unsynced(base, "a.md", b"one") == base / "a.md"  # the same bytes: nothing new
    beside = _keep_unsynced(base, "a.md", b"two")
    assert beside.parent == base and beside.name.startswith("a.md~") and beside.read_bytes() == b"two"
    (base / "dir").mkdir()
    as_file = _keep_unsynced(base, "dir", b"a file where a folder was")
    assert as_file.read_bytes() == b"a file where a folder was"
    (base / "b").write_bytes(b"a file")
    nested = _keep_unsynced(base, "b/c.md", b"needs b to be a folder")
    assert nested.parent == base and nested.read_bytes() == b"needs b to be a folder"
    assert (base / "b").read_bytes() == b"a file"  # the earlier copy is kept


def test_stamped_names_fit_255_bytes_and_take_undecodable_names(tmp_path):
    one, other = _stamped("n" * 250 + ".md"), _stamped("n" * 251 + ".md")
    assert len(one.encode()) <= 255 and len(other.encode()) <= 255
    assert one.split("~")[0] != other.split("~")[0]  # shortened, but each keeps a hash of its whole name
    odd = os.fsdecode(b"caf\xe9.md")
    (tmp_path / _stamped(odd)).write_bytes(b"kept")  # a name the file system takes
    long_odd = os.fsdecode(b"\xe9" * 254)
    assert len(os.fsencode(_stamped(long_odd))) <= 255


def test_a_leftover_mount_outside_the_mount_root_with_a_long_name_is_still_set_aside(tmp_path):
    root, elsewhere = tmp_path / "mnt", tmp_path / "elsewhere"
    path = elsewhere / ("a" * 240)
    path.mkdir(parents=True)
    (path / "f.md").write_text("kept")
    mount_lock = MountRootLock.acquire(root)
    try:
        resources = [SimpleNamespace(mount_path=str(path))]
        (moved,) = set_aside_leftovers(resources, stamp="20261201T000000.000000Z", mount_lock=mount_lock)
    finally:
        mount_lock.release()
    assert not path.exists() and (elsewhere / os.path.basename(moved) / "f.md").read_text() == "kept"
    assert len(os.path.basename(moved).encode()) <= 255


def test_everything_in_the_mount_root_but_the_workers_own_files_is_moved_into_a_private_leftovers_folder(tmp_path):
    """A dead run's mount of another store and an agent's stray folder were in the next agent's view of the
    mount root (a breaker listed `/mnt/memory` and read a store its session was never given)."""
    root = tmp_path / "mnt"
    mount_lock = MountRootLock.acquire(root)
    try:
        (root / "secret-x").mkdir()
        (root / "secret-x" / "plan.md").write_text("a dead run's unpushed edit")
        (root / ("b" * 250)).mkdir()  # a long name moves whole: the stamp is a folder, not a suffix
        (root / "notes.txt").write_text("an agent's file beside its mounts")
        resources = [SimpleNamespace(mount_path=str(root / "other-y")), SimpleNamespace(mount_path=None)]
        moved = set_aside_leftovers(resources, stamp="20261207T000000.000000Z", mount_lock=mount_lock)
        assert sorted(os.listdir(root)) == [LEFTOVERS_DIR, LOCK_FILE]  # the lock file stays, and nothing else
    finally:
        mount_lock.release()
    folder = root / LEFTOVERS_DIR / "20261207T000000.000000Z"
    assert moved == [str(folder / name) for name in ("b" * 250, "notes.txt", "secret-x")]
    assert (folder / "secret-x" / "plan.md").read_text() == "a dead run's unpushed edit"  # every byte kept
    assert (root / LEFTOVERS_DIR).stat().st_mode & 0o777 == 0o700
    assert folder.stat().st_mode & 0o777 == 0o700


def test_an_empty_mount_root_gets_no_leftovers_folder(tmp_path):
    root = tmp_path / "mnt"
    mount_lock = MountRootLock.acquire(root)
    try:
        assert set_aside_leftovers([], stamp="20261207T000000.000000Z", mount_lock=mount_lock) == []
        assert os.listdir(root) == [LOCK_FILE]
    finally:
        mount_lock.release()


@pytest.mark.parametrize("inside", [".", "work", "work/deeper"])
def test_a_work_directory_inside_the_mount_root_is_refused(tmp_path, inside):
    with pytest.raises(MountRootError, match="lies inside --mount-root"):
        check_layout(tmp_path / "mnt", tmp_path / "mnt" / inside)
    check_layout(tmp_path / "mnt", tmp_path / "work")  # beside it: fine
    check_layout(tmp_path / "work-mnt", tmp_path / "work")  # a shared name prefix is not nesting


@pytest.mark.parametrize("inside", ["mnt", "a/b/mnt"])
def test_a_mount_root_inside_the_work_directory_is_refused(tmp_path, inside):
    """The file tools are rooted at the work directory: a mount root inside it would put the leftovers folder
    (other sessions' mounts) and read-only mounts within their reach (a breaker, helper-78)."""
    with pytest.raises(MountRootError, match="lies inside --workdir"):
        check_layout(tmp_path / "work" / inside, tmp_path / "work")
    (tmp_path / "link").symlink_to(tmp_path / "work", target_is_directory=True)
    (tmp_path / "work").mkdir(exist_ok=True)
    with pytest.raises(MountRootError, match="lies inside --workdir"):  # resolved: a link to it is no way round
        check_layout(tmp_path / "link" / inside, tmp_path / "work")


@pytest.mark.parametrize("plant", ["link", "file", "dangling"])
def test_a_leftovers_folder_planted_by_an_agent_is_never_followed(tmp_path, plant):
    """An agent that links `.memories-worker.leftovers` to a folder it can read (or leaves a file there) must not
    get the next dead run's mounts moved there, nor its target's mode changed: the plant is a stray itself."""
    root, target = tmp_path / "mnt", tmp_path / "agent-readable"
    target.mkdir(mode=0o755)
    mount_lock = MountRootLock.acquire(root)
    try:
        if plant == "link":
            (root / LEFTOVERS_DIR).symlink_to(target)
        elif plant == "dangling":
            (root / LEFTOVERS_DIR).symlink_to(tmp_path / "nowhere")
        else:
            (root / LEFTOVERS_DIR).write_text("not a folder")
        (root / "secret-x").mkdir()
        (root / "secret-x" / "plan.md").write_text("TOPSECRET-X")
        moved = set_aside_leftovers([], stamp="20261207T000000.000000Z", mount_lock=mount_lock)
    finally:
        mount_lock.release()
    leftovers = root / LEFTOVERS_DIR
    assert leftovers.is_dir() and not leftovers.is_symlink() and leftovers.stat().st_mode & 0o777 == 0o700
    folder = leftovers / "20261207T000000.000000Z"
    assert moved == [str(folder / LEFTOVERS_DIR), str(folder / "secret-x")]
    assert (folder / "secret-x" / "plan.md").read_text() == "TOPSECRET-X"
    assert os.listdir(target) == [] and target.stat().st_mode & 0o777 == 0o755
    kept = folder / LEFTOVERS_DIR
    assert kept.is_symlink() if plant != "file" else kept.read_text() == "not a folder"


def test_a_stamp_folder_that_exists_already_is_never_reused(tmp_path):
    root = tmp_path / "mnt"
    mount_lock = MountRootLock.acquire(root)
    try:
        (root / LEFTOVERS_DIR).mkdir()
        (root / LEFTOVERS_DIR / "20261207T000000.000000Z").symlink_to(tmp_path)  # however it got there
        (root / "x").mkdir()
        (moved,) = set_aside_leftovers([], stamp="20261207T000000.000000Z", mount_lock=mount_lock)
    finally:
        mount_lock.release()
    assert moved == str(root / LEFTOVERS_DIR / "20261207T000000.000000Z-2" / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("plant", ["folder", "link", "file"])
def test_copies_in_the_work_directory_move_to_the_leftovers_folder_as_they_are(tmp_path, plant):
    """`.memory-conflicts`/`.memory-unsynced` hold earlier sessions' files: moved out of the work directory
    (the file tools' root) into the private leftovers folder; a link planted under the name moves as a link,
    its target untouched; nothing there, nothing made."""
    work, target = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    target.mkdir()
    (target / "keep.txt").write_text("not the worker's")
    mount_lock = MountRootLock.acquire(tmp_path / "mnt")
    try:
        assert set_aside_copies(work, (".memory-conflicts", ".memory-unsynced"), stamp="S", mount_lock=mount_lock) == []
        assert not (tmp_path / "mnt" / LEFTOVERS_DIR).exists()
        if plant == "folder":
            (work / ".memory-unsynced" / "alpha").mkdir(parents=True)
            (work / ".memory-unsynced" / "alpha" / "plan.md").write_text("ALPHA")
        elif plant == "link":
            (work / ".memory-unsynced").symlink_to(target, target_is_directory=True)
        else:
            (work / ".memory-unsynced").write_text("a file")
        (work / ".memory-conflicts").mkdir()
        moved = set_aside_copies(work, (".memory-conflicts", ".memory-unsynced"), stamp="S", mount_lock=mount_lock)
    finally:
        mount_lock.release()
    folder = tmp_path / "mnt" / LEFTOVERS_DIR / "S.workdir"
    assert moved == [str(folder / ".memory-conflicts"), str(folder / ".memory-unsynced")]
    assert not os.path.lexists(work / ".memory-unsynced") and not os.path.lexists(work / ".memory-conflicts")
    assert folder.stat().st_mode & 0o777 == 0o700
    aside = folder / ".memory-unsynced"
    if plant == "folder":
        assert (aside / "alpha" / "plan.md").read_text() == "ALPHA"
    elif plant == "link":
        assert aside.is_symlink() and os.readlink(aside) == str(target)
    else:
        assert aside.read_text() == "a file"
    assert os.listdir(target) == ["keep.txt"]  # never followed


DOCKER_VOLUMES = """\
1 0 0:50 / / rw - overlay overlay rw
2 1 259:1 /srv/agents/a1/work /work rw,relatime - ext4 /dev/nvme0n1p1 rw
3 1 259:1 /srv/agents/a1/work/mnt /mnt/memory rw,relatime - ext4 /dev/nvme0n1p1 rw
4 1 259:1 /srv/agents/a1/mnt\\040memory /mnt/other rw,relatime - ext4 /dev/nvme0n1p1 rw
5 1 0:60 / /mnt/tmp rw - tmpfs tmpfs rw
6 1 259:1 /srv/agents/a2/work /work2 rw,relatime - ext4 /dev/nvme0n1p1 rw
7 6 259:1 /srv/agents/a2/mnt /work2/view rw,relatime - ext4 /dev/nvme0n1p1 rw
8 1 259:1 /srv/agents/a2/mnt /mnt2 rw,relatime - ext4 /dev/nvme0n1p1 rw
9 1 259:1 /srv/agents/a3/work /work3 rw,relatime - ext4 /dev/nvme0n1p1 rw
10 1 259:1 /srv/agents/a3/mnt /mnt3 rw,relatime - ext4 /dev/nvme0n1p1 rw
11 10 259:1 /srv/agents/a3/work /mnt3/wview rw,relatime - ext4 /dev/nvme0n1p1 rw
12 1 259:1 /srv/agents/a4/mnt/.memories-worker.leftovers /work4/old rw - ext4 /dev/nvme0n1p1 rw
13 1 259:1 /srv/agents/a4/mnt /mnt4 rw - ext4 /dev/nvme0n1p1 rw
"""


@pytest.mark.parametrize(
    ("mount_root", "workdir", "refused"),
    [
        ("/mnt/memory", "/work", True),  # volumes: host work/ and work/mnt, one inside the other on disk
        ("/mnt/memory/deeper", "/work", True),
        ("/mnt/other", "/work", False),  # beside it on the same disk (a name with a space)
        ("/mnt/tmp/mnt", "/work", False),  # another filesystem
        ("/mnt/memory", "/srv", False),  # /srv is the overlay root's, not the disk's
        ("/mnt2", "/work2", True),  # a mount beneath the work directory shows the mount root (helper-82)
        ("/mnt3", "/work3", True),  # a mount beneath the mount root shows the work directory
        ("/mnt4", "/work4", True),  # ... or a part of the mount root: its leftovers
        ("/mnt2", "/work3", False),
    ],
)
def test_a_mount_root_and_work_directory_nested_on_disk_through_volumes_are_refused(mount_root, workdir, refused):
    """`-v host/work:/work -v host/work/mnt:/mnt/memory` passed the path checks: the file tools reached the
    leftovers folder through the work directory (a breaker, helper-80). Where they really are decides."""
    if refused:
        with pytest.raises(MountRootError, match="reach into each other on disk"):
            check_layout(Path(mount_root), Path(workdir), mountinfo=DOCKER_VOLUMES)
    else:
        check_layout(Path(mount_root), Path(workdir), mountinfo=DOCKER_VOLUMES)


def test_a_real_bind_mount_of_a_folder_inside_the_work_directory_is_refused(tmp_path):
    """The same through real bind mounts, either way round (needs the right to mount: root, as on the CI
    machine)."""
    work, root = tmp_path / "work", tmp_path / "mnt"
    (work / "sub").mkdir(parents=True)
    (work / "view").mkdir()
    root.mkdir()
    if subprocess.run(["mount", "--bind", str(work / "sub"), str(root)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here (not root)")
    try:
        with pytest.raises(MountRootError, match="reach into each other on disk"):
            check_layout(root, work)
        check_layout(tmp_path / "elsewhere", work)
    finally:
        subprocess.run(["umount", str(root)], check=True)
    subprocess.run(["mount", "--bind", str(root), str(work / "view")], check=True)  # the root shown in work/view
    try:
        with pytest.raises(MountRootError, match="reach into each other on disk"):
            check_layout(root, work)
    finally:
        subprocess.run(["umount", str(work / "view")], check=True)
    check_layout(root, work)  # beside each other again
