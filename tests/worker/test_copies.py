"""The worker's copy helpers (worker/sync.py, worker/runner.py): a copy is always made somewhere, whatever an
earlier item left in the work directory, and whatever the file or mount is called."""

from __future__ import annotations

import os
from types import SimpleNamespace

from worker.mountroot import MountRootLock, set_aside_leftovers
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


def test_a_leftover_mount_with_a_long_name_is_still_set_aside(tmp_path):
    path = tmp_path / ("a" * 240)
    path.mkdir()
    (path / "f.md").write_text("kept")
    mount_lock = MountRootLock.acquire(tmp_path)
    try:
        resources = [SimpleNamespace(mount_path=str(path))]
        (moved,) = set_aside_leftovers(resources, stamp="20261201T000000.000000Z", mount_lock=mount_lock)
    finally:
        mount_lock.release()
    assert not path.exists() and (tmp_path / os.path.basename(moved) / "f.md").read_text() == "kept"
    assert len(os.path.basename(moved).encode()) <= 255
