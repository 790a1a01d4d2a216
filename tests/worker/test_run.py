"""`memories-worker run` end to end (SPEC §5 "The self-hosted worker"): the real console script, a real agent
process and pytest-django's live server on PostgreSQL; no mock of our API or of the SDK."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.db.models.expressions import RawSQL

from sessions.models import Work
from tests.factories import StoreFactory
from tests.worker.conftest import WORKER, left_in
from versions import services as version_services
from versions.actors import Actor
from versions.models import Memory, Version
from worker.mountroot import LEFTOVERS_DIR

pytestmark = pytest.mark.django_db(transaction=True)


def seed(store, owner_token, files: dict[str, str]) -> None:
    actor = Actor.api(owner_token.token.pk)
    for path, content in files.items():
        version_services.create_memory(store=store, path=path, content=content, actor=actor)


def contents(store) -> dict[str, str]:
    return dict(Memory.objects.filter(store=store).values_list("path", "content"))


def session_versions(session) -> list[tuple[str, str]]:
    return sorted(Version.objects.filter(session_id=session.pk).values_list("operation", "path"))


def work_state(session) -> str:
    return Work.objects.get(session=session).state


def test_the_agent_edits_creates_and_deletes_and_only_that_reaches_the_server(
    worker, owner, owner_token, notes_store, make_session
):
    prefs = StoreFactory(owner=owner, canonical=False, name="User preferences", description="How I like things.")
    seed(notes_store, owner_token, {"/decisions.md": "v1", "/todo.md": "buy milk", "/old.md": "obsolete"})
    seed(prefs, owner_token, {"/editor.md": "vim"})
    session = make_session(notes_store, (prefs, "read_only"), instructions="Keep entries short.")

    run = worker(
        """
        notes, prefs = MOUNTS / "team-notes", MOUNTS / "user-preferences"
        # Everything is downloaded before the agent starts.
        seen = {str(p.relative_to(MOUNTS)): p.read_text() for p in sorted(MOUNTS.rglob("*.md"))}
        context = (WORK / "MEMORY_CONTEXT.md").read_text()
        assert os.environ["MEMORIES_SYSTEM_CONTEXT"] == context
        assert "MEMORIES_ENVIRONMENT_KEY" not in os.environ
        # Nor in the worker's own start-up environment, which its children read as the same user (a breaker
        # polled with the key from there and took other sessions' work): worker.cli.take_environment_key.
        parent = Path(f"/proc/{os.getppid()}")
        worker_environ = (parent / "environ").read_bytes()  # root reads it even from a non-dumpable process
        assert b"memories-worker" in (parent / "cmdline").read_bytes() and b"PATH=" in worker_environ
        assert b"menv_" not in worker_environ
        json.dump({"seen": seen, "context": context}, open(WORK / "report.json", "w"))
        (notes / "todo.md").write_text("buy oat milk")
        (notes / "summary.md").write_text("done")
        (notes / "old.md").unlink()
        try:  # root ignores the read-only bits; the worker must still never push this
            (prefs / "editor.md").write_text("emacs")
        except PermissionError:
            pass
        """
    )
    summary = run.finish()

    assert summary["outcome"] == "completed" and summary["agent_exit"] == 0 and summary["final_sync"] is True
    report = __import__("json").loads((run.workdir / "report.json").read_text())
    assert report["seen"] == {
        "team-notes/decisions.md": "v1",
        "team-notes/old.md": "obsolete",
        "team-notes/todo.md": "buy milk",
        "user-preferences/editor.md": "vim",
    }
    context = report["context"]
    for text in (
        "Team Notes",
        "What we decided.",
        str(run.mounts / "team-notes"),
        "User preferences",
        "How I like things.",
        str(run.mounts / "user-preferences"),
        "read-only",
        "read-write",
        "Keep entries short.",
    ):
        assert text in context
    for content in ("v1", "buy milk", "obsolete", "vim"):  # never file contents
        assert f" {content}\n" not in context and f"`{content}`" not in context

    assert contents(notes_store) == {"/decisions.md": "v1", "/todo.md": "buy oat milk", "/summary.md": "done"}
    assert session_versions(session) == [("created", "/summary.md"), ("deleted", "/old.md"), ("modified", "/todo.md")]
    assert all(
        v.created_by == {"type": "session_actor", "session_id": str(session.pk)}
        for v in Version.objects.filter(session_id=session.pk)
    )
    assert contents(prefs) == {"/editor.md": "vim"}
    assert not Version.objects.filter(store=prefs, session_id=session.pk).exists()
    # The read-only edit was never pushed, and removing the mount did not destroy it either.
    assert (run.workdir / ".memory-unsynced" / "user-preferences" / "editor.md").read_text() == "emacs"
    assert [k["path"] for k in summary["unsynced"]] == ["editor.md"]
    assert work_state(session) == "stopped" and summary["work_stopped"] is True
    assert left_in(run.mounts) == []


def test_a_concurrent_remote_edit_wins_and_the_local_text_is_kept_in_the_conflict_folder(
    worker, owner_token, notes_store, make_session
):
    seed(notes_store, owner_token, {"/plan.md": "base"})
    session = make_session(notes_store)
    local_text = "the agent's plan\nwith two lines — and ünïcode\n"
    run = worker(
        f"""
        (MOUNTS / "team-notes" / "plan.md").write_text({local_text!r})
        say("edited")
        wait("go")
        """,
        sync_interval=60,  # only the final sync: the remote edit lands between the agent's edit and any sync
    )
    run.wait_for("edited")
    memory = Memory.objects.get(store=notes_store, path="/plan.md")
    version_services.update_memory(
        store=notes_store, memory_id=memory.pk, content="the remote plan", actor=Actor.api(owner_token.token.pk)
    )
    run.tell("go")
    summary = run.finish()

    assert summary["outcome"] == "completed"
    assert contents(notes_store) == {"/plan.md": "the remote plan"}
    assert session_versions(session) == []
    kept = list((run.workdir / ".memory-conflicts" / "team-notes").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith("plan.md~")
    assert kept[0].read_bytes() == local_text.encode("utf-8")
    assert [(c["slug"], c["path"], c["kept_at"]) for c in summary["conflicts"]] == [
        ("team-notes", "plan.md", str(kept[0]))
    ]
    assert 'conflict: "team-notes/plan.md" changed on both sides' in run.log()


def test_sigterm_to_the_worker_flushes_the_agents_file_within_the_bound(worker, notes_store, make_session):
    session = make_session(notes_store)
    run = worker(
        """
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stubborn agent: the worker must SIGKILL it
        (MOUNTS / "team-notes" / "note.md").write_text("written before SIGTERM")
        print("the agent's output goes to the worker's stderr")
        say("written")
        time.sleep(600)
        """,
        sync_interval=60,
        grace=2,
        flush_timeout=10,
    )
    run.wait_for("written")
    sent = time.monotonic()
    run.signal(signal.SIGTERM)
    summary = run.finish(timeout=30)
    assert time.monotonic() - sent < 2 + 10 + 5  # grace + flush bound + start-up slack
    assert summary["outcome"] == "interrupted" and summary["final_sync"] is False
    assert summary["agent_exit"] == -signal.SIGKILL and "SIGKILL" in run.log()
    assert "the agent's output goes to the worker's stderr" in run.log()
    assert contents(notes_store) == {"/note.md": "written before SIGTERM"}
    assert session_versions(session) == [("created", "/note.md")]
    assert work_state(session) == "stopped"
    assert left_in(run.mounts) == []


def test_a_killed_agent_still_gets_its_flush(worker, notes_store, make_session):
    session = make_session(notes_store)
    run = worker(
        """
        (MOUNTS / "team-notes" / "note.md").write_text("written before SIGKILL")
        say("pid", str(os.getpid()))
        time.sleep(600)
        """,
        sync_interval=60,
    )
    os.kill(int(run.wait_for("pid")), signal.SIGKILL)
    summary = run.finish()
    assert summary["outcome"] == "agent_failed" and summary["agent_exit"] == -signal.SIGKILL
    assert summary["final_sync"] is False
    assert contents(notes_store) == {"/note.md": "written before SIGKILL"}
    assert session_versions(session) == [("created", "/note.md")]
    assert work_state(session) == "stopped"


def test_a_lost_lease_stops_the_agent_and_no_later_write_lands(worker, owner_token, notes_store, make_session):
    seed(notes_store, owner_token, {"/tick.md": "0"})
    session = make_session(notes_store)
    run = worker(
        """
        say("pid", str(os.getpid()))
        i = 0
        while True:
            i += 1
            (MOUNTS / "team-notes" / "tick.md").write_text(str(i))
            time.sleep(0.1)
        """,
        lease_ttl=10,  # heartbeats every 5 s
        grace=2,
    )
    agent_pid = int(run.wait_for("pid"))
    run.wait_log("sync pass 1 done")  # a write with the live lease has landed (or been tried)
    # Force the lease to lapse (database time). A heartbeat committing just after would extend it again, so
    # force it again whenever it moved forward, until the worker reports the loss; the fence must hold from
    # the last forcing on.
    forced_at = None
    deadline = time.monotonic() + 60
    while "lease lost" not in run.log():
        assert time.monotonic() < deadline, run.log()
        current = Work.objects.get(session=session).lease_expires_at
        if forced_at is None or (current is not None and current > forced_at):
            Work.objects.filter(session=session).update(
                lease_expires_at=RawSQL("statement_timestamp() - interval '1 millisecond'", [])
            )
            forced_at = Work.objects.get(session=session).lease_expires_at
        time.sleep(0.1)
    summary = run.finish(timeout=60)

    assert summary["outcome"] == "lease_lost" and summary["final_sync"] is False
    with pytest.raises(ProcessLookupError):
        os.kill(agent_pid, 0)
    landed = Version.objects.filter(session_id=session.pk)
    assert landed.filter(created_at__lte=forced_at).exists()  # writes flowed while the lease was live
    assert not landed.filter(created_at__gt=forced_at).exists()
    assert summary["refused_lease_expired"] >= 1  # the dead credential's requests were refused, and reported
    assert "refused: the lease has ended (409 lease_expired)" in run.log()
    assert summary["work_stopped"] is False  # the item went back to the queue; a lost lease is not ours to stop
    assert work_state(session) == "queued"
    # The agent's last text never reached the server, and it is not lost.
    unsynced = run.workdir / ".memory-unsynced" / "team-notes" / "tick.md"
    assert unsynced.exists() and unsynced.read_text() != Memory.objects.get(store=notes_store).content
    assert [k["path"] for k in summary["unsynced"]] == ["tick.md"]
    assert "lease lost" in run.log()
    assert left_in(run.mounts) == []


def test_a_wiped_folder_deletes_nothing_and_a_single_delete_waits_for_a_corroborating_pass(
    worker, owner, owner_token, notes_store, make_session
):
    journal = StoreFactory(owner=owner, canonical=False, name="Journal")
    seed(journal, owner_token, {"/a.md": "a", "/b.md": "b", "/c/d.md": "d"})
    seed(notes_store, owner_token, {"/keep.md": "keep", "/old.md": "obsolete"})
    session = make_session(notes_store, journal)
    run = worker(
        """
        import shutil
        for child in (MOUNTS / "journal").iterdir():  # every file at once, the marker too
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        (MOUNTS / "team-notes" / "old.md").unlink()
        say("deleted")
        wait("go")
        say("journal", json.dumps(sorted(str(p.relative_to(MOUNTS)) for p in (MOUNTS / "journal").rglob("*.md"))))
        """,
        delete_after=1,
    )
    run.wait_for("deleted")
    run.wait_log("sync pass 1 done")
    # The first pass that saw old.md missing only noted it.
    assert contents(notes_store) == {"/keep.md": "keep", "/old.md": "obsolete"}
    deadline = time.monotonic() + 30
    while "/old.md" in contents(notes_store):
        assert time.monotonic() < deadline, run.log()
        time.sleep(0.2)
    run.wait_log("sync pass 2 done")  # the delete went out in a later pass (logged once that pass ends)
    run.tell("go")
    summary = run.finish()

    assert summary["outcome"] == "completed"
    # The wiped folder was downloaded again, never propagated.
    assert run.wait_for("journal") == '["journal/a.md", "journal/b.md", "journal/c/d.md"]'
    assert contents(journal) == {"/a.md": "a", "/b.md": "b", "/c/d.md": "d"}
    assert session_versions(session) == [("deleted", "/old.md")]


def test_a_refused_key_exits_1_and_sigterm_while_idle_exits_0(live_server, environment, env_key, tmp_path):
    args = [str(WORKER), "run", "--environment", str(environment.pk), "--api-url", live_server.url]
    args += ["--mount-root", str(tmp_path / "mnt"), "--workdir", str(tmp_path / "work"), "--once", "--", "true"]
    refused = subprocess.run(
        args, env={**os.environ, "MEMORIES_ENVIRONMENT_KEY": "menv_not_a_key"}, capture_output=True, timeout=60
    )
    assert refused.returncode == 1, refused.stderr
    assert b"poll failed permanently" in refused.stderr
    # the cause in words, not "unhandled errors in a TaskGroup (1 sub-exception)" (a tester)
    assert b"the worker cannot go on: the server refused the environment key (401)" in refused.stderr
    assert b"TaskGroup" not in refused.stderr
    missing = subprocess.run(
        args,
        env={k: v for k, v in os.environ.items() if k != "MEMORIES_ENVIRONMENT_KEY"},
        capture_output=True,
        timeout=60,
    )
    assert missing.returncode == 2 and b"MEMORIES_ENVIRONMENT_KEY" in missing.stderr

    # Nothing queued: the worker polls until told to stop, then exits 0 without having claimed anything.
    log = tmp_path / "idle.err"
    with log.open("wb") as err:
        idle = subprocess.Popen(args, env={**os.environ, "MEMORIES_ENVIRONMENT_KEY": env_key.secret}, stderr=err)
    deadline = time.monotonic() + 60
    while "poller starting" not in log.read_text():  # its signal handlers are installed by then
        assert idle.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    idle.send_signal(signal.SIGTERM)
    idle.wait(timeout=30)
    assert idle.returncode == 0, log.read_text()
    assert "SIGTERM received" in log.read_text()
    wait_until_no_other_transaction()


def wait_until_no_other_transaction(timeout: float = 10.0) -> None:
    """Wait until no other connection to the test database is inside a statement or a transaction.

    The live server may still be answering the last blocking poll (up to 999 ms) of a worker that has
    exited; the test's teardown TRUNCATEs every table meanwhile and once deadlocked with that poll's claim
    ("Database … couldn't be flushed", a local run)."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND (state = 'active' OR state LIKE 'idle in transaction%')"
            )
            if cursor.fetchone()[0] == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.05)


