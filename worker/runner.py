"""`memories-worker run`: claim work, mount the session's stores, run the agent, sync, flush, stop (SPEC §5).

Composed from the SDK's own worker pieces (`anthropic==2.10.0`, pinned exactly — they are not public API):
`aiter_work` (poll + ack), `_heartbeat_loop` with its `_Lease` (the heartbeat contract:
`expected_last_heartbeat`, 412 = lease lost, `lease_extended: false` = stop), `_sessions_token_from_secret`
(the per-work credential inside the work item's `secret`) and, through `worker.sync.WorkerMemoryStores`,
`SessionMemoryStores`. What the SDK's `EnvironmentWorker` adds on top — a session tool runner fed by an event
stream this service does not serve — is replaced by running the agent command as a child process.

One item, in order: heartbeat starts (in parallel, for the whole item) → the session is fetched with the
per-work credential → every attachment is downloaded to its mount path (relocated under `--mount-root`) →
the system context is written → the agent runs in the work directory while the stores sync every
`--sync-interval` seconds → on a clean exit (status 0) a final sync (bounded) → on every exit a push-only
flush (bounded by `--flush-timeout`) → unsynced files are copied out of the mounts → the mounts are removed
→ the work item is stopped (unless the lease was lost: the item then belongs to the queue). `docs/worker.md`
describes each kind of exit. Around all items: the worker holds its mount root's lock, and an agent a dead
predecessor left running there is killed before the first item (`worker.mountroot`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import anyio
import httpx
from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient
from anthropic.lib.environments._poller import aiter_work
from anthropic.lib.environments._worker import (
    _heartbeat_loop,
    _Lease,
    _LeaseEndReason,
    _sessions_token_from_secret,
)
from anthropic.lib.tools._memories import SessionMemoryError

from config.text import one_line
from worker.agent_output import AgentOutput
from worker.context import CONTEXT_FILE, system_context
from worker.mountroot import (
    EXIT_MOUNT_ROOT,
    MountRootError,
    MountRootLock,
    agent_command,
    check_layout,
    set_aside_copies,
    set_aside_leftovers,
)
from worker.sync import (
    CONFLICTS_DIR,
    UNSYNCED_DIR,
    WorkerMemoryStores,
    file_name_text,
    make_read_only,
    shown,
    utc_stamp,
)

log = logging.getLogger("memories_worker")

SDK_MOUNT_ROOT = PurePosixPath("/mnt/memory")


@dataclass(frozen=True)
class Options:
    """`memories-worker run`'s settings (units: seconds unless named otherwise).

    api_url: the server root (the SDK gets `<api_url>/api`). environment_key: `menv_…`. mount_root replaces
    the `/mnt/memory` prefix of every mount path. lease_ttl: the TTL asked for on each heartbeat (the server
    clamps it to 10–300; the SDK heartbeats every TTL/2, at most every 30 s). grace: SIGTERM → SIGKILL delay
    for the agent. delete_after: the corroboration window of local deletes.
    """

    api_url: str
    environment_id: str
    environment_key: str
    agent_cmd: tuple[str, ...]
    mount_root: Path = Path(str(SDK_MOUNT_ROOT))
    workdir: Path = Path()
    once: bool = False
    sync_interval: float = 15.0
    flush_timeout: float = 30.0
    grace: float = 10.0
    lease_ttl: int = 60
    worker_id: str | None = None


@dataclass
class ItemSummary:
    """What happened to one work item; printed as one JSON line on stdout when the item ends.

    outcome: `completed` (agent exited 0), `agent_failed` (non-zero or killed), `interrupted` (the worker got
    SIGTERM/SIGINT), `lease_lost`, `work_stopped` (stopped or archived from outside), `session_deleted` (the
    session and its work item were deleted while the item ran: nothing could be synced or stopped),
    `session_terminated`, `download_failed`, `skipped` (not a session item), `failed` (anything else; `error`
    says what). `work_stopped`: whether the item is stopped now (false after `session_deleted`: it is gone).
    leftovers: where what was in the mount root before this item's download went (`set_aside_leftovers`):
    a dead run's mounts — with any edits it never pushed — and folders an earlier agent left there.
    """

    work_id: str
    session_id: str
    outcome: str = "completed"
    agent_exit: int | None = None
    final_sync: bool = False
    conflicts: list[dict] = field(default_factory=list)
    unsynced: list[dict] = field(default_factory=list)
    deletes_not_sent: list[dict] = field(default_factory=list)
    not_mounted: list[dict] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    refused_lease_expired: int = 0
    work_stopped: bool = False
    error: str | None = None


def _without_lone_surrogates(value):
    """`value` (a summary's JSON data) with every string in `file_name_text`'s spelling."""
    if isinstance(value, str):
        return file_name_text(value)
    if isinstance(value, dict):
        return {key: _without_lone_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    return value


def summary_line(summary: ItemSummary) -> str:
    """The item's summary as one line of JSON (stdout). A file name that is no UTF-8 (``bad\\xff.md`` on
    disk) is written with its bytes escaped — ``"bad\\\\xff.md"`` — not as a lone surrogate escape
    (``"bad\\udcff.md"``), which strict JSON parsers refuse, costing the whole line (helper-99)."""
    return json.dumps(_without_lone_surrogates(asdict(summary)))


class _HeartbeatWork:
    """The work resource as `_heartbeat_loop` calls it, asking for `ttl` seconds on every heartbeat.

    It also remembers until when the last extended lease runs (`lease_deadline`, `time.monotonic()`
    seconds): counted from when that heartbeat was sent, so never later than the server's own expiry. After a
    stop from outside the server extends nothing more, and what is left of it is the window in which the
    agent's shutdown and the flush must fit (`stop_grace`, `flush_budget`)."""

    def __init__(self, work, ttl: int) -> None:
        self._work = work
        self._ttl = ttl
        self.lease_deadline: float | None = None
        self.state: str | None = None  # the item's state in the latest answer

    async def heartbeat(self, work_id, **kwargs):
        sent = time.monotonic()
        response = await self._work.heartbeat(work_id, desired_ttl_seconds=self._ttl, **kwargs)
        self.state = response.state
        if response.lease_extended and response.ttl_seconds > 0:
            self.lease_deadline = sent + response.ttl_seconds
        return response

    def left(self) -> float:
        """Seconds of lease left by this worker's clock; 0 when none was extended or it has run out."""
        return 0.0 if self.lease_deadline is None else max(0.0, self.lease_deadline - time.monotonic())


