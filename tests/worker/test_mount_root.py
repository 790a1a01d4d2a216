"""One worker per mount root, and no agent outliving its worker (SPEC §5; `worker/mountroot.py`), in the cases a
breaker found: a second worker on the same mount root took over the first one's live mount, and a SIGKILLed
worker's agent went on writing into the mount the next worker downloaded to the same path."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db.models.expressions import RawSQL

from sessions.models import Work
from tests.worker.conftest import WORKER, left_in
from tests.worker.test_run import contents, seed, work_state
from worker.mountroot import (
    AGENT_FILE,
    LEFTOVERS_DIR,
    LOCK_FILE,
    ROOT_MARKER,
    MountRootError,
    MountRootLock,
    agent_command,
    process_start_time,
)

MOUNT_ROOT_EXIT = 3


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.django_db(transaction=True)
def test_a_second_worker_on_the_same_mount_root_refuses_to_start_and_touches_nothing(worker, notes_store, make_session):
    make_session(notes_store)
    run = worker(
        """
        notes = MOUNTS / "team-notes"
        (notes / "a.md").write_text("the first agent's line\\n")
        say("written")
        wait("go")
        with open(notes / "a.md", "a") as f:
            f.write("its second line\\n")
        """,
        sync_interval=60,
    )
    run.wait_for("written")
    waiting = make_session(notes_store)  # queued, and mounted at the same path: /mnt/memory/team-notes
    before = sorted(p.name for p in run.mounts.iterdir())

    second = worker("say('ran')", name="second")
    second.process.wait(timeout=60)
    assert second.process.returncode == MOUNT_ROOT_EXIT, second.log()
    message = (
        f"another memories-worker is using mount root {run.mounts} (pid {run.process.pid}); "
        "give each worker its own --mount-root"
    )
    assert message in second.log()
    assert second.stdout.read_text() == ""  # no item was claimed
    assert work_state(waiting) == "queued"
    assert sorted(p.name for p in run.mounts.iterdir()) == before == [AGENT_FILE, LOCK_FILE, ROOT_MARKER, "team-notes"]
    assert (run.mounts / "team-notes" / "a.md").read_text() == "the first agent's line\n"

    run.tell("go")
    summary = run.finish()
    assert summary["outcome"] == "completed" and summary["unsynced"] == []
    assert contents(notes_store) == {"/a.md": "the first agent's line\nits second line\n"}
    assert left_in(run.mounts) == []  # the lock file and the agent record go with the worker


@pytest.mark.django_db(transaction=True)
def test_the_agent_dies_with_a_sigkilled_worker(worker, notes_store, make_session):
    make_session(notes_store)
    run = worker(
        """
        say("pid", str(os.getpid()))
        time.sleep(600)
        """
    )
    agent = int(run.wait_for("pid"))
    try:
        run.process.kill()
        run.process.wait()
        assert wait_gone(agent), "the agent outlived its SIGKILLed worker"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent, signal.SIGKILL)


@pytest.mark.django_db(transaction=True)
def test_what_a_sigkilled_workers_agent_left_running_is_killed_before_the_next_worker_mounts_again(
    worker, owner_token, notes_store, make_session
):
    seed(notes_store, owner_token, {"/log.md": "start\n"})
    session = make_session(notes_store)
    first = worker(
        """
        import subprocess
        loop = 'while :; do echo "an orphan line" >> "$1/log.md"; sleep 0.2; done'
        child = subprocess.Popen(["sh", "-c", loop, "sh", str(MOUNTS / "team-notes")])  # in the agent's group
        say("pids", json.dumps([os.getpid(), child.pid]))
        time.sleep(600)
        """,
        sync_interval=60,
    )
    agent, orphan = json.loads(first.wait_for("pids"))
    try:
        first.process.kill()
        first.process.wait()
        assert wait_gone(agent)  # the agent itself dies with its worker (PR_SET_PDEATHSIG) ...
        time.sleep(0.5)
        assert alive(orphan)  # ... what it started does not: the next worker must end it
        # The lease lapses and the item goes back to the queue; the next worker takes it.
        Work.objects.filter(session=session).update(
            lease_expires_at=RawSQL("statement_timestamp() - interval '1 millisecond'", [])
        )
        second = worker(
            """
            log = MOUNTS / "team-notes" / "log.md"
            time.sleep(1)  # an orphan writing here would have appended by now
            say("seen", log.read_text())
            """,
            name="second",
        )
        summary = second.finish()
        assert not alive(orphan)
        assert f"SIGKILL to its process group {agent}" in second.log()
        assert summary["outcome"] == "completed", second.log()
        assert second.wait_for("seen") == "start\n"
        assert contents(notes_store) == {"/log.md": "start\n"}  # nothing the orphan wrote landed
        (aside,) = map(Path, summary["leftovers"])
        assert aside.name == "team-notes" and aside.is_relative_to(first.mounts / LEFTOVERS_DIR)
        assert "an orphan line" in (aside / "log.md").read_text()  # the dead run's mount, kept for the operator
        assert not (first.mounts / AGENT_FILE).exists()  # the dead worker's record of its agent is gone too
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent, signal.SIGKILL)


def test_the_lock_is_exclusive_and_released_with_its_file(tmp_path):
    root = tmp_path / "mnt"
    held = MountRootLock.acquire(root)
    with pytest.raises(MountRootError, match=f"another memories-worker is using mount root {root} .pid {os.getpid()}"):
        MountRootLock.acquire(root)
    held.release()
    assert list(root.iterdir()) == []
    again = MountRootLock.acquire(root)
    again.release()


def test_a_recorded_pid_that_now_names_another_process_is_never_killed(tmp_path):
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        lock = MountRootLock.acquire(tmp_path)
        record = {"pgid": process.pid, "start_time": process_start_time(process.pid) - 1, "worker_pid": 1}
        (tmp_path / AGENT_FILE).write_text(json.dumps(record))
        assert lock.end_orphaned_agent() == []
        assert process.poll() is None and not (tmp_path / AGENT_FILE).exists()

        record["start_time"] += 1  # now it is the recorded agent
        (tmp_path / AGENT_FILE).write_text(json.dumps(record))
        assert lock.end_orphaned_agent() == [process.pid]
        assert process.wait(timeout=5) == -signal.SIGKILL
        lock.release()
    finally:
        process.kill()
        process.wait()


def test_the_agent_is_execd_in_place_and_a_command_that_cannot_run_exits_127(tmp_path):
    script = "import os, sys; print(os.getpid(), sys.argv[1:])"
    process = subprocess.Popen(agent_command([sys.executable, "-c", script, "a b"]), stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and out == f"{process.pid} ['a b']\n"  # the same pid: exec'd in place
    missing = subprocess.run(agent_command([str(tmp_path / "no-such-agent")]), capture_output=True, text=True)
    assert missing.returncode == 127
    assert f"memories-worker: cannot run the agent command '{tmp_path / 'no-such-agent'}'" in missing.stderr


def start_without_a_server(mounts, workdir) -> subprocess.CompletedProcess:
    """Run `memories-worker run --once` against no server (a closed port), for checks made before any poll."""
    env = {**os.environ, "MEMORIES_ENVIRONMENT_KEY": "menv_never_used"}
    args = [str(WORKER), "run", "--environment", "env_x", "--api-url", "http://127.0.0.1:9", "--once"]
    args += ["--mount-root", str(mounts), "--workdir", str(workdir), "--", "true"]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)


def test_a_work_directory_inside_the_mount_root_stops_the_worker_before_it_polls(tmp_path):
    """Clearing the mount root before an item would move such a work directory away, and a store's mount could
    land on it: the worker exits 3 at start, claiming nothing and touching nothing."""
    mounts = tmp_path / "mnt"
    done = start_without_a_server(mounts, mounts / "work")
    assert done.returncode == MOUNT_ROOT_EXIT, done.stderr
    assert f"--workdir {mounts / 'work'} lies inside --mount-root {mounts}" in done.stderr
    assert not mounts.exists()


def test_a_mount_root_inside_the_work_directory_stops_the_worker_before_it_polls(tmp_path):
    """The file tools are rooted at the work directory: through it they would reach the leftovers folder of the
    mount root inside it. Exit 3 at start, nothing made."""
    work = tmp_path / "work"
    done = start_without_a_server(work / "mnt", work)
    assert done.returncode == MOUNT_ROOT_EXIT, done.stderr
    assert f"--mount-root {work / 'mnt'} lies inside --workdir {work}" in done.stderr
    assert not work.exists()


@pytest.mark.parametrize("planted", ["notes.txt", ".ssh", "team-notes"])
def test_a_mount_root_holding_what_no_worker_left_stops_the_worker_and_keeps_it(tmp_path, planted):
    """A home directory given as --mount-root was emptied into the leftovers folder on the first item (a
    breaker): without a dead worker's lock file, anything but a worker's own files is refused, exit 3."""
    mounts = tmp_path / "mnt"
    (mounts / planted).mkdir(parents=True)
    (mounts / "lost+found").mkdir()  # a volume's own folder is never in the way
    done = start_without_a_server(mounts, tmp_path / "work")
    assert done.returncode == MOUNT_ROOT_EXIT, done.stderr
    assert f"mount root {mounts} holds {json.dumps(planted)} and is no memories-worker's" in done.stderr
    assert sorted(p.name for p in mounts.iterdir()) == sorted([planted, "lost+found"])  # untouched


def test_a_mount_root_a_worker_took_before_or_died_holding_is_taken_whatever_it_holds(tmp_path):
    """The marker stays for good: what the exit could not clear (a busy mount) or a dead worker left is a
    worker's, moved aside on the next item (a breaker: without it, the next start refused the root)."""
    mounts = tmp_path / "mnt"
    (mounts / "lost+found").mkdir(parents=True)  # a volume's own folder is never in the way
    fresh = MountRootLock.acquire(mounts)
    try:
        assert not fresh.inherited
        fresh.refuse_foreign()
    finally:
        fresh.release()
    assert sorted(p.name for p in mounts.iterdir()) == [ROOT_MARKER, "lost+found"]
    (mounts / "busy").mkdir()  # what a worker's exit could not move
    again = MountRootLock.acquire(mounts)
    try:
        again.refuse_foreign()
    finally:
        again.release()
    dead = tmp_path / "dead"
    (dead / "team-notes").mkdir(parents=True)
    (dead / LOCK_FILE).write_text("12345\n")  # a worker killed while it held the root, before the marker
    taken = MountRootLock.acquire(dead)
    try:
        assert taken.inherited
        taken.refuse_foreign()
    finally:
        taken.release()