def test_syncs_run_on_a_cadence_while_the_agent_runs(worker, owner_token, notes_store, make_session):
    seed(notes_store, owner_token, {"/shared.md": "v1"})
    session = make_session(notes_store)
    run = worker(
        """
        notes = MOUNTS / "team-notes"
        (notes / "progress.md").write_text("step 1")
        say("written")
        deadline = time.monotonic() + 60
        while (notes / "shared.md").read_text() != "v2":  # a remote edit arrives while the agent runs
            assert time.monotonic() < deadline
            time.sleep(0.1)
        say("pulled")
        wait("go")
        """
    )
    run.wait_for("written")
    deadline = time.monotonic() + 30
    while "/progress.md" not in contents(notes_store):  # pushed by a cadence sync, the agent still running
        assert time.monotonic() < deadline, run.log()
        time.sleep(0.2)
    assert run.process.poll() is None
    memory = Memory.objects.get(store=notes_store, path="/shared.md")
    version_services.update_memory(
        store=notes_store, memory_id=memory.pk, content="v2", actor=Actor.api(owner_token.token.pk)
    )
    run.wait_for("pulled")
    run.tell("go")
    summary = run.finish()
    assert summary["outcome"] == "completed" and summary["conflicts"] == [] and summary["unsynced"] == []
    assert contents(notes_store) == {"/shared.md": "v2", "/progress.md": "step 1"}
    assert session_versions(session) == [("created", "/progress.md")]


