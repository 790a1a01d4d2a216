"""CPU per request of one hot endpoint inside this process, without HTTP (issue 17: quick iteration).

    .venv/bin/python bench/inprocess.py note|file_create|file_update|work_file_update|poll|poll_waiting|
                                        recall|wake|zoom|store_get
                                        [--requests 2000] [--profile [--cpu] [--sort cumulative] [--callees RE]]
                                        [--queries] [--callgrind] [--front]

Runs the request through `config.asgi._call_django` — the WSGI application with its middleware, under
the request deadline, exactly what a server thread runs after the ASGI front has read the body — against
a throw-away database, and prints the process CPU and wall time per request. No sockets to a server,
no event loop: the figure is Django + DRF + our code + the psycopg client side. `--front` runs each
request through the ASGI application instead (`config.asgi.application` on a uvloop event loop, with a
`receive` that has the whole body and a `send` that keeps the messages): the front's own code, the hand-off
to a Django thread and back included; gunicorn's protocol and the sockets still left out. `--profile` adds a
cProfile of 1,000 more requests (`--sort`, `--top`; `--cpu`: CPU time, not wall time); `--queries`
prints the SQL of one request.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_database, django_setup, make_owners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    endpoints = [
        "note",
        "file_create",
        "file_update",
        "work_file_update",
        "poll",
        "poll_waiting",
        "recall",
        "wake",
        "zoom",
        "store_get",
    ]
    parser.add_argument("endpoint", choices=endpoints)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="--profile counts CPU time (time.process_time): waits on the database drop out",
    )
    parser.add_argument("--queries", action="store_true")
    parser.add_argument(
        "--callgrind", action="store_true", help="under valgrind's callgrind: instrument only the measured requests"
    )
    parser.add_argument("--sort", default="tottime", help="pstats sort key of --profile (tottime, cumulative)")
    parser.add_argument("--top", type=int, default=40, help="functions printed with --profile")
    parser.add_argument("--callees", help="also print the callees of the functions matching this regex")
    parser.add_argument("--no-lanes", action="store_true", help="turn the fast lanes off (config/fastlane.py)")
    parser.add_argument("--front", action="store_true", help="through the ASGI front on an event loop (see above)")
    args = parser.parse_args()
    django_setup()
    if args.no_lanes:
        from django.conf import settings

        settings.API_FAST_LANES = []
    from django.db import connection, connections
    from django.test.utils import CaptureQueriesContext

    with bench_database(f"inprocess_{os.getpid()}") as _db:  # parallel runs do not collide
        owner = make_owners(1, "inprocess")[0]
        if args.endpoint == "recall":
            from bench.common import load_log, settle
            from bench.recall import body

            load_log(owner, 20_000, body=body, summaries=False)
            settle()
        if args.endpoint in ("wake", "zoom"):  # a fully compacted log, as bench/wake.py loads it
            from bench.common import load_log, settle

            load_log(owner, 20_000, body=lambda seq: f"entry {seq}: " + "w" * 150)
            settle()
        connections.close_all()
        from config import asgi
        from config.database import apply_request_budgets

        apply_request_budgets()
        loop = None
        if args.front:
            import uvloop

            loop = uvloop.new_event_loop()

        secret = owner.secret
        if args.endpoint == "work_file_update":  # the per-work credential of a claimed, heartbeating item
            secret = claimed_work_credential(owner)
        if args.endpoint in ("poll", "poll_waiting"):  # an environment key polling an empty queue
            environment, secret = environment_key(owner)

        def call(method: str, path: str, payload: dict | None = None, query: str = "") -> dict:
            body = json.dumps(payload).encode() if payload is not None else b""
            headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {secret}".encode())]
            if body:
                headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
                     "query_string": query.encode(), "headers": headers}  # fmt: skip
            if loop is None:
                status, _, content = asgi._call_django(asgi._environ(scope, body))
            else:
                status, content = loop.run_until_complete(through_front(asgi.application, scope, body))
            if status >= 300:
                raise RuntimeError(f"{method} {path}: {status} {content[:300]!r}")
            return json.loads(content)

        counter = iter(range(10**9))
        files = f"/api/v1/memory_stores/{owner.store}/memories"
        state = {}

        def note():
            call(
                "POST",
                f"/api/v1/memories/{owner.store}/note",
                {"body_md": "x" * 180, "client_nonce": f"n{next(counter)}"},
            )

        def file_create():
            call("POST", files, {"path": f"/f/{next(counter)}.md", "content": "y" * 1000})

        def poll():  # what an idle worker sends between items: answered `null` at once
            call("GET", f"/api/v1/environments/{environment.pk}/work/poll")

        def poll_waiting():  # the same, watching the empty queue for block_ms (it tries every 100 ms)
            call("GET", f"/api/v1/environments/{environment.pk}/work/poll", query="block_ms=999")

        def work_file_update():  # what the worker's sync and flush send: an update fenced by the lease
            file_update()

        def file_update():
            if "memory" not in state:
                made = call("POST", files, {"path": "/doc.md", "content": "v"})
                state.update(memory=made["id"], sha=made["content_sha256"])
            precondition = {"type": "content_sha256", "content_sha256": state["sha"]}
            made = call(
                "POST", f"{files}/{state['memory']}", {"content": f"v{next(counter)}", "precondition": precondition}
            )
            state["sha"] = made["content_sha256"]

        recall_query = urllib.parse.urlencode({"pattern": r"CVE-\d{4}-\d+", "limit": 100})

        def recall():
            call("GET", f"/api/v1/memories/{owner.store}/recall", query=recall_query)

        def wake():
            call("GET", f"/api/v1/memories/{owner.store}/wake", query="budget=32")

        def zoom():
            call("GET", f"/api/v1/memories/{owner.store}/zoom", query="range=1024-2047")

        def store_get():
            call("GET", f"/api/v1/memory_stores/{owner.store}")

        fn = locals()[args.endpoint]
        if args.endpoint == "file_create":  # the 2,000-memory cap per store
            from django.conf import settings

            settings.MEMORY_STORE_MAX_MEMORIES = 10**9
        for _ in range(min(300, args.requests)):
            fn()
        gc.freeze()  # what the server's master does before it forks (config/gunicorn.conf.py), warm-up included
        if args.queries:
            with CaptureQueriesContext(connection) as captured:
                fn()
            for q in captured.captured_queries:
                print(q["sql"][:300].replace("\n", " "))
            print(f"{len(captured.captured_queries)} statements")
        if args.callgrind:  # count only the measured requests (bench/instructions.py runs this under valgrind)
            subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(args.requests):
            fn()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if args.callgrind:
            subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, capture_output=True)
        per = 1000 / args.requests
        print(f"{args.endpoint}: CPU {cpu * per:.3f} ms/req, wall {wall * per:.3f} ms/req")
        if args.profile:
            profile = cProfile.Profile(time.process_time) if args.cpu else cProfile.Profile()
            profile.enable()
            for _ in range(1000):
                fn()
            profile.disable()
            stats = pstats.Stats(profile).sort_stats(args.sort)
            stats.print_stats(args.top)
            if args.callees:
                stats.print_callees(args.callees)
        if loop is not None:  # the Django threads' connections stay open: end them, or the database cannot go
            loop.close()
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        connections.close_all()


def environment_key(owner):
    """An environment of `owner`'s user and the secret of a key of it: ``(environment, secret)``."""
    from accounts.models import User
    from sessions.services import environments

    environment = environments.create_environment(owner=User.objects.get(pk=owner.user), name="bench")
    return environment, environments.issue_environment_key(environment=environment, name="bench").secret


def claimed_work_credential(owner) -> str:
    """A session attaching `owner.store` read_write, its work item claimed, acknowledged and heartbeaten (a
    lease of 300 s): the item's per-work credential, as the SDK's worker and `memories-worker` hold it."""
    import base64

    from bench.common import session_attaching
    from sessions.services import work

    environment, _ = session_attaching(owner)
    claimed = work.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=0)
    work.acknowledge_work(work=claimed.work)
    work.heartbeat_work(work=claimed.work, desired_ttl_seconds=300)
    payload = base64.urlsafe_b64decode(claimed.secret + "=" * (-len(claimed.secret) % 4))
    return json.loads(payload)["sessions_token"]


async def through_front(application, scope: dict, body: bytes) -> tuple[int, bytes]:
    """Run one request through the ASGI `application`: (status, body). The request body is all there at
    the first `receive`, as a small POST's is when gunicorn calls the application."""
    sent = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await application({**scope, "http_version": "1.1", "scheme": "http"}, receive, send)
    start, *rest = sent
    return start["status"], b"".join(message.get("body", b"") for message in rest)


if __name__ == "__main__":
    main()
