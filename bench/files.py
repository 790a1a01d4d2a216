"""Benchmark file memories: create and precondition update through HTTP vs raw SQL (SPEC §5, issue 9).

    .venv/bin/python bench/files.py [--duration 3] [--clients 1,4] [--keep] [--stack gunicorn-asgi+front-no-lanes]

- create: HTTP `POST /api/v1/memory_stores/{id}/memories {path, content}` vs ONE raw statement that
  locks the store row (bumping `memory_count` under the 2,000 cap), inserts the `created` version and
  the memory head pointing at it;
- update: HTTP `POST /api/v1/memory_stores/{id}/memories/{memory_id} {content, precondition:
  {type: content_sha256, …}}` vs ONE raw statement that locks the store row, locks the memory only if
  its current SHA-256 equals the precondition, inserts the `modified` version and moves the head.
Content is ~1 KB; every client writes its own paths / its own memory (no precondition conflicts), over
16 stores per side (the 2,000-memory cap is per store). Same client model, same database, same run,
raw and HTTP alternating. Goal: HTTP ≥ 40 % of raw throughput.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    MACHINE_HEADERS,
    HttpJob,
    PgJob,
    ServerConfig,
    bench_database,
    budget_line,
    django_setup,
    floor_line,
    gunicorn,
    machine_line,
    machine_row,
    make_owners,
    pg_params,
    quiet_load,
    table,
    verdict,
)

RAW_CREATE = """
WITH locked AS (
    UPDATE stores_store SET memory_count = memory_count + 1
    WHERE id = %(store)s AND archived_at IS NULL AND memory_count < 2000
    RETURNING id
), version AS (
    INSERT INTO versions_version (id, store_id, memory_id, operation, path, content, content_sha256,
                                  content_size_bytes, created_by, api_key_id, created_at)
    SELECT %(version)s, locked.id, %(memory)s, 'created', %(path)s, %(content)s, %(sha)s, %(size)s,
           %(actor)s::jsonb, %(token)s, statement_timestamp()
    FROM locked
    RETURNING id, store_id, memory_id, path, content, content_sha256, content_size_bytes, created_at
)
INSERT INTO versions_memory (id, store_id, path, content, content_sha256, content_size_bytes,
                             current_version_id, created_at, updated_at)
SELECT memory_id, store_id, path, content, content_sha256, content_size_bytes, id, created_at, created_at
FROM version
RETURNING id
"""

RAW_UPDATE = """
WITH locked AS (
    SELECT id FROM stores_store WHERE id = %(store)s AND archived_at IS NULL FOR UPDATE
), head AS (
    SELECT m.id, m.path FROM versions_memory m JOIN locked ON locked.id = m.store_id
    WHERE m.id = %(memory)s AND m.content_sha256 = %(expected)s
    FOR UPDATE OF m
), version AS (
    INSERT INTO versions_version (id, store_id, memory_id, operation, path, content, content_sha256,
                                  content_size_bytes, created_by, api_key_id, created_at)
    SELECT %(version)s, %(store)s, head.id, 'modified', head.path, %(content)s, %(sha)s, %(size)s,
           %(actor)s::jsonb, %(token)s, statement_timestamp()
    FROM head
    RETURNING id, memory_id, created_at
)
UPDATE versions_memory SET content = %(content)s, content_sha256 = %(sha)s, content_size_bytes = %(size)s,
       current_version_id = version.id, updated_at = version.created_at