# Kept back from the lease for the flush's last requests to arrive before the server's expiry.
FLUSH_MARGIN_SECONDS = 1.0
# How long the agent's output is still read once its process group is gone (`AgentOutput.close`): while it
# flows (a backlog in the pipes), up to OUTPUT_DRAIN_LIMIT_SECONDS; a process that left the group and holds
# the pipes stops the reading after OUTPUT_DRAIN_SECONDS of silence. What it writes after that is not logged.
OUTPUT_DRAIN_SECONDS = 1.0
OUTPUT_DRAIN_LIMIT_SECONDS = 10.0


def stop_grace(opts: Options, beats: _HeartbeatWork) -> float:
    """The agent's SIGTERM → SIGKILL delay after a stop from outside, in seconds: the item stays leased only
    until its last extension runs out, and the agent's shutdown and then the flush must fit in what is left,
    so the agent gets at most half of it (capped by `--grace`) and the flush the rest (`flush_budget`). With
    the whole `--grace` first, an agent slow to exit let the lease run out and the flush was refused (found
    by a breaker)."""
    return min(opts.grace, beats.left() / 2)


def flush_budget(opts: Options, beats: _HeartbeatWork) -> float:
    """The flush's bound after a stop from outside, in seconds: what is left of the lease less
    `FLUSH_MARGIN_SECONDS`, capped by `--flush-timeout`; 0 when nothing is left, or when the heartbeat said
    `stopped` (a force stop: the claim has ended and every push would be refused). What the flush cannot
    push in it is kept in `.memory-unsynced`."""
    if beats.state == "stopped":
        return 0.0
    return min(opts.flush_timeout, max(0.0, beats.left() - FLUSH_MARGIN_SECONDS))