def test_a_reused_work_directory_keeps_every_unsynced_copy_out_of_the_next_agents_reach(
    worker, owner, owner_token, make_session
):
    """What an item could not push is kept in `<workdir>/.memory-unsynced/`; the next item's agent, in the same
    work directory, read it there with its file tools — another session's store (a breaker, helper-81). Before
    the next download the copies move to the mount root's leftovers folder: never lost, out of reach."""
    prefs = StoreFactory(owner=owner, canonical=False, name="Prefs")
    seed(prefs, owner_token, {"/editor.md": "vim"})
    summaries = []
    for text in ("emacs", "nano"):
        make_session((prefs, "read_only"))
        run = worker(
            f"""
            say("seen", json.dumps(sorted(p.name for p in WORK.iterdir() if p.name.startswith(".memory-"))))
            target = MOUNTS / "prefs" / "editor.md"
            target.chmod(0o644)  # bash can do what the file tools refuse; the worker still never pushes it
            target.write_text({text!r})
            """
        )
        summaries.append((run.finish(), json.loads((run.workdir / "seen").read_text())))
    (first, first_seen), (second, second_seen) = summaries
    assert first["outcome"] == second["outcome"] == "completed"
    assert first_seen == second_seen == []  # the second agent never saw the first item's copies
    folder = run.workdir / ".memory-unsynced" / "prefs"
    assert [k["kept_at"] for k in second["unsynced"]] == [str(folder / "editor.md")]
    assert (folder / "editor.md").read_text() == "nano"
    [aside] = [Path(p) for p in second["leftovers"] if p.endswith(".memory-unsynced")]
    assert aside.parent.parent == run.mounts / LEFTOVERS_DIR and aside.parent.name.endswith(".workdir")
    assert (aside / "prefs" / "editor.md").read_text() == "emacs"  # the first item's copy, kept
    assert contents(prefs) == {"/editor.md": "vim"}


