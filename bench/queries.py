"""Count the SQL queries of each endpoint at two store sizes (issue 9: constant in store size).

    .venv/bin/python bench/queries.py [--small 1024] [--large 131072] [--keep]

Two stores are bulk-loaded (COPY: entries plus every summary; and file memories by raw SQL), then each
endpoint is called in-process through Django's test client with `CaptureQueriesContext`, once warmed
up and once measured, on both stores. Prints the table; a row whose counts differ between the sizes
is marked. Auth (token lookup) and the store access check are one query each and are included.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_database, django_setup, load_log, make_owners, pg_params, settle, table
from bench.files import RAW_CREATE, content, sha


def body(seq: int) -> str:
    return f"Entry {seq}: rotated the staging keys; CVE-2026-{1000 + seq % 9000} patched in build {seq}."


def load_files(owner, count: int) -> None:
    import psycopg

    with psycopg.connect(**pg_params(), autocommit=True) as pg:
        for i in range(count):
            text = content("q", i)
            pg.execute(
                RAW_CREATE,
                {
                    "store": owner.store,
                    "version": uuid.uuid4(),
                    "memory": uuid.uuid4(),
                    "path": f"/docs/{i % 10}/file-{i}.md",
                    "content": text,
                    "sha": sha(text),
                    "size": len(text.encode()),
                    "actor": json.dumps({"type": "api_actor", "api_key_id": str(owner.token_id)}),
                    "token": owner.token_id,
                },
            )


def measure(owner) -> dict[str, int]:
    """Query counts of every endpoint for `owner`'s store (each call warmed up once, then measured)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Bearer {owner.secret}")
    log = f"/api/v1/memories/{owner.store}"
    files = f"/api/v1/memory_stores/{owner.store}"
    counts: dict[str, int] = {}
    state: dict = {}

    def count(label: str, method: str, path: str, data=None, expect=(200, 201), warm: bool = True):
        def call():
            if method == "GET":
                return client.get(path, data or {})
            return client.post(path, json.dumps(data), content_type="application/json")

        if warm:
            call()
        with CaptureQueriesContext(connection) as queries:
            response = call()
        assert response.status_code in expect, (label, response.status_code, response.content[:300])
        counts[label] = len(queries)
        return response.json()

    count("GET /memories (list)", "GET", "/api/v1/memories")
    count("GET /memories/{id}", "GET", log)
    n = 0

    def note():
        nonlocal n
        n += 1
        return {"body_md": f"bench note {n}", "client_nonce": f"q-{n}"}

    count("POST …/note", "POST", f"{log}/note", note(), warm=False)
    count("POST …/note (nonce replay)", "POST", f"{log}/note", {"body_md": f"bench note {n}", "client_nonce": f"q-{n}"})
    client.post(f"{log}/note", json.dumps(note()), content_type="application/json")  # completes a pair for nap
    count("GET …/wake?budget=32", "GET", f"{log}/wake", {"budget": 32})
    count("GET …/wake?budget=128", "GET", f"{log}/wake", {"budget": 128})
    nap = count("GET …/nap (claims a job)", "GET", f"{log}/nap", warm=False)
    count("GET …/nap (its own claim again)", "GET", f"{log}/nap", warm=False)
    count("GET …/nap?limit=16", "GET", f"{log}/nap", {"limit": 16}, warm=False)
    job = nap["data"]["job"]
    submit = {
        "range": job["range"],
        "generation": job["generation"],
        "source_digest": job["source_digest"],
        "summary_md": "Stand-in summary for the query-count bench.",
        "model": "bench-stand-in",
    }
    count("POST …/compact", "POST", f"{log}/compact", submit, warm=False)
    count("POST …/compact (idempotent)", "POST", f"{log}/compact", submit)
    count("GET …/zoom?range=0-63", "GET", f"{log}/zoom", {"range": "0-63"})
    count("GET …/zoom?range=5", "GET", f"{log}/zoom", {"range": "5"})
    page = count("GET …/recall (first page)", "GET", f"{log}/recall", {"pattern": r"CVE-\d+-\d+"})
    state["cursor"] = page["meta"]["next_cursor"]
    count("GET …/recall (next page)", "GET", f"{log}/recall", {"pattern": r"CVE-\d+-\d+", "cursor": state["cursor"]})
    made = count(
        "POST memory_stores/{id}/memories",
        "POST",
        f"{files}/memories",
        {"path": "/q/new.md", "content": "v1"},
        warm=False,
    )
    memory = made["id"]
    count("GET …/memories (list, depth 1)", "GET", f"{files}/memories", {"depth": 1})
    count("GET …/memories (list, view=full)", "GET", f"{files}/memories", {"view": "full"})
    count("GET …/memories/{mid}", "GET", f"{files}/memories/{memory}")
    count(
        "POST …/memories/{mid} (precondition)",
        "POST",
        f"{files}/memories/{memory}",
        {"content": "v2", "precondition": {"type": "content_sha256", "content_sha256": sha("v1")}},
        warm=False,
    )
    count("GET …/memory_versions", "GET", f"{files}/memory_versions")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=1024)
    parser.add_argument("--large", type=int, default=131_072)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    django_setup()
    with bench_database("queries", keep=args.keep):
        small, large = make_owners(2, "bench-queries")
        load_log(small, args.small, body=body)
        load_log(large, args.large, body=body)
        load_files(small, 20)
        load_files(large, 1000)
        settle()
        at_small, at_large = measure(small), measure(large)
    rows = []
    for label, few in at_small.items():
        many = at_large[label]
        rows.append([label, few, many, "constant" if few == many else "GROWS"])
    print(
        table(
            ["endpoint", f"queries at {args.small:,} entries / 20 files", f"at {args.large:,} / 1,000", "verdict"], rows
        )
    )
    grows = [row[0] for row in rows if row[3] != "constant"]
    print()
    print("goal: query counts constant in store size —", "met" if not grows else f"MISSED ({', '.join(grows)})")


if __name__ == "__main__":
    main()