class _LateWrites:
    """Counts requests the server refused because the lease had ended (409 `lease_expired`; reads too, since
    the credential is dead): reported, never retried — the engine drops a refused push and the file is then
    kept under `.memory-unsynced`."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, response: httpx.Response) -> None:
        if response.status_code != 409:
            return
        await response.aread()
        with contextlib.suppress(ValueError):
            details = (response.json().get("error") or {}).get("details") or {}
            if details.get("reason") == "lease_expired":
                self.count += 1
                log.warning(
                    "refused: the lease has ended (409 lease_expired) %s %s",
                    response.request.method,
                    response.request.url.path,
                )


class Stop:
    """Why the worker should stop: set by SIGTERM/SIGINT. `event` wakes whoever waits."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.signal_name: str | None = None

    def request(self, name: str) -> None:
        if self.signal_name is None:
            self.signal_name = name
            log.warning("%s received: stopping the agent, flushing the stores, stopping the work item", name)
        self.event.set()


def relocate(mount_path: str | None, mount_root: Path) -> str | None:
    """Map `/mnt/memory/<slug>` to `<mount_root>/<slug>`; any other path is returned unchanged."""
    if not mount_path:
        return mount_path
    path = PurePosixPath(mount_path)
    if path.is_relative_to(SDK_MOUNT_ROOT):
        return str(mount_root.joinpath(*path.relative_to(SDK_MOUNT_ROOT).parts))
    return mount_path


def _client(opts: Options, token: str, hooks: list | None = None) -> AsyncAnthropic:
    http = DefaultAsyncHttpxClient(event_hooks={"response": hooks or []})
    return AsyncAnthropic(base_url=opts.api_url.rstrip("/") + "/api", auth_token=token, http_client=http)


async def run(opts: Options) -> int:
    """Poll the environment and run one agent per claimed item until SIGTERM/SIGINT (or one item with
    `once`), holding the lock on `opts.mount_root` throughout (`worker.mountroot`).

    Returns the process exit status: 0 when every claimed item ended (whatever its outcome — see the summary
    lines), 1 when the poll was refused for good (bad key or environment; an unreachable server is retried
    with the SDK poller's backoff), 3 (`EXIT_MOUNT_ROOT`) when the mount root cannot be used — another worker
    holds it, the work directory lies inside it, it holds files no worker left there, or an agent a dead
    worker left running there cannot be killed — before anything is claimed.
    """
    try:
        check_layout(opts.mount_root, opts.workdir)
        mount_lock = MountRootLock.acquire(opts.mount_root)
    except MountRootError as e:
        log.error("%s", e)
        return EXIT_MOUNT_ROOT
    try:
        # Before any mount path is set aside and downloaded to again: a dead worker's agent must not write there.
        mount_lock.end_orphaned_agent()
        mount_lock.refuse_foreign()
        try:
            return await _poll(opts, mount_lock)
        finally:
            # What the last agent left beside its mounts goes where the next item's would, so the root is left
            # holding nothing but the worker's own files (the mark keeps it a worker's: `refuse_foreign`).
            try:
                set_aside_leftovers([], stamp=utc_stamp(), mount_lock=mount_lock)
            except OSError as e:  # the root itself is gone or unreadable: nothing left to clear
                log.error("could not clear mount root %s at exit: %s", opts.mount_root, e)
    except MountRootError as e:
        log.error("%s", e)
        return EXIT_MOUNT_ROOT
    finally:
        mount_lock.release()