@pytest.mark.parametrize("chatty_child", [False, True])
def test_a_stop_from_outside_ends_the_agent_and_the_flush_window_still_pushes(
    worker, key_sdk, environment, notes_store, make_session, chatty_child
):
    """With `chatty_child`, the agent leaves a process of its own session printing twice a second: reading its
    output after the stop used up the window the flush shares with the agent's shutdown, and the file was not
    pushed (helper-106). The flush goes first; the output is read meanwhile."""
    session = make_session(notes_store)
    run = worker(
        f"""
        import subprocess
        if {chatty_child!r}:
            child = subprocess.Popen(
                ["sh", "-c", "while true; do echo tick; sleep 0.5; done"], start_new_session=True
            )
            say("child", str(child.pid))
        (MOUNTS / "team-notes" / "note.md").write_text("written before the stop")
        say("written")
        time.sleep(600)
        """,
        sync_interval=60,
        lease_ttl=10,  # heartbeats every 5 s: the next one hears the stop
        grace=2,
    )
    run.wait_for("written")
    try:
        work = Work.objects.get(session=session)
        key_sdk.beta.environments.work.stop(str(work.pk), environment_id=str(environment.pk))  # no force: stopping
        summary = run.finish(timeout=60)
    finally:
        if chatty_child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(run.wait_for("child")), signal.SIGKILL)
    assert summary["outcome"] == "work_stopped" and summary["final_sync"] is False, run.log()
    assert contents(notes_store) == {"/note.md": "written before the stop"}  # pushed while stopping: still leased
    assert session_versions(session) == [("created", "/note.md")]
    assert work_state(session) == "stopped" and summary["work_stopped"] is True
    assert left_in(run.mounts) == []
    assert ("memories_worker.agent: stdout: tick" in run.log()) is chatty_child


