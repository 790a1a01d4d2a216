"""The `memories-worker` command line (SPEC §5 "The self-hosted worker"): `run` and `tools`.

`memories-worker run --environment ENV [options] -- AGENT_CMD …` claims work and runs `AGENT_CMD` once per
item (the environment key comes from `MEMORIES_ENVIRONMENT_KEY`, never from the command line, so it stays out
of `ps`). Prints one JSON summary line per item on stdout; logs go to stderr. Exit status: 0 when the worker
stopped normally (after `--once`'s item, or SIGTERM/SIGINT), 1 when the poll was refused for good (a bad key
or environment: 4xx), 2 on a usage error, 3 when the mount root cannot be used (another worker holds its lock,
it cannot be created, or an agent a dead worker left running there cannot be killed; nothing is claimed). An
unreachable server is retried with backoff (the SDK poller's).

`memories-worker tools` serves the agent's file tools (read, write, edit, glob, grep, bash) over MCP stdio.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from pathlib import Path

import anyio
import click

from config.text import quoted
from worker import runner
from worker.sync import set_delete_corroboration

KEY_VARIABLE = "MEMORIES_ENVIRONMENT_KEY"
_PR_SET_DUMPABLE = 4


def take_environment_key() -> str:
    """Return the environment key from `MEMORIES_ENVIRONMENT_KEY` and leave no copy an agent can read.

    The agent runs as the worker's child, as the same user: it read the key from `/proc/$PPID/environ` (which
    shows the environment the worker *started* with, whatever `os.environ` says later), polled with it, and
    claimed other sessions' work and their credentials (a breaker). So, on Linux: the variable's bytes in the
    process's initial environment block are overwritten with NULs, the variable is unset, and the process is
    made non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`: same-user processes can no longer read its `/proc` files
    or its memory, nor ptrace it). An agent running as root can still read the worker's memory: run agents as
    another user, or in a sandbox, for more (docs/worker.md). Returns "" when the variable is unset.
    """
    key = os.environ.get(KEY_VARIABLE, "")
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        prefix = KEY_VARIABLE.encode() + b"="
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")  # char **environ, as addresses
        index = 0
        while environ[index]:
            text = ctypes.string_at(environ[index])
            if text.startswith(prefix):
                ctypes.memset(environ[index] + len(prefix), 0, len(text) - len(prefix))
            index += 1
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise click.ClickException(
                f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}; the agent could read the key"
            )
    os.environ.pop(KEY_VARIABLE, None)
    return key


class Seconds(click.FloatRange):
    """A number of seconds from `min` up to a day: `nan` and `inf`, which `click.FloatRange` lets through
    (no comparison fails for them), are refused (a breaker: `--grace nan` made every wait `nan`)."""

    name = "seconds"

    def __init__(self, min: float) -> None:
        super().__init__(min=min, max=86400.0)

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{quoted(value, 80)} is not a finite number of seconds.", param, ctx)
        return seconds


@click.group()
def main() -> None:
    """The self-hosted worker of Memories: mounts a session's memory stores and runs your agent."""


@main.command("run", context_settings={"show_default": True})
@click.option("--environment", "environment_id", required=True, metavar="ENV_ID", help="The environment to serve.")
@click.option(
    "--api-url",
    envvar="MEMORIES_API_URL",
    default="http://127.0.0.1:8000",
    help="The server root (env MEMORIES_API_URL); the worker adds /api for the SDK.",
)
@click.option(
    "--mount-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/mnt/memory"),
    help="Replaces the /mnt/memory prefix of every mount path (for hosts without a writable /mnt/memory). "
    "One worker per mount root: a second one exits 3.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    help="The agent's working directory; conflict and unsynced copies go beneath it.",
)
@click.option("--once", is_flag=True, help="Stop after one work item.")
@click.option("--sync-interval", type=Seconds(min=5.0), default=15.0, help="Seconds between syncs.")
@click.option("--flush-timeout", type=Seconds(min=1.0), default=30.0, help="Bound of the final sync and the flush.")
@click.option("--grace", type=Seconds(min=0.0), default=10.0, help="Seconds between SIGTERM and SIGKILL of the agent.")
@click.option(
    "--lease-ttl", type=click.IntRange(10, 300), default=60, help="Lease TTL asked for; heartbeats every TTL/2."
)
@click.option(
    "--delete-after",
    type=Seconds(min=1.0),
    default=30.0,
    help="Seconds a deleted file must stay missing (and a later sync) before its server delete goes out.",
)
@click.option("--worker-id", default=None, help="The Anthropic-Worker-ID header (default: host name + random).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.argument("agent_cmd", nargs=-1, required=True)
def run_command(
    environment_id,
    api_url,
    mount_root,
    workdir,
    once,
    sync_interval,
    flush_timeout,
    grace,
    lease_ttl,
    delete_after,
    worker_id,
    verbose,
    agent_cmd,
) -> None:
    """Claim work from ENV_ID and run AGENT_CMD (after `--`) once per work item."""
    key = take_environment_key()
    if not key:
        raise click.UsageError("set MEMORIES_ENVIRONMENT_KEY to the environment key (menv_…)")
    runner.configure_logging(verbose)
    set_delete_corroboration(delete_after)
    opts = runner.Options(
        api_url=api_url,
        environment_id=environment_id,
        environment_key=key,
        agent_cmd=tuple(agent_cmd),
        mount_root=mount_root.absolute(),
        workdir=workdir.absolute(),
        once=once,
        sync_interval=sync_interval,
        flush_timeout=flush_timeout,
        grace=grace,
        lease_ttl=lease_ttl,
        worker_id=worker_id,
    )
    raise SystemExit(anyio.run(runner.run, opts))


@main.command("tools")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    help="Relative tool paths resolve here (default: the current directory).",
)
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Another directory the file tools may reach (repeatable; default: env MEMORIES_TOOL_ROOTS).",
)
@click.option(
    "--read-only-root",
    "read_only_roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A directory the write and edit tools refuse (repeatable; default: env MEMORIES_TOOL_READ_ONLY_ROOTS).",
)
def tools_command(workdir, roots, read_only_roots) -> None:
    """Serve read, write, edit, glob, grep and bash over MCP stdio, rooted at the work directory and the mounts.

    Under `memories-worker run` the agent's environment names the mounts, so `memories-worker tools` needs no
    options there.
    """
    from worker import tools

    roots = list(roots) or _paths_from_env("MEMORIES_TOOL_ROOTS")
    read_only_roots = list(read_only_roots) or _paths_from_env("MEMORIES_TOOL_READ_ONLY_ROOTS")
    anyio.run(tools.serve, workdir.absolute(), roots, read_only_roots)


def _paths_from_env(name: str) -> list[Path]:
    return [Path(p) for p in os.environ.get(name, "").split(os.pathsep) if p]