async def _poll(opts: Options, mount_lock: MountRootLock) -> int:
    stop = Stop()
    loop_signals = []
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.request, signal.Signals(signum).name)
        loop_signals.append(signum)
    poll_client = _client(opts, opts.environment_key)
    try:
        work = poll_client.beta.environments.work
        async with anyio.create_task_group() as tg:

            async def poll_items() -> None:
                items = aiter_work(work, environment_id=opts.environment_id, worker_id=opts.worker_id, auto_stop=False)
                async with contextlib.aclosing(items):
                    async for item in items:
                        summary = await handle_item(opts, item, stop, mount_lock)
                        print(summary_line(summary), flush=True)
                        if opts.once or stop.signal_name:
                            break
                tg.cancel_scope.cancel()

            async def stop_when_idle() -> None:
                # A signal while polling (no item running) ends the poll at once.
                await stop.event.wait()
                if not _running.value:
                    tg.cancel_scope.cancel()

            tg.start_soon(poll_items)
            tg.start_soon(stop_when_idle)
    except Exception as e:
        log.error("the worker cannot go on: %s", _cause(e))
        return 1
    finally:
        for signum in loop_signals:
            loop.remove_signal_handler(signum)
        await poll_client.close()
    return 0


def _cause(error: BaseException) -> str:
    """What stopped the worker, in words: the error inside a task group's exception group (a refused key was
    "unhandled errors in a TaskGroup (1 sub-exception)"), with the HTTP status of an API error."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_cause(inner) for inner in error.exceptions)
    status = getattr(error, "status_code", None)
    if status == 401:
        return f"the server refused the environment key (401): {error}"
    return f"{error} (HTTP {status})" if status else str(error) or type(error).__name__


class _Flag:
    """Whether an item is being served (a signal while idle ends the poll at once)."""

    def __init__(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        return self.value


_running = _Flag()


async def handle_item(opts: Options, item, stop: Stop, mount_lock: MountRootLock) -> ItemSummary:
    """Run one claimed, acknowledged work item end to end and return its summary (never raises for the
    item's own failures; cancellation still propagates). `mount_lock` is the held lock on `opts.mount_root`:
    only its holder may set existing mount paths aside and run an agent there."""
    summary = ItemSummary(work_id=item.id, session_id=item.data.id)
    token = _sessions_token_from_secret(getattr(item, "secret", None))
    if item.data.type != "session":  # the SDK's queue also knows "healthcheck" items; nothing to run
        summary.outcome = "skipped"
        await _stop_with_key(opts, item, summary)
        return summary
    if token is None:
        summary.outcome, summary.error = "download_failed", "the work item carried no per-work credential"
        await _stop_with_key(opts, item, summary)
        return summary
    late = _LateWrites()
    client = _client(opts, token, hooks=[late])
    lease = _Lease()
    beats = _HeartbeatWork(client.beta.environments.work, opts.lease_ttl)
    _running.value = True
    try:
        async with anyio.create_task_group() as tg:

            async def heartbeat() -> None:
                await _heartbeat_loop(
                    beats,
                    work_id=item.id,
                    environment_id=item.environment_id,
                    lease=lease,
                )
                if lease.lost:
                    log.error("lease lost work_id=%s: stopping the agent; the final sync is skipped", item.id)

            tg.start_soon(heartbeat)
            try:
                await _serve(opts, item, client, summary, stop, lease, beats, mount_lock)
            except Exception as e:
                summary.outcome, summary.error = "failed", str(e)
                log.error("work item failed work_id=%s: %s", item.id, e)
            finally:
                lease.finish(_LeaseEndReason.RUNNER_DONE)
        if lease.lost:
            summary.outcome = "lease_lost"
    finally:
        summary.refused_lease_expired = late.count
        if lease.lost:
            log.info("lease lost; released work_id=%s without stopping it (it belongs to the queue)", item.id)
        # A credential refused (401) is gone: its session was deleted (claims go with it), or something else
        # ended it. The environment key tells which: a stop of an item that no longer exists is 404.
        elif (
            await _stop_work(client, item, summary, quiet=(401,)) == 401
            and await _stop_with_key(opts, item, summary, quiet=(404,)) == 404
        ):
            summary.outcome = "session_deleted"
            log.info("the work item is gone with its deleted session work_id=%s", item.id)
        await client.close()
        _running.value = False
        # Once the stop has settled the outcome (`session_deleted` is known only then; helper-99)
        log.info(
            "item ended work_id=%s outcome=%s conflicts=%d unsynced=%d",
            item.id,
            summary.outcome,
            len(summary.conflicts),
            len(summary.unsynced),
        )
    return summary


async def _stop_with_key(opts: Options, item, summary: ItemSummary, *, quiet: tuple[int, ...] = ()) -> int | None:
    """`_stop_work` with the environment key instead of the item's credential."""
    client = _client(opts, opts.environment_key)
    try:
        return await _stop_work(client, item, summary, quiet=quiet)
    finally:
        await client.close()


async def _stop_work(client: AsyncAnthropic, item, summary: ItemSummary, *, quiet: tuple[int, ...] = ()) -> int | None:
    """Stop `item` for good (`force`); `summary.work_stopped` says whether it is stopped now (409: it already
    was). Returns None then, else the refusal's HTTP status (0 without one: a network failure), logged as an
    error unless it is one of `quiet` (the caller's to handle)."""
    with anyio.CancelScope(shield=True):
        try:
            await client.beta.environments.work.stop(item.id, environment_id=item.environment_id, force=True)
        except Exception as e:
            status = getattr(e, "status_code", None)
            summary.work_stopped = status == 409  # already stopped
            if status == 409:
                return None
            if status not in quiet:
                log.error("stopping the work item failed work_id=%s: %s", item.id, e)
            return status or 0
        summary.work_stopped = True
        return None


async def _serve(opts, item, client, summary, stop, lease, beats, mount_lock: MountRootLock) -> None:
    session = await client.beta.sessions.retrieve(item.data.id)
    if session.status == "terminated":
        summary.outcome = "session_terminated"
        log.info("skipping the work item of a terminated session work_id=%s", item.id)
        return
    resources = [r for r in session.resources if r.type == "memory_store"]
    for resource in resources:
        resource.mount_path = relocate(resource.mount_path, opts.mount_root)
    slugs = {r.memory_store_id: PurePosixPath(r.mount_path or r.memory_store_id).name for r in resources}
    workdir = opts.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    opts.mount_root.mkdir(parents=True, exist_ok=True)
    stamp = utc_stamp()
    summary.leftovers = set_aside_leftovers(resources, stamp=stamp, mount_lock=mount_lock)
    # on a thread: across filesystems the move copies, and the lease's heartbeats run on this loop meanwhile
    summary.leftovers += await anyio.to_thread.run_sync(
        functools.partial(set_aside_copies, workdir, (CONFLICTS_DIR, UNSYNCED_DIR), stamp=stamp, mount_lock=mount_lock)
    )
    stores = WorkerMemoryStores(client, workdir=workdir, slugs=slugs, sync_interval=opts.sync_interval)
    draining: list[threading.Thread] = []
    try:
        try:
            await stores.download(session)
        except SessionMemoryError as e:
            summary.outcome, summary.error = "download_failed", str(e)
            log.error("download failed work_id=%s: %s", item.id, e)
            return
        await stores.after_sync()
        context = system_context(resources)
        (workdir / CONTEXT_FILE).write_text(context, encoding="utf-8")
        if stop.event.is_set() or lease.ended:  # a signal or a lost lease during the download: no agent
            summary.outcome = "lease_lost" if lease.lost else "interrupted" if stop.signal_name else "work_stopped"
            return
        env = _agent_env(opts, item, session, context, stores)
        await _run_agent(opts, summary, stores, env, workdir, stop, lease, beats, mount_lock, draining)
    finally:
        with anyio.CancelScope(shield=True):
            await _teardown(opts, item, summary, stores, lease, beats)
            for drainer in draining:  # bounded by OUTPUT_DRAIN_LIMIT_SECONDS from the agent's end
                await anyio.to_thread.run_sync(drainer.join)


def _agent_env(opts, item, session, context: str, stores: WorkerMemoryStores) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMORIES_ENVIRONMENT_KEY"}
    env.update(
        MEMORIES_SYSTEM_CONTEXT=context,
        MEMORIES_CONTEXT_FILE=str(opts.workdir.resolve() / CONTEXT_FILE),
        MEMORIES_SESSION_ID=session.id,
        MEMORIES_WORK_ID=item.id,
        MEMORIES_TOOL_ROOTS=os.pathsep.join(str(p) for p in stores.roots),
        MEMORIES_TOOL_READ_ONLY_ROOTS=os.pathsep.join(str(p) for p in stores.read_only_roots),
    )
    # Its output is a pipe now (`AgentOutput`): a Python agent would hold its stdout back in blocks until it
    # exits; unbuffered, each line reaches the log as it is printed. An explicit setting is kept.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


async def _run_agent(
    opts, summary, stores, env, workdir, stop, lease, beats, mount_lock: MountRootLock, draining: list
) -> None:
    """Run the agent until it exits or the item is stopped. `draining`: where a reading of its output still
    going on (the item was stopped) is left for the caller to wait for after the teardown."""
    # Its own process group: a terminal's Ctrl-C reaches the worker, which then stops the agent itself.
    # Its stdout and stderr are logged line by line as the worker's records (`AgentOutput`): stdout carries
    # only the summary lines, and no line the agent prints can pass for the worker's. Started from the event
    # loop's thread, through the PR_SET_PDEATHSIG helper: it dies with the worker (`agent_command`), and its
    # group is recorded for the next worker on this mount root in case the worker is killed (SIGKILL).
    output = AgentOutput()
    try:
        process = subprocess.Popen(  # noqa: S603
            agent_command(opts.agent_cmd),
            cwd=workdir,
            env=env,
            start_new_session=True,
            stdout=output.stdout,
            stderr=output.stderr,
        )
    except BaseException:
        output.close(0, 0)
        raise
    output.started()
    log.info("agent started pid=%d", process.pid)
    passes = 0
    try:
        mount_lock.record_agent(process.pid)  # in the try: an agent that cannot be recorded is stopped
        while process.poll() is None and not stop.event.is_set() and not lease.ended:
            await anyio.sleep(0.2)
            if process.poll() is None and not stop.event.is_set() and not lease.ended:
                before = stores.last_sync
                await stores.sync_if_due()
                if stores.last_sync != before:
                    passes += 1
                    await stores.after_sync()
                    log.info("sync pass %d done", passes)
    finally:
        # stopped from outside: the shutdown and the flush share what is left of the lease (`stop_grace`)
        grace = stop_grace(opts, beats) if lease.ended and not lease.lost else opts.grace
        if process.poll() is None:
            await _terminate(process, grace)
        else:  # the agent exited (or was killed from outside): what it left running in its group goes too
            await _end_group(process.pid, grace)
        mount_lock.forget_agent(process.pid)
        drain = functools.partial(output.close, OUTPUT_DRAIN_SECONDS, OUTPUT_DRAIN_LIMIT_SECONDS)
        if stop.event.is_set() or lease.ended:
            # Stopped: the flush comes first, in the window it shares with the agent's shutdown; the output is
            # read meanwhile and waited for after the teardown (helper-106: a chatty escaped child's drain used
            # up the window, and a file written before the stop was not pushed).
            drainer = threading.Thread(target=drain, name="agent-output-drain", daemon=True)
            drainer.start()
            draining.append(drainer)
        else:
            with anyio.CancelScope(shield=True):  # its last lines are logged before the worker's next ones
                await anyio.to_thread.run_sync(drain)
    summary.agent_exit = process.returncode
    if lease.lost:
        summary.outcome = "lease_lost"
    elif stop.signal_name:
        summary.outcome = "interrupted"
    elif lease.ended:
        summary.outcome = "work_stopped"  # stopped or archived from outside: the heartbeat said stop
    elif process.returncode != 0:
        summary.outcome = "agent_failed"
    # the outcome is the `item ended` line's: the teardown may still change it (a session deleted meanwhile)
    log.info("agent ended exit=%s", process.returncode)


async def _terminate(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM the agent's process group, then SIGKILL it after `grace` seconds."""
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with anyio.move_on_after(grace):
            while process.poll() is None:
                await anyio.sleep(0.05)
        if process.poll() is None:
            log.warning("agent did not exit within %gs of SIGTERM; SIGKILL", grace)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(process.wait)
        # Anything the agent left running in its group goes too: nothing may write into a mount being removed.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


async def _end_group(pgid: int, grace: float) -> None:
    """SIGTERM what is left of the agent's process group `pgid` (its leader has exited), SIGKILL it after
    `grace` seconds: background children of the agent must not write into a mount being removed."""
    with anyio.CancelScope(shield=True):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return  # nothing left
        with anyio.move_on_after(grace):
            while _group_alive(pgid):
                await anyio.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with anyio.move_on_after(5):
            while _group_alive(pgid):
                await anyio.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _teardown(opts, item, summary: ItemSummary, stores: WorkerMemoryStores, lease, beats) -> None:
    if summary.outcome == "completed" and not lease.ended:
        stores.listed.clear()
        with anyio.move_on_after(opts.flush_timeout) as scope:
            await stores.finish()
            # In time *and* every store listed: a refused listing (the session deleted meanwhile: 401), a
            # damaged marker or a folder replaced by a file made the engine sync nothing of that store, and
            # the summary said `final_sync: true` (breakers).
            unsynced_stores = stores.unlisted()
            summary.final_sync = not unsynced_stores
        if scope.cancelled_caught:
            log.warning("final sync cut off after %gs; the flush still pushes changed files", opts.flush_timeout)
        elif not summary.final_sync:
            log.warning(
                "final sync did not reach %s; changed files are kept in .memory-unsynced", ", ".join(unsynced_stores)
            )
    # stopped from outside: only what is left of the lease (`flush_budget`); else the option's bound
    budget = flush_budget(opts, beats) if lease.ended and not lease.lost else None
    if budget is None or budget > 0:
        flush_timeout = opts.flush_timeout if budget is None else budget
        with anyio.move_on_after(flush_timeout) as scope:
            await stores.flush_writes()
        if scope.cancelled_caught:
            log.warning("flush cut off after %.1fs; what it did not push is kept in .memory-unsynced", flush_timeout)
    else:
        log.warning("no lease left to flush in; changed files are kept in .memory-unsynced")
    await stores.preserve_unsynced()
    summary.deletes_not_sent = stores.deletes_not_sent()
    summary.not_mounted = stores.not_mounted()
    for pending in summary.deletes_not_sent:
        log.warning("delete not sent: %s stays on the server", shown(f"{pending['slug']}/{pending['path']}"))
    await stores.dispose()
    summary.conflicts = [asdict(k) for k in stores.conflicts]
    summary.unsynced = [asdict(k) for k in stores.unsynced]


class OneLineFormatter(logging.Formatter):
    """Each record is one line: its text goes through `config.text.one_line`, so a value someone else chose
    — an agent's file name in our messages or in the SDK's ("the server rejected this memory file … path=")
    — cannot end the line and forge the next (``item ended work_id=FAKE outcome=completed``, helper-97) or
    send the terminal an escape sequence. A traceback (`exc_info`) keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))


def configure_logging(verbose: bool) -> None:
    """Log lines on stderr, one per record (`OneLineFormatter`): the worker's own at INFO (DEBUG with
    `verbose`), the SDK's at WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("anthropic.lib.tools.agent_toolset").setLevel(logging.INFO)
    logging.getLogger("anthropic.lib.environments").setLevel(logging.INFO)


__all__ = ["ItemSummary", "Options", "handle_item", "make_read_only", "relocate", "run"]