@pytest.mark.parametrize(
    ("name", "message"), [(LOCK_FILE, "is a symbolic link, not a worker's lock file"), (ROOT_MARKER, "cannot mark")]
)
def test_a_link_planted_as_the_lock_file_or_the_marker_is_never_written_through(tmp_path, name, message):
    """A link at the lock file's path had the next worker truncate the file it names and write its pid there (a
    breaker); the marker is written the same way. Neither follows a link: the worker exits 3 saying so."""
    mounts, victim = tmp_path / "mnt", tmp_path / "victim.txt"
    mounts.mkdir()
    victim.write_text("precious")
    (mounts / name).symlink_to(victim)
    with pytest.raises(MountRootError, match=message):
        lock = MountRootLock.acquire(mounts)
        try:
            lock.refuse_foreign()
        finally:
            lock.release()
    assert victim.read_text() == "precious"


def test_a_hard_link_planted_as_the_lock_file_is_never_written_through(tmp_path):
    """O_NOFOLLOW stops symbolic links only: a hard link at the lock file's path had the next worker truncate
    the file it shares and write its pid there (a breaker)."""
    mounts, victim = tmp_path / "mnt", tmp_path / "precious"
    mounts.mkdir()
    victim.write_text("precious data")
    os.link(victim, mounts / LOCK_FILE)
    with pytest.raises(MountRootError, match="is not a worker's lock file"):
        MountRootLock.acquire(mounts)
    assert victim.read_text() == "precious data"


def test_the_agent_starts_with_sigpipe_and_sigxfsz_at_their_defaults():
    """The PDEATHSIG helper is a Python, whose start-up ignores SIGPIPE and SIGXFSZ, and an exec keeps what
    is ignored: agents ran with both ignored, so `yes | head` in an agent's shell never ended `yes`, and a
    writer the worker stopped reading kept running (helper-107)."""
    from worker.mountroot import agent_command

    done = subprocess.run(
        agent_command(["sh", "-c", "grep SigIgn /proc/$$/status"]), capture_output=True, text=True, timeout=30
    )
    ignored = int(done.stdout.split()[1], 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)) == 0 and ignored & (1 << (signal.SIGXFSZ - 1)) == 0, done.stdout
    killed = subprocess.run(agent_command(["sh", "-c", "yes | head -n 1"]), capture_output=True, timeout=30)
    assert killed.returncode == 0 and killed.stdout == b"y\n" and killed.stderr == b""