def test_after_a_stop_from_outside_a_slow_agent_leaves_the_flush_its_share_of_the_lease(
    worker, key_sdk, environment, notes_store, make_session
):
    """The lease is not extended once the item is `stopping`: the agent's shutdown and the flush share what is
    left of it. Before, a slow agent got its whole `--grace` (8 s of a 10 s lease, heard up to 5 s late): the
    lease ran out while it wrote its last file, and the flush was refused (a breaker). Now it is stopped after
    half of what is left, and the file it wrote on SIGTERM is pushed before the lease ends."""
    session = make_session(notes_store)
    run = worker(
        """
        import signal

        def last_words(signum, frame):
            (MOUNTS / "team-notes" / "final.md").write_text("written on SIGTERM")
            time.sleep(6)  # a slow shutdown: longer than the lease has left
            sys.exit(0)

        signal.signal(signal.SIGTERM, last_words)
        (MOUNTS / "team-notes" / "started.md").write_text("started")
        say("written")
        time.sleep(600)
        """,
        sync_interval=60,
        lease_ttl=10,
        grace=8,
    )
    run.wait_for("written")
    work = Work.objects.get(session=session)
    key_sdk.beta.environments.work.stop(str(work.pk), environment_id=str(environment.pk))  # no force: stopping
    summary = run.finish(timeout=60)

    assert summary["outcome"] == "work_stopped" and summary["refused_lease_expired"] == 0, summary
    assert summary["unsynced"] == []
    assert contents(notes_store) == {"/started.md": "started", "/final.md": "written on SIGTERM"}
    assert work_state(session) == "stopped"


