"""Benchmark deleting stores of growing size through the API (SPEC §4 delete; docs/decisions.md "Deleting a
store of any size").

    .venv/bin/python bench/delete.py [--sizes 1000,1000000,5000000] [--keep]

Each store is bulk-loaded with COPY as a fully compacted log (N entries and N - 1 summaries), then deleted
with `DELETE /api/v1/memories/{id}?expected_entry_count=…&generation=…` through gunicorn, as `bin/serve`
runs it (its default budgets: `DB_STATEMENT_TIMEOUT` 5 s, `REQUEST_TIMEOUT` 9.5 s, `STORE_PURGE_SECONDS`
2 s). Prints per size the answer and its latency, whether the store is gone for its owner afterwards, the
rows the request left to purge, and how long `manage.py purge_stores` then took for them.
Goal: every deletion answered 200 within the request budget, the store 404 right after it, and no row left
once `purge_stores` has run (before the two-step deletion: one transaction, 5.3 s at 3·10⁶ entries, and a
503 once it outgrew the 7 s request deadline).
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ROOT,
    ServerConfig,
    bench_database,
    django_setup,
    gunicorn,
    load_log,
    machine_line,
    make_owners,
    pg_params,
    settle,
    table,
    verdict,
)
from bench.wake import body

TABLES = ("memories_entry", "memories_summary", "versions_memory", "versions_version")


def rows_left(store_id: str) -> int:
    import psycopg

    with psycopg.connect(**pg_params(), autocommit=True) as pg:
        return sum(
            pg.execute(f"SELECT count(*) FROM {name} WHERE store_id = %s", (store_id,)).fetchone()[0] for name in TABLES
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,1000000,5000000")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    django_setup()
    sizes = [int(n) for n in args.sizes.split(",")]

    with bench_database("delete", keep=args.keep) as db_name:
        print(machine_line())
        owners = make_owners(len(sizes), "bench-delete")
        for owner, n in zip(owners, sizes, strict=True):
            started = time.monotonic()
            load_log(owner, n, body=body)
            print(f"  loaded {n:,} entries + {n - 1:,} summaries in {time.monotonic() - started:.1f} s")
        settle()
        rows, ok = [], True
        with gunicorn(db_name, ServerConfig()) as server:
            for owner, n in zip(owners, sizes, strict=True):
                # a connection per store: the purge below outlasts the server's keep-alive (5 s)
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                conn.connect()
                query = f"expected_entry_count={n}&generation=1"
                t0 = time.perf_counter()
                conn.request("DELETE", f"/api/v1/memories/{owner.store}?{query}", headers=owner.auth)
                response = conn.getresponse()
                response.read()
                latency = time.perf_counter() - t0
                conn.request("GET", f"/api/v1/memories/{owner.store}", headers=owner.auth)
                after = conn.getresponse()
                after.read()
                conn.close()
                left = rows_left(owner.store)
                t0 = time.perf_counter()
                purged = subprocess.run(
                    [sys.executable, "manage.py", "purge_stores"],
                    cwd=ROOT,
                    check=False,
                    capture_output=True,
                    env={**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "BENCH_DB_NAME": db_name},
                )
                # a checkout from before the two-step deletion has no purge_stores: "n/a"
                purge = f"{time.perf_counter() - t0:.1f}" if purged.returncode == 0 else "n/a"
                final = rows_left(owner.store)
                ok = ok and response.status == 200 and after.status == 404 and final == 0
                rows.append(
                    [
                        f"{n:,}",
                        f"{2 * n - 1:,}",
                        response.status,
                        f"{latency * 1000:.0f}",
                        after.status,
                        f"{left:,}",
                        purge,
                        f"{final:,}",
                    ]
                )
    print()
    headers = ["entries", "rows", "DELETE status", "DELETE ms", "GET after", "rows left"]
    headers += ["purge_stores s", "rows at end"]
    print(table(headers, rows))
    print()
    print(
        f"goal: every store up to {sizes[-1]:,} entries deleted (200, then 404) and purged to zero rows — {verdict(ok)}"
    )


if __name__ == "__main__":
    main()
