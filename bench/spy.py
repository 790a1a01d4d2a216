"""Sample the server with py-spy while clients drive one hot endpoint (issue 17: profile before optimising).

    .venv/bin/python bench/spy.py note|file_create|file_update|recall [--duration 8] [--clients 4]
                                      [--top 40] [--flame out.svg]

Starts the stack `bin/serve` runs with ONE worker process against a throw-away database, drives the
endpoint with `--clients` closed-loop clients (bench/common.py), and records the worker with
`py-spy record` (`pip install py-spy`: a profiling tool, not a dependency of the service). Prints
the functions with the most samples, inclusive ("total") and exclusive ("self"), as percentages of
the worker's samples, plus the server CPU per request measured in the same window. `--flame` also
writes py-spy's flame graph.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    HttpJob,
    ServerConfig,
    bench_database,
    django_setup,
    gunicorn,
    machine_line,
    make_owners,
    run_load,
)
from bench.note import HttpNote


class HttpFile(HttpJob):
    """Create new file memories (`update=False`) or update one memory with a content_sha256 precondition."""

    def __init__(self, port: int, store: str, secret: str, tag: str, update: bool):
        super().__init__(port)
        self.store, self.secret, self.tag, self.update = store, secret, tag, update

    def open(self) -> None:
        super().open()
        self.headers = {"Authorization": f"Bearer {self.secret}", "Content-Type": "application/json"}
        self.base = f"/api/v1/memory_stores/{self.store}/memories"
        if self.update:
            body = json.dumps({"path": f"/{self.tag}/doc.md", "content": "v0"}).encode()
            created = json.loads(self.request("POST", self.base, body, self.headers, 200))
            self.memory, self.sha = created["id"], created["content_sha256"]

    def call(self, i: int) -> None:
        if self.update:
            precondition = {"type": "content_sha256", "content_sha256": self.sha}
            body = json.dumps({"content": f"v{i + 1}", "precondition": precondition}).encode()
            self.sha = json.loads(self.request("POST", f"{self.base}/{self.memory}", body, self.headers, 200))[
                "content_sha256"
            ]
        else:
            body = json.dumps({"path": f"/{self.tag}/{i}.md", "content": f"note {i}"}).encode()
            self.request("POST", self.base, body, self.headers, 200)


class HttpRecall(HttpJob):
    def __init__(self, port: int, store: str, secret: str):
        super().__init__(port)
        self.path = f"/api/v1/memories/{store}/recall?pattern=CVE-%5Cd%7B4%7D-%5Cd%2B&limit=100"
        self.headers = {"Authorization": f"Bearer {secret}"}

    def call(self, i: int) -> None:
        self.request("GET", self.path, None, self.headers, 200)


def worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return int(children[0])


def user_system(pid: int) -> tuple[float, float]:
    """User and system CPU seconds used so far by process `pid` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def summarise(raw_path: Path, top: int) -> str:
    """py-spy's raw (collapsed) stacks -> tables of inclusive and exclusive sample shares."""
    inclusive: collections.Counter[str] = collections.Counter()
    exclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw_path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        total += n
        seen = set()
        for frame in frames:
            name = frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].split(":")[0].rstrip(")")
            if name not in seen:
                inclusive[name] += n
                seen.add(name)
        if frames:
            last = frames[-1]
            exclusive[last.split(" (")[0] + " " + last.rsplit("/", 1)[-1].split(":")[0].rstrip(")")] += n
    lines = [f"{total} samples", "", "| total % | function |", "|---:|---|"]
    lines += [f"| {n * 100 / total:.1f} | `{name}` |" for name, n in inclusive.most_common(top)]
    lines += ["", "| self % | function |", "|---:|---|"]
    lines += [f"| {n * 100 / total:.1f} | `{name}` |" for name, n in exclusive.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("endpoint", choices=["note", "file_create", "file_update", "recall"])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--threads", type=int, default=ServerConfig.threads, help="Django threads (WEB_THREADS)")
    parser.add_argument("--flame", help="also write py-spy's flame graph (SVG) here")
    parser.add_argument("--save", help="also keep py-spy's raw (collapsed) stacks in this file")
    parser.add_argument(
        "--wall", action="store_true", help="sample every thread (wall time) instead of the GIL holder (CPU)"
    )
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: .venv/bin/pip install py-spy")
    django_setup()
    run = itertools.count()
    with bench_database(f"profile_{args.endpoint}") as db_name:
        print(machine_line())
        owner = make_owners(1, "bench-profile")[0]
        if args.endpoint == "recall":
            from bench.common import load_log, settle
            from bench.recall import body

            load_log(owner, 20_000, body=body, summaries=False)
            settle()
        with gunicorn(db_name, ServerConfig(workers=1, threads=args.threads)) as server:

            def job():
                if args.endpoint == "note":
                    return HttpNote(server.port, [(owner.store, owner.secret)], f"p{next(run)}")
                if args.endpoint == "recall":
                    return HttpRecall(server.port, owner.store, owner.secret)
                return HttpFile(server.port, owner.store, owner.secret, f"p{next(run)}", args.endpoint == "file_update")

            def jobs():
                return [job() for _ in range(args.clients)]

            run_load(jobs(), duration=1.0)  # warm up: connections, prepared statements, compiled queries
            pid = worker_pid(server.pid)
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "stacks.txt"
                record = [spy, "record", "-p", str(pid), "-r", "250", "-d", str(int(args.duration) + 1), "-f", "raw",
                          "-o", str(raw), "--nonblocking"] + ([] if args.wall else ["--gil"])  # fmt: skip
                spy_proc = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                cpu_before, split_before = server.cpu_seconds(), user_system(pid)
                result = run_load(jobs(), duration=args.duration)
                cpu = server.cpu_seconds() - cpu_before
                user, system = (after - before for after, before in zip(user_system(pid), split_before, strict=True))
                spy_proc.wait()
                if args.flame:
                    flame = [spy, "record", "-p", str(pid), "-r", "250", "-d", "4", "-f", "flamegraph", "-o",
                             args.flame, "--nonblocking"]  # fmt: skip
                    t = threading.Thread(target=subprocess.run, args=(flame,), kwargs={"capture_output": True})
                    t.start()
                    run_load(jobs(), duration=4)
                    t.join()
                per = 1000 / max(result.requests, 1)
                print(
                    f"{args.endpoint}: {args.clients} clients, {result.rps:,.0f} req/s, p50 {result.p50_ms:.2f} ms, "
                    f"server CPU {cpu * per:.2f} ms/req (1 worker: user {user * per:.2f}, system {system * per:.2f})"
                )
                print(summarise(raw, args.top))
                if args.save:
                    shutil.copy(raw, args.save)


if __name__ == "__main__":
    main()