def test_after_a_force_stop_the_worker_keeps_changes_in_unsynced_without_pushing(
    worker, key_sdk, environment, notes_store, make_session
):
    """A force stop ends the claim: every push would be refused. The worker goes straight to the unsynced
    copies instead of spending the flush window on refusals."""
    session = make_session(notes_store)
    run = worker(
        """
        (MOUNTS / "team-notes" / "late.md").write_text("written before the force stop")
        say("written")
        time.sleep(600)
        """,
        sync_interval=60,
        lease_ttl=10,
        grace=1,
    )
    run.wait_for("written")
    work = Work.objects.get(session=session)
    key_sdk.beta.environments.work.stop(str(work.pk), environment_id=str(environment.pk), force=True)
    summary = run.finish(timeout=60)

    assert summary["outcome"] == "work_stopped" and summary["refused_lease_expired"] == 0, summary
    assert [entry["path"] for entry in summary["unsynced"]] == ["late.md"], summary["unsynced"]
    assert contents(notes_store) == {}


def test_a_session_deleted_while_its_agent_runs_is_not_a_final_sync(
    worker, client_for, owner_token, notes_store, make_session
):
    """Every sync of a deleted session is refused (401) and the engine swallows it: the summary said
    `final_sync: true` with the files unsynced (a breaker). Nothing is lost: they are kept in .memory-unsynced."""
    session = make_session(notes_store)
    run = worker(
        """
        (MOUNTS / "team-notes" / "late.md").write_text("written after the session was deleted")
        say("written")
        wait("deleted")
        """,
        sync_interval=60,
    )
    run.wait_for("written")
    client_for(owner_token.secret).beta.sessions.delete(str(session.pk))
    run.tell("deleted")
    summary = run.finish(timeout=60)
    # was `outcome: completed` (or `work_stopped` beside `work_stopped: false`) and an ERROR line for the
    # refused stop (helper-97): the item is gone, and the summary says so
    assert summary["outcome"] == "session_deleted" and summary["agent_exit"] == 0
    assert summary["work_stopped"] is False and "stopping the work item failed" not in run.log()
    assert "the work item is gone with its deleted session" in run.log()
    assert f"item ended work_id={summary['work_id']} outcome=session_deleted " in run.log()  # was outcome=completed
    assert "outcome=completed" not in run.log()  # the `agent ended` line named one before the teardown knew
    assert summary["final_sync"] is False and "final sync did not reach team-notes" in run.log()
    assert [kept["path"] for kept in summary["unsynced"]] == ["late.md"]
    assert (run.workdir / ".memory-unsynced" / "team-notes" / "late.md").read_text().startswith("written after")
    assert contents(notes_store) == {}


def test_a_delete_the_engine_never_sent_is_reported(worker, owner_token, notes_store, make_session):
    """A folder replaced by a file of the same name: the engine cannot re-check `e/f.md` under the file `e`,
    so it drops that delete without a word, and the upload of `e` conflicts with the folder on the server.
    The summary said nothing of the delete (a breaker): it is in `deletes_not_sent`, and the file `e` is kept."""
    seed(notes_store, owner_token, {"/e/f.md": "inside the folder", "/keep.md": "kept"})
    session = make_session(notes_store)
    run = worker(
        """
        import shutil
        notes = MOUNTS / "team-notes"
        shutil.rmtree(notes / "e")
        (notes / "e").write_text("now a file")
        """,
    )
    summary = run.finish()
    assert summary["outcome"] == "completed" and summary["agent_exit"] == 0
    assert summary["deletes_not_sent"] == [{"slug": "team-notes", "path": "e/f.md"}]
    assert 'delete not sent: "team-notes/e/f.md"' in run.log()
    assert "e" in [kept["path"] for kept in summary["conflicts"] + summary["unsynced"]]
    assert contents(notes_store) == {"/e/f.md": "inside the folder", "/keep.md": "kept"}
    assert session_versions(session) == []


