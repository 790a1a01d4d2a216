"""Benchmark `POST /api/v1/memories/{id}/note` through gunicorn against the raw SQL append (SPEC §4, issue 9).

    .venv/bin/python bench/note.py [--duration 3] [--workers 2] [--threads 8] [--clients 1,4,16] [--keep]
                                   [--stack gunicorn-asgi+front,gthread,…]  (candidates: bench/common.py STACKS)

For 1, 4 and 16 concurrent clients, on one store and spread over 16 stores, it measures throughput and
p50/p99 latency of
- HTTP: the real endpoint (bearer token, access check, validation, the service's one-statement append,
  JSON envelope) served by the stack `bin/serve` runs (or each `--stack`, back to back) on a free loopback port;
- raw: the same guarantee written as the fastest SQL we know with psycopg — ONE prepared statement in
  autocommit that locks the store row (the UPDATE), takes seq = entry_count, bumps the counter and
  inserts the entry with its client nonce (UNIQUE (store, author, nonce) enforces it).
Both use the same client model (bench/common.py: one process per client, one persistent connection) on
the same database in the same run, alternating raw and HTTP for each row so background load hits both.
Goals: HTTP ≥ 50 % of raw on one store at 4 clients, ≥ 40 % across 16 stores; server CPU ≤ 1.5 ms per note
(process-tree CPU of gunicorn over exactly each measured window / the requests completed in it — warm-up
and a new thread's first connection fall outside; the worst row counts). A second table splits the
machine's CPU per request between the server, PostgreSQL, the client processes and the rest, with the
hypervisor's steal (a quiet machine has next to none); the `budget` line says what the 50 % goal leaves
for the server once PostgreSQL and the clients have taken their share in the same run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    MACHINE_HEADERS,
    STACKS,
    HttpHealth,
    HttpJob,
    PgJob,
    ServerConfig,
    bench_database,
    budget_line,
    django_setup,
    gunicorn,
    machine_line,
    machine_row,
    make_owners,
    measured_load,
    pg_params,
    quiet_load,
    run_load,
    table,
    verdict,
)

BODY = (
    "Decision: keep the PostgreSQL schema compatible with contract 2.0.0; the nightly import stays on "
    "batch size 1,000 until the archive catches up. Owner: agent-7. Follow-up in entry 41."
)

RAW_APPEND = """
WITH bump AS (
    UPDATE stores_store SET entry_count = entry_count + 1
    WHERE id = %s AND archived_at IS NULL
    RETURNING entry_count - 1 AS seq
)
INSERT INTO memories_entry (store_id, seq, author_id, body_md, size_bytes, client_nonce, created_at)
SELECT %s, bump.seq, %s, %s, %s, %s, clock_timestamp() FROM bump
RETURNING id, seq, created_at
"""


class HttpNote(HttpJob):
    def __init__(self, port: int, targets: list[tuple[str, str]], tag: str):
        super().__init__(port)
        self.targets = targets  # (store id, token secret)
        self.tag = tag

    def open(self) -> None:
        super().open()
        self.prepared = [
            (
                f"/api/v1/memories/{store}/note",
                {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
            )
            for store, secret in self.targets
        ]

    def call(self, i: int) -> None:
        path, headers = self.prepared[i % len(self.prepared)]
        body = json.dumps({"body_md": BODY, "client_nonce": f"{self.tag}-{i}"}).encode()
        self.request("POST", path, body, headers, 201)


class HttpStoreRead(HttpJob):
    """The floor of an authenticated store request: GET /api/v1/memories/{id} — Django, DRF, the token
    and the store access check (one statement), a small JSON body; no write."""

    def __init__(self, port: int, store: str, secret: str):
        super().__init__(port)
        self.path, self.headers = f"/api/v1/memories/{store}", {"Authorization": f"Bearer {secret}"}

    def call(self, i: int) -> None:
        self.request("GET", self.path, None, self.headers, 200)


class RawNote(PgJob):
    def __init__(self, params: dict, targets: list[tuple[str, int]], tag: str):
        super().__init__(params)
        self.targets = targets  # (store id, author id)
        self.tag = tag
        self.size = len(BODY.encode("utf-8"))

    def call(self, i: int) -> None:
        store, author = self.targets[i % len(self.targets)]
        with self.pg.cursor() as cur:
            cur.execute(RAW_APPEND, (store, store, author, BODY, self.size, f"{self.tag}-{i}"))
            if cur.fetchone() is None:
                raise RuntimeError("raw append found no store")


class NoteStatements(PgJob):
    """The ceiling of any note server: the note's own two statements, as the service runs them — the token +
    store access statement (`accounts.authentication`) and the append (`memories.services`) — from a
    psycopg client, prepared, with no HTTP, no Django and no DRF in between."""

    def __init__(self, params: dict, store: str, author, secret: str, tag: str):
        import uuid

        from accounts.authentication import _TOKEN_WITH_STORE
        from accounts.services import token_digest

        super().__init__(params)
        compiled = _TOKEN_WITH_STORE._get("default")
        values = {"digest": token_digest(secret), "pk": uuid.UUID(store)}
        self.access_sql, self.access_args = compiled.sql, list(compiled.params)
        for index, name in compiled.slots:
            self.access_args[index] = values[name]
        self.store, self.author, self.tag = store, author, tag
        self.size = len(BODY.encode("utf-8"))
        self.rights = None

    def call(self, i: int) -> None:
        from memories.services import _APPEND_WITH_NONCE

        with self.pg.cursor() as cur:
            cur.execute(self.access_sql, self.access_args)
            if not cur.fetchall():
                raise RuntimeError("the access statement found no token")
            if self.rights is None:  # the store's rights version, as the access statement read it (a user store)
                cur.execute("SELECT rights_version FROM stores_store WHERE id = %s", [self.store])
                self.rights = cur.fetchone()[0]
            args = {"store": self.store, "author": self.author, "body": BODY, "size": self.size}
            args |= {"rights": self.rights, "project": None, "section": None, "parent_rights": None}
            cur.execute(_APPEND_WITH_NONCE, {**args, "nonce": f"{self.tag}-{i}"})
            if cur.fetchone() is None:
                raise RuntimeError("the append found no store")


def targets_for(client: int, stores: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """Client `client`'s round-robin over `stores`, starting at its own offset (spreads the load)."""
    k = client % len(stores)
    return stores[k:] + stores[:k]