FROM version WHERE versions_memory.id = version.memory_id
RETURNING versions_memory.id
"""


def content(tag: str, i: int) -> str:
    line = f"- {tag} revision {i}: the worker syncs this file both ways with SHA-256 preconditions.\n"
    return f"# Notes {tag}\n\n" + line * 12


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class HttpFiles(HttpJob):
    def __init__(self, port, owners, tag: str, mode: str):
        super().__init__(port)
        self.owners, self.tag, self.mode = owners, tag, mode

    def open(self) -> None:
        super().open()
        self.headers = [{**o.auth, "Content-Type": "application/json"} for o in self.owners]
        if self.mode == "update":  # one memory of our own, in our first store
            owner = self.owners[0]
            self.current = content(self.tag, 0)
            body = json.dumps({"path": f"/bench/{self.tag}/doc.md", "content": self.current}).encode()
            made = self.request("POST", f"/api/v1/memory_stores/{owner.store}/memories", body, self.headers[0], 200)
            self.memory = json.loads(made)["id"]

    def call(self, i: int) -> None:
        if self.mode == "create":
            k = i % len(self.owners)
            body = json.dumps({"path": f"/bench/{self.tag}/{i}.md", "content": content(self.tag, i)}).encode()
            self.request("POST", f"/api/v1/memory_stores/{self.owners[k].store}/memories", body, self.headers[k], 200)
        else:
            new = content(self.tag, i + 1_000_000)
            body = json.dumps(
                {"content": new, "precondition": {"type": "content_sha256", "content_sha256": sha(self.current)}}
            ).encode()
            path = f"/api/v1/memory_stores/{self.owners[0].store}/memories/{self.memory}"
            self.request("POST", path, body, self.headers[0], 200)
            self.current = new


class RawFiles(PgJob):
    def __init__(self, params, owners, tag: str, mode: str):
        super().__init__(params)
        self.owners, self.tag, self.mode = owners, tag, mode

    def open(self) -> None:
        super().open()
        if self.mode == "update":
            self.memory = uuid.uuid4()
            self.current = content(self.tag, 0)
            self._create(self.owners[0], f"/bench/{self.tag}/doc.md", self.current, self.memory)

    def _args(self, owner, text: str) -> dict:
        return {
            "store": owner.store,
            "version": uuid.uuid4(),
            "content": text,
            "sha": sha(text),
            "size": len(text.encode()),
            "actor": json.dumps({"type": "api_actor", "api_key_id": str(owner.token_id)}),
            "token": owner.token_id,
        }

    def _create(self, owner, path: str, text: str, memory) -> None:
        row = self.pg.execute(RAW_CREATE, {**self._args(owner, text), "memory": memory, "path": path}).fetchone()
        if row is None:
            raise RuntimeError("raw create: store missing, archived or full")

    def call(self, i: int) -> None:
        if self.mode == "create":
            owner = self.owners[i % len(self.owners)]
            self._create(owner, f"/bench/{self.tag}/{i}.md", content(self.tag, i), uuid.uuid4())
        else:
            new = content(self.tag, i + 1_000_000)
            args = {**self._args(self.owners[0], new), "memory": self.memory, "expected": sha(self.current)}
            if self.pg.execute(RAW_UPDATE, args).fetchone() is None:
                raise RuntimeError("raw update: precondition failed")
            self.current = new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--stack", default=ServerConfig.stack, help="server stack (bench/common.py STACKS)")
    args = parser.parse_args()
    django_setup()
    clients = [int(c) for c in args.clients.split(",")]
    run = itertools.count()
    with bench_database("files", keep=args.keep) as db_name:
        print(machine_line())
        owners = {"http": make_owners(16, "bench-files-http"), "raw": make_owners(16, "bench-files-raw")}
        params = pg_params()
        rows, ratios, raw_rps, machine, machine_rows = [], {}, {}, {}, []
        with gunicorn(db_name, ServerConfig(stack=args.stack)) as server:
            for mode in ("create", "update"):
                for n in clients:
                    results = {}
                    for kind in ("raw", "http"):

                        def make_jobs(kind=kind, n=n, mode=mode):
                            jobs = []
                            for c in range(n):
                                mine = owners[kind][c % 16 :] + owners[kind][: c % 16]
                                tag = f"{kind}{next(run)}"
                                job = HttpFiles(server.port, mine, tag, mode) if kind == "http" else None
                                jobs.append(job or RawFiles(params, mine, tag, mode))
                            return jobs

                        label = f"{mode} {kind} clients={n}"
                        results[kind] = quiet_load(
                            make_jobs, duration=args.duration, warmup=5, server_pid=server.pid, label=label
                        )
                    raw, web = results["raw"], results["http"]
                    machine[(mode, n)] = web.machine.per_request_ms(web.requests)
                    cpu_ms = machine[(mode, n)]["server"]
                    machine_rows.append(machine_row(mode, n, results))
                    raw_rps[(mode, n)] = raw.rps
                    ratios[(mode, n)] = web.rps / raw.rps
                    rows.append(
                        [
                            mode,
                            n,
                            f"{raw.rps:,.0f}",
                            f"{raw.p50_ms:.2f}",
                            f"{web.rps:,.0f}",
                            f"{web.p50_ms:.2f}",
                            f"{web.p99_ms:.2f}",
                            f"{web.rps / raw.rps:.0%}",
                            f"{cpu_ms:.2f}",
                        ]
                    )
                    print(f"  {mode} clients={n}: raw {raw.rps:,.0f}/s, HTTP {web.rps:,.0f}/s", flush=True)
            floor_clients = 4 if 4 in clients else clients[0]
            floor = floor_line(
                server,
                clients=floor_clients,
                duration=args.duration,
                reference_rps=raw_rps.get(("create", floor_clients)),
                what="the raw create",
            )
    print()
    print(
        table(
            [
                "operation",
                "clients",
                "raw req/s",
                "raw p50 ms",
                "HTTP req/s",
                "HTTP p50 ms",
                "HTTP p99 ms",
                "HTTP/raw",
                "server CPU ms/req",
            ],
            rows,
        )
    )
    print()
    print("where the machine's CPU went, ms per request (server, PostgreSQL, the client processes, the rest):")
    print(table(["operation", *MACHINE_HEADERS], machine_rows))
    print()
    print(floor)
    for mode in ("create", "update"):
        worst_n = min(clients, key=lambda n: ratios[(mode, n)])
        print(budget_line(raw_rps[(mode, worst_n)], machine[(mode, worst_n)], goal=0.4, unit=f"{mode}s"))
    for mode in ("create", "update"):
        worst = min(ratios[(mode, n)] for n in clients)
        print(
            f"goal: {mode} HTTP ≥ 40 % of raw (worst of {args.clients} clients): {worst:.0%} — {verdict(worst >= 0.4)}"
        )


if __name__ == "__main__":
    main()