def test_a_file_name_cannot_forge_a_line_of_the_workers_log(worker, notes_store, make_session):
    """The agent chooses its file names; the worker's log wrote them raw, so a name holding a newline and a
    made-up "item ended … outcome=completed" read as the worker's own line, and an escape sequence reached
    the terminal (helper-97). Every record is one line (`OneLineFormatter`), names are JSON strings."""
    make_session(notes_store)
    forged = "2026-12-07 18:45:09,650 INFO memories_worker: item ended work_id=FAKE outcome=completed"
    name = "x.md\n" + forged + "\x1b[2K"
    run = worker(
        f"""
        (MOUNTS / "team-notes" / {name!r}).write_text("hi")
        with open(os.path.join(os.fsencode(MOUNTS / "team-notes"), b"bad\\xff.md"), "w") as f:
            f.write("not UTF-8 in its name")
        """,
    )
    summary = run.finish()  # strict JSON: the undecodable name is `bad\\xff.md`, not a lone surrogate
    log = run.log()
    assert sorted(kept["path"] for kept in summary["unsynced"]) == ["bad\\xff.md", name]
    assert "\x1b" not in log and "work_id=FAKE" in log
    for line in log.splitlines():
        assert not line.startswith(forged), line
    assert '"team-notes/x.md\\n2026-12-07 18:45:09,650 INFO' in log  # the name, escaped, inside its own line
    # our lines spell the undecodable name as the summary does (`bad\\xff.md`, JSON-quoted), not `bad\\udcff.md`
    assert 'unsynced: "team-notes/bad\\\\xff.md" did not reach the server' in log


def test_the_agents_output_is_logged_as_its_own_lines_and_cannot_forge_the_workers(worker, notes_store, make_session):
    """The agent's stdout and stderr reached the worker's stderr raw: a printed "item ended … outcome=completed"
    read as the worker's own line, and escapes reached the terminal (helper-100). Every line is now a record of
    `memories_worker.agent`, one line each; the worker's stdout still holds only the summary."""
    make_session(notes_store)
    forged = "2026-12-07 18:45:09,650 INFO memories_worker: item ended work_id=FAKE outcome=completed"
    run = worker(
        f"""
        import sys
        print({forged!r})
        print("line one\\r\\n" + {forged!r} + "\\x1b[2K", file=sys.stderr, end="")
        sys.stdout.flush()
        sys.stdout.buffer.write(b"caf\\xc3")  # a character split over two writes is kept whole
        sys.stdout.flush()
        time.sleep(0.3)
        sys.stdout.buffer.write(b"\\xa9 bad \\xff byte\\n" + b"x" * 20000 + b"\\nunfinished")
        """,
    )
    summary = run.finish()
    assert summary["outcome"] == "completed", run.log()
    log = run.log()
    assert "\x1b" not in log
    agent = [line for line in log.splitlines() if " memories_worker.agent: " in line]
    for line in log.splitlines():
        # the forged text appears only inside the agent's own records, never at the start of a line
        assert not line.startswith(forged), line
        if "work_id=FAKE" in line:
            assert line in agent and line.split(" memories_worker.agent: ", 1)[1].startswith(("stdout: ", "stderr: "))
    texts = [line.split(" memories_worker.agent: ", 1)[1] for line in agent]
    assert f"stdout: {forged}" in texts
    assert "stderr: line one" in texts
    assert f"stderr: {forged}\\x1b[2K" in texts  # the unfinished last line, escaped, when the pipe ended
    assert "stdout: café bad \\xff byte" in texts  # UTF-8 kept whole across reads, other bytes escaped
    assert texts.count("stdout: " + "x" * 8192) == 2 and "stdout: " + "x" * (20000 - 2 * 8192) in texts
    assert "stdout: unfinished" in texts
    # its lines come before the worker's verdict, which follows the agent's end
    assert log.index("stdout: unfinished") < log.index("agent ended exit=0")


def test_a_backlog_the_agent_left_in_its_pipes_is_logged_to_its_last_line(worker, notes_store, make_session):
    """An agent that enlarged its pipe (F_SETPIPE_SZ, no privilege needed) and exited after a burst left more
    than a second of logging behind: a fixed one-second drain dropped the rest, its last line (a traceback's,
    typically) included, and said nothing (helper-102). The reading goes on while the backlog flows."""
    make_session(notes_store)
    lines = 300_000
    run = worker(
        f"""
        import fcntl
        fcntl.fcntl(1, 1031, 1 << 20)  # F_SETPIPE_SZ: 1 MiB
        data = b"\\n" * {lines}
        written = 0
        while written < len(data):
            written += os.write(1, data[written:])
        os.write(1, b"LAST LINE\\n")
        """,
    )
    summary = run.finish(timeout=120)
    assert summary["outcome"] == "completed", run.log()
    log = run.log()
    assert log.count(" INFO memories_worker.agent: stdout: \n") == lines
    assert "memories_worker.agent: stdout: LAST LINE" in log and "WARNING memories_worker.agent" not in log