def measure_stack(config: ServerConfig, db_name: str, stores, args, client_counts, store_counts, run) -> dict:
    """Run the whole grid (and the /healthz floor) against one server stack; print its table; return figures."""
    params = pg_params()
    rows, ratios, raw_rps, cpu_ms, machine_rows, machine = [], {}, {}, {}, [], {}
    print(f"server: {config.label}; {args.duration:g} s per measurement; body {len(BODY.encode())} bytes")
    with gunicorn(db_name, config) as server:
        for n_stores in store_counts:
            used = stores[:n_stores]
            for clients in client_counts:
                results = {}
                for kind in ("raw", "http"):

                    def make_jobs(kind=kind, clients=clients, used=used):
                        jobs = []
                        for c in range(clients):
                            mine = targets_for(c, used)
                            tag = f"{kind}{next(run)}"
                            if kind == "raw":
                                jobs.append(RawNote(params, [(s, u) for s, u, _ in mine], tag))
                            else:
                                jobs.append(HttpNote(server.port, [(s, t) for s, _, t in mine], tag))
                        return jobs

                    label = f"{kind} stores={n_stores} clients={clients}"
                    results[kind] = quiet_load(make_jobs, duration=args.duration, server_pid=server.pid, label=label)
                raw, web = results["raw"], results["http"]
                machine[(n_stores, clients)] = {k: r.machine.per_request_ms(r.requests) for k, r in results.items()}
                machine_rows.append(machine_row(n_stores, clients, results))
                ratio = web.rps / raw.rps
                ratios[(n_stores, clients)] = ratio
                raw_rps[(n_stores, clients)] = raw.rps
                cpu_ms[(n_stores, clients)] = machine[(n_stores, clients)]["http"]["server"]
                rows.append(
                    [
                        n_stores,
                        clients,
                        f"{raw.rps:,.0f}",
                        f"{raw.p50_ms:.2f}",
                        f"{raw.p99_ms:.2f}",
                        f"{web.rps:,.0f}",
                        f"{web.p50_ms:.2f}",
                        f"{web.p99_ms:.2f}",
                        f"{ratio:.0%}",
                        f"{cpu_ms[(n_stores, clients)]:.2f}",
                    ]
                )
                progress = f"stores={n_stores} clients={clients}: raw {raw.rps:,.0f}/s, HTTP {web.rps:,.0f}/s"
                print(f"  {progress}", flush=True)
        floor_clients = 4 if 4 in client_counts else client_counts[0]
        floor, floor_cpu = measured_load(
            server, [HttpHealth(server.port) for _ in range(floor_clients)], duration=args.duration
        )
        store, _, secret = stores[0]
        readers = [HttpStoreRead(server.port, store, secret) for _ in range(floor_clients)]
        read, read_cpu = measured_load(server, readers, duration=args.duration)
    user = stores[0][1]
    ceiling = run_load(
        [NoteStatements(params, store, user, secret, f"sql{next(run)}") for _ in range(floor_clients)],
        duration=args.duration,
    )
    print()
    print(
        table(
            [
                "stores",
                "clients",
                "raw req/s",
                "raw p50 ms",
                "raw p99 ms",
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
    print()
    print("where the machine's CPU went, ms per request (server, PostgreSQL, the client processes, the rest):")
    print(table(["stores", *MACHINE_HEADERS], machine_rows))
    raw_ref = raw_rps.get((1, floor_clients))
    print(
        f"floor: GET /healthz (no DRF, no database) at {floor_clients} clients: "
        f"{floor.rps:,.0f} req/s, p50 {floor.p50_ms:.2f} ms, {floor_cpu:.2f} ms server CPU/req"
        + (f" = {floor.rps / raw_ref:.0%} of the raw append on one store" if raw_ref else "")
    )
    print(
        f"floor with Django, DRF and the access check: GET /api/v1/memories/{{id}} at {floor_clients} clients: "
        f"{read.rps:,.0f} req/s, p50 {read.p50_ms:.2f} ms, {read_cpu:.2f} ms server CPU/req"
        + (f" = {read.rps / raw_ref:.0%} of the raw append on one store" if raw_ref else "")
    )
    print(
        f"ceiling: the note's own two statements from psycopg (no HTTP, no Django, no DRF) at {floor_clients} "
        f"clients: {ceiling.rps:,.0f} req/s, p50 {ceiling.p50_ms:.2f} ms"
        + (f" = {ceiling.rps / raw_ref:.0%} of the raw append on one store" if raw_ref else "")
    )
    one = ratios.get((1, 4))
    if one is not None:
        print(budget_line(raw_rps[(1, 4)], machine[(1, 4)]["http"], goal=0.5, unit="notes"))
        print(f"goal: one store, 4 clients, HTTP ≥ 50 % of raw: {one:.0%} — {verdict(one >= 0.5)}")
    spread = [ratios[(16, c)] for c in client_counts if (16, c) in ratios and c > 1]
    if spread:
        worst = min(spread)
        print(
            f"goal: 16 stores, HTTP ≥ 40 % of raw (worst of {', '.join(str(c) for c in client_counts if c > 1)} "
            f"clients): {worst:.0%} — {verdict(worst >= 0.4)}"
        )
    worst_cpu = max(cpu_ms.values())
    print(f"goal: server CPU per note ≤ 1.5 ms (worst row): {worst_cpu:.2f} ms — {verdict(worst_cpu <= 1.5)}")
    print()
    return {"ratios": ratios, "cpu_ms": cpu_ms, "floor": floor, "floor_cpu": floor_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per measurement (default 3)")
    parser.add_argument("--workers", type=int, default=ServerConfig.workers)
    parser.add_argument("--threads", type=int, default=ServerConfig.threads)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--stores", default="1,16")
    parser.add_argument(
        "--stack",
        default=ServerConfig.stack,
        help=f"server stack(s), comma-separated, measured back to back: {', '.join(STACKS)}",
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench_note database")
    args = parser.parse_args()
    django_setup()
    configs = [ServerConfig(workers=args.workers, threads=args.threads, stack=s) for s in args.stack.split(",")]
    client_counts = [int(c) for c in args.clients.split(",")]
    store_counts = [int(c) for c in args.stores.split(",")]
    run = itertools.count()

    with bench_database("note", keep=args.keep) as db_name:
        print(machine_line())
        stores = [(o.store, o.user, o.secret) for o in make_owners(max(store_counts), "bench-note")]
        figures = [
            (c.stack, measure_stack(c, db_name, stores, args, client_counts, store_counts, run)) for c in configs
        ]
        if len(configs) > 1:  # a stack may be listed twice (A,B,A,B) to see the drift within one run
            key = (1, 4) if (1, 4) in figures[0][1]["ratios"] else next(iter(figures[0][1]["ratios"]))
            print(f"stacks compared, in run order (note: {key[0]} store(s), {key[1]} clients; floor: GET /healthz):")
            print(
                table(
                    ["stack", "note HTTP/raw", "note server CPU ms/req", "healthz req/s", "healthz CPU ms/req"],
                    [
                        [
                            stack,
                            f"{f['ratios'][key]:.0%}",
                            f"{f['cpu_ms'][key]:.2f}",
                            f"{f['floor'].rps:,.0f}",
                            f"{f['floor_cpu']:.2f}",
                        ]
                        for stack, f in figures
                    ],
                )
            )
        print(machine_line())


if __name__ == "__main__":
    main()
