"""Benchmark `memories-worker`: download and final flush of a 2,000-file store (SPEC §5, issue 13).

    .venv/bin/python bench/worker_sync.py [--files 2000] [--size 1024] [--keep]

A throw-away database (`bench_worker`), gunicorn as `bin/serve` runs it, one store of `--files` files of
`--size` bytes attached read_write to one session, and the real `memories-worker run --once` with a
temporary mount root. The agent records that it started (everything is downloaded by then), waits, rewrites
every file and exits 1 — so the teardown is the push-only flush (not the final sync) and has every file to
push. Measured from the worker's own log timestamps:

- download: `claimed work` → `agent started` (the session fetch, the paged `view=full` listing, the writes);
- flush: `agent ended` → `item ended` (`flush_writes`: 32 updates in flight, each with its SHA-256
  precondition and the lease fence), with `--flush-timeout 600` so the bound does not cut it short;
- server CPU seconds (gunicorn master + workers, /proc) during each phase.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ServerConfig,
    bench_database,
    django_setup,
    gunicorn,
    machine_line,
    make_owners,
    session_attaching,
    table,
)

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(sys.executable).with_name("memories-worker")
AGENT = """
import os, sys, time
from pathlib import Path
work = Path.cwd()
(work / "started").write_text("")
while not (work / "go").exists():
    time.sleep(0.05)
mount = Path(os.environ["MEMORIES_TOOL_ROOTS"].split(os.pathsep)[0])
for path in mount.rglob("*.md"):
    path.write_text(path.read_text() + "edited\\n")
sys.exit(1)
"""
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def seed(owner, files: int, size: int):
    """The owner's store with `files` files of about `size` bytes; an environment, its key and a session."""
    from sessions.services import environments as environment_services
    from stores.models import Store
    from versions import services as version_services
    from versions.actors import Actor

    store = Store.objects.get(pk=owner.store)
    actor = Actor.api(owner.token_id)
    body = ("x" * 63 + "\n") * max(1, size // 64)
    for k in range(files):
        version_services.create_memory(
            store=store, path=f"/notes/{k // 100:02d}/file-{k:04d}.md", content=body, actor=actor
        )
    environment, _ = session_attaching(owner)
    key = environment_services.issue_environment_key(environment=environment, name="bench")
    return environment, key


def log_time(log: str, needle: str) -> float:
    for line in log.splitlines():
        if needle in line:
            match = STAMP.match(line)
            if match:
                return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise RuntimeError(f"no {needle!r} in the worker's log:\n{log[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    django_setup()
    with bench_database("worker", keep=args.keep) as db_name:
        print(machine_line())
        (owner,) = make_owners(1, "bench-worker")
        started = time.monotonic()
        environment, key = seed(owner, args.files, args.size)
        print(f"seeded {args.files} files of ~{args.size} B in {time.monotonic() - started:.1f}s", flush=True)
        from django.db import connections

        connections.close_all()
        with gunicorn(db_name, ServerConfig()) as server, tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "agent.py").write_text(AGENT)
            work = tmp / "work"
            env = {**os.environ, "MEMORIES_ENVIRONMENT_KEY": key.secret}
            cmd = [
                str(WORKER),
                "run",
                "--environment",
                str(environment.pk),
                "--api-url",
                f"http://127.0.0.1:{server.port}",
                "--mount-root",
                str(tmp / "mnt"),
                "--workdir",
                str(work),
                "--once",
                "--flush-timeout",
                "600",
                "--sync-interval",
                "3600",
                "--",
                sys.executable,
                str(tmp / "agent.py"),
            ]
            cpu0 = server.cpu_seconds()
            with (tmp / "worker.err").open("wb") as err:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err)
                while not (work / "started").exists():
                    if proc.poll() is not None:
                        raise RuntimeError((tmp / "worker.err").read_text()[-4000:])
                    time.sleep(0.05)
                cpu1 = server.cpu_seconds()
                (work / "go").write_text("")
                summary = proc.communicate(timeout=1200)[0].decode()
            cpu2 = server.cpu_seconds()
            log = (tmp / "worker.err").read_text()
            download = log_time(log, "agent started") - log_time(log, "claimed work")
            flush = log_time(log, "item ended") - log_time(log, "agent ended")
            unsynced = summary.count('"slug"')
            rows = [
                ["download", args.files, f"{download:.2f}", f"{args.files / download:,.0f}", f"{cpu1 - cpu0:.1f}"],
                ["flush", args.files, f"{flush:.2f}", f"{args.files / flush:,.0f}", f"{cpu2 - cpu1:.1f}"],
            ]
            print(table(["phase", "files", "seconds", "files/s", "server CPU s"], rows))
            print(f"files the flush did not push: {unsynced}")


if __name__ == "__main__":
    main()
