"""Benchmark `GET /api/v1/memories/{id}/nap` on large stores half-way through compaction (SPEC §4 nap).

    .venv/bin/python bench/nap.py [--sizes 1000,100000,500000] [--rounds 10] [--per-round 20] [--keep]
                                  [--forgotten]

Each store is bulk-loaded with COPY in the state nap's own order produces on a large log: every pair of
entries summarised (level 1 complete), nothing above it — so every ready job is at level 2 and the
pending count is far above the exhaustive walk's threshold (nap scans). One keep-alive client (the store's
owner, so each nap also claims: `limit=4`) naps through gunicorn. The first nap of each store is timed
apart (it moves the store's watermarks over the level-1 summaries once); then sizes are interleaved round
by round. Prints p50/p99 per size and the ratio of each p50 to the smallest store's.
Goal: nap p50 at the largest size within 1.5× of the smallest (before the watermarks: 570 ms per nap at
500,000 entries, linear in the store).

`--forgotten`: levels 1–3 complete instead, then `forget` of entry 0 (as a redaction of it does): one hole
per level at the start of levels 1–3 and every level above missing — the ready jobs are `0-1` and the
level-4 ranges after `0-15`. The same goal (before per-level hole lists: 250–450 ms per nap at 500,000).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ServerConfig,
    bench_database,
    django_setup,
    floor_line,
    gunicorn,
    load_log,
    machine_line,
    make_owners,
    percentile,
    settle,
    table,
    verdict,
)
from bench.wake import body

GOAL = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000,500000")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--forgotten", action="store_true", help="levels 1-3 complete, then entry 0 forgotten")
    args = parser.parse_args()
    django_setup()
    sizes = [int(n) for n in args.sizes.split(",")]

    with bench_database("nap", keep=args.keep) as db_name:
        print(machine_line())
        owners = make_owners(len(sizes), "bench-nap")
        for owner, n in zip(owners, sizes, strict=True):
            started = time.monotonic()
            load_log(owner, n, body=body, top_level=3 if args.forgotten else 1)
            print(f"  loaded {n:,} entries and their summaries in {time.monotonic() - started:.1f} s")
            if args.forgotten:
                forget_first_entry(owner)
        settle()
        first: dict[int, float] = {}
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        cpu: dict[int, float] = dict.fromkeys(sizes, 0.0)
        with gunicorn(db_name, ServerConfig()) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)

            def nap(owner) -> dict:
                conn.request("GET", f"/api/v1/memories/{owner.store}/nap?limit=4", headers=owner.auth)
                response = conn.getresponse()
                data = response.read()
                if response.status != 200:
                    raise RuntimeError(f"nap: {response.status} {data[:300]!r}")
                return json.loads(data)["data"]

            for owner, n in zip(owners, sizes, strict=True):
                t0 = time.perf_counter()
                data = nap(owner)
                first[n] = time.perf_counter() - t0
                # Level 1 is complete: the jobs are the first level-2 ranges, claimed by this owner (after a
                # forget of entry 0: its level-1 range, then the level-4 ranges after its own).
                expected = ["0-1", "16-31", "32-47", "48-63"] if args.forgotten else ["0-3", "4-7", "8-11", "12-15"]
                assert [job["range"] for job in data["jobs"]] == expected, data
                for _ in range(10):
                    nap(owner)
            for _ in range(args.rounds):
                for owner, n in zip(owners, sizes, strict=True):
                    cpu_before = server.cpu_seconds()
                    for _ in range(args.per_round):
                        t0 = time.perf_counter()
                        nap(owner)
                        samples[n].append(time.perf_counter() - t0)
                    cpu[n] += server.cpu_seconds() - cpu_before
            conn.close()
            floor = floor_line(server, clients=1, duration=2.0, reference_rps=None, what="")
    base = percentile(sorted(samples[sizes[0]]), 50)
    rows, ratios = [], {}
    for n in sizes:
        ordered = sorted(samples[n])
        p50 = percentile(ordered, 50)
        ratios[n] = p50 / base
        rows.append(
            [
                f"{n:,}",
                f"{first[n] * 1000:.1f}",
                len(ordered),
                f"{p50 * 1000:.2f}",
                f"{percentile(ordered, 99) * 1000:.2f}",
                f"{ratios[n]:.2f}×",
                f"{cpu[n] * 1000 / len(ordered):.2f}",
            ]
        )
    print()
    headers = ["entries", "first nap ms", "requests", "p50 ms", "p99 ms", f"p50 / p50 at {sizes[0]:,}"]
    headers.append("server CPU ms/req")
    print(table(headers, rows))
    print(floor)
    print()
    largest = sizes[-1]
    state = "levels 1-3 compacted, then entry 0 forgotten" if args.forgotten else "level 1 compacted"
    print(
        f"goal: nap p50 at {largest:,} entries ({state}) within {GOAL}× of {sizes[0]:,}: "
        f"{ratios[largest]:.2f}× — {verdict(ratios[largest] <= GOAL)}"
    )


def forget_first_entry(owner) -> None:
    """`forget` entry 0 through the service, as `POST …/forget {"range": "0"}` does: its level-1, 2 and 3
    summaries are invalidated and the store's generation moves on."""
    from memories import tree
    from memories.services import forget_range
    from stores.models import Store

    store = Store.objects.get(pk=owner.store)
    forgotten = forget_range(store=store, actor=store.owner, block=tree.Block(0, 1), generation=store.generation)
    print(f"  forgot entry 0: {len(forgotten.invalidated)} summaries invalidated")


if __name__ == "__main__":
    main()