def test_a_process_that_left_the_agents_group_cannot_hold_the_worker_by_its_output(worker, notes_store, make_session):
    """The worker reads the agent's output until every writer has closed the pipes: a process the agent
    started in a session of its own (out of the group the worker stops) keeps them open. The worker reads it
    for `OUTPUT_DRAIN_SECONDS` more and ends the item; that process's next write fails (EPIPE) and it ends."""
    make_session(notes_store)
    run = worker(
        """
        import subprocess
        child = subprocess.Popen(
            [sys.executable, "-c", "import time\\nwhile True:\\n    print('tick', flush=True)\\n    time.sleep(0.05)"],
            start_new_session=True,
        )
        say("child", str(child.pid))
        time.sleep(0.3)
        """,
    )
    child = int(run.wait_for("child"))
    try:
        summary = run.finish(timeout=30)
        assert summary["outcome"] == "completed" and summary["agent_exit"] == 0
        assert "memories_worker.agent: stdout: tick" in run.log()
        # it never falls silent: the reading stops at OUTPUT_DRAIN_LIMIT_SECONDS, saying so
        assert (
            "WARNING memories_worker.agent: stopped reading the agent's stdout and stderr after the time" in run.log()
        )
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # (a zombie of the agent's, reaped when the agent's init adopts it)
        state = (
            Path(f"/proc/{child}/stat").read_text().split(") ")[-1][:1] if Path(f"/proc/{child}").exists() else "gone"
        )
        assert state in ("gone", "Z"), state
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("damage", ["marker", "folder"])
def test_a_mount_the_agent_damaged_is_not_a_final_sync_and_its_deletes_are_reported(
    worker, owner_token, notes_store, make_session, damage
):
    """The engine refuses to sync a mount whose marker is damaged, and fails on one replaced by a file; the
    summary said `final_sync: true` with no delete reported (a breaker). Nothing reaches the server."""
    seed(notes_store, owner_token, {"/keep.md": "kept", "/gone.md": "deleted by the agent"})
    session = make_session(notes_store)
    run = worker(
        f"""
        import shutil
        notes = MOUNTS / "team-notes"
        (notes / "gone.md").unlink()
        (notes / "new.md").write_text("written by the agent")
        if {damage!r} == "marker":
            (notes / ".anthropic-memory-store").write_text("garbage")
        else:
            shutil.rmtree(notes)
            notes.write_text("a file where the mount was")
        """,
    )
    summary = run.finish()
    assert summary["outcome"] == "completed" and summary["final_sync"] is False
    assert "final sync did not reach team-notes" in run.log()
    expected = ["gone.md"] if damage == "marker" else ["gone.md", "keep.md"]
    assert summary["deletes_not_sent"] == [{"slug": "team-notes", "path": path} for path in expected]
    if damage == "marker":  # the agent's new file is still on disk, and kept
        assert [kept["path"] for kept in summary["unsynced"]] == ["new.md"]
    assert contents(notes_store) == {"/keep.md": "kept", "/gone.md": "deleted by the agent"}
    assert session_versions(session) == []


def test_a_mount_replaced_by_a_symbolic_link_is_not_followed_and_the_link_is_removed(
    worker, owner_token, notes_store, make_session, tmp_path
):
    """The unsynced walk followed the link and copied what it pointed at, and the link stayed in the mount
    root (a breaker). The link is neither followed nor copied, and it goes; its target is untouched."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "other.md").write_text("not the store's")
    (elsewhere / "log.md").write_text("a decoy: the link is never looked through")
    seed(notes_store, owner_token, {"/log.md": "kept"})
    make_session(notes_store)
    run = worker(
        f"""
        import shutil
        notes = MOUNTS / "team-notes"
        shutil.rmtree(notes)
        notes.symlink_to({str(elsewhere)!r})
        """,
    )
    summary = run.finish()
    assert summary["final_sync"] is False and summary["unsynced"] == []
    assert summary["deletes_not_sent"] == [{"slug": "team-notes", "path": "log.md"}]
    assert left_in(run.mounts) == []
    assert (elsewhere / "other.md").read_text() == "not the store's"
    assert contents(notes_store) == {"/log.md": "kept"}
