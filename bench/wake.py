"""Benchmark `GET /api/v1/memories/{id}/wake` at 10³, 10⁵ and 10⁶ entries (SPEC §4 wake, issue 9).

    .venv/bin/python bench/wake.py [--sizes 1000,100000,1000000] [--rounds 10] [--per-round 20] [--keep]

Three stores are bulk-loaded with COPY (entries plus a live summary for every aligned range, i.e. fully
compacted: about 2N rows each), then wake is requested through gunicorn by one keep-alive client at
budget 32 and 128. Sizes are interleaved round by round so background load hits them alike. Prints
p50/p99 per size and the ratio of each p50 to the smallest store's. Goal: 10⁶ within 1.2× of 10³.
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


def body(seq: int) -> str:
    return f"Entry {seq}: deployed build {seq * 7919 % 100_000} to staging; tests green, waiting for review."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--budgets", default="32,128")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    django_setup()
    sizes = [int(n) for n in args.sizes.split(",")]
    budgets = [int(b) for b in args.budgets.split(",")]

    with bench_database("wake", keep=args.keep) as db_name:
        print(machine_line())
        owners = make_owners(len(sizes), "bench-wake")
        for owner, n in zip(owners, sizes, strict=True):
            started = time.monotonic()
            load_log(owner, n, body=body)
            print(f"  loaded {n:,} entries + summaries with COPY in {time.monotonic() - started:.1f} s", flush=True)
        settle()
        samples: dict[tuple[int, int], list[float]] = {(n, b): [] for n in sizes for b in budgets}
        cpu: dict[tuple[int, int], float] = {(n, b): 0.0 for n in sizes for b in budgets}
        with gunicorn(db_name, ServerConfig()) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)

            def wake(owner, budget) -> dict:
                conn.request("GET", f"/api/v1/memories/{owner.store}/wake?budget={budget}", headers=owner.auth)
                response = conn.getresponse()
                data = response.read()
                if response.status != 200:
                    raise RuntimeError(f"wake: {response.status} {data[:300]!r}")
                return json.loads(data)["data"]

            for owner, n in zip(owners, sizes, strict=True):  # warm up and check the answer's shape
                for budget in budgets:
                    data = wake(owner, budget)
                    assert data["complete"] and data["entry_count"] == n, data["compaction"]
                    assert all(line["kind"] != "missing" for line in data["lines"])
                    for _ in range(10):
                        wake(owner, budget)
            for _ in range(args.rounds):
                for owner, n in zip(owners, sizes, strict=True):
                    for budget in budgets:
                        cpu_before = server.cpu_seconds()
                        for _ in range(args.per_round):
                            t0 = time.perf_counter()
                            wake(owner, budget)
                            samples[(n, budget)].append(time.perf_counter() - t0)
                        cpu[(n, budget)] += server.cpu_seconds() - cpu_before
            conn.close()
            floor = floor_line(server, clients=1, duration=2.0, reference_rps=None, what="")
    rows, ratios = [], {}
    for budget in budgets:
        base = percentile(sorted(samples[(sizes[0], budget)]), 50)
        for n in sizes:
            ordered = sorted(samples[(n, budget)])
            p50 = percentile(ordered, 50)
            ratios[(n, budget)] = p50 / base
            rows.append(
                [
                    f"{n:,}",
                    budget,
                    len(ordered),
                    f"{p50 * 1000:.2f}",
                    f"{percentile(ordered, 99) * 1000:.2f}",
                    f"{p50 / base:.2f}×",
                    f"{cpu[(n, budget)] * 1000 / len(ordered):.2f}",
                ]
            )
    print()
    headers = ["entries", "budget", "requests", "p50 ms", "p99 ms", f"p50 / p50 at {sizes[0]:,}", "server CPU ms/req"]
    print(table(headers, rows))
    print(floor)
    print()
    largest = sizes[-1]
    worst = max(ratios[(largest, b)] for b in budgets)
    print(f"goal: wake p50 at {largest:,} entries within 1.2× of {sizes[0]:,}: {worst:.2f}× — {verdict(worst <= 1.2)}")


if __name__ == "__main__":
    main()
