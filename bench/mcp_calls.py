"""Benchmark `/mcp` tool calls against the REST call they run, on the mounts we considered (issue 14).

    .venv/bin/python bench/mcp_calls.py [--duration 2] [--clients 1,4] [--mounts view-front,view-gthread,sdk-asgi]

Mounts (each gunicorn with config/gunicorn.conf.py, 2 workers; ours is the first):
- ``view-front``: `/mcp` as a Django view driving the SDK's stateless transport per request, under the
  serving stack `bin/serve` runs (config/server.py's ASGI worker + config.asgi's front, Django on threads);
- ``view-gthread``: the same view under gunicorn's plain gthread workers (config.wsgi);
- ``sdk-asgi``: the SDK's session manager mounted beside Django by a path-dispatching ASGI app
  (bench/mcp_composition.py): no Django middleware on `/mcp`, one manager per process.

Rows per mount and client count: REST `GET /api/v1/memories/{id}` and `POST …/note` (the baselines), the
MCP tools/call of the same operations at protocol 2026-07-28 (single exchange) and of get_memories at
2025-06-18 (the handshake era's stateless POST). Every answer is checked (status, `isError` false).
Besides client-side latency, each row reports the server's CPU time per request (master + workers, from
/proc), which a busy shared machine disturbs far less than wall-clock latency.
"Across workers": after the load, 40 calls on fresh connections must all succeed and the access log
must show both workers answering. The machine is shared: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
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
    measured_load,
    table,
)

MOUNTS = {
    "view-front": ServerConfig(workers=2),  # what bin/serve runs: the view on the ASGI front's thread pool
    "view-gthread": ServerConfig(workers=2, threads=4, stack="gthread"),
    "sdk-asgi": ServerConfig(workers=2, threads=1, stack="gunicorn-asgi+mcp-composition"),
}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
}


def rpc_body(i: int, tool: str, arguments: dict, version: str) -> bytes:
    params: dict = {"name": tool, "arguments": arguments}
    if version == "2026-07-28":
        params["_meta"] = MODERN_META
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}).encode()


def rpc_headers(owner, tool: str, version: str) -> dict:
    headers = {
        **owner.auth,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": version,
    }
    if version == "2026-07-28":
        headers.update({"Mcp-Method": "tools/call", "Mcp-Name": tool})
    return headers


class McpCall(HttpJob):
    """tools/call of `tool` at protocol `version` on the owners' stores (round robin)."""

    def __init__(self, port: int, owners, tool: str, version: str, tag: str):
        super().__init__(port)
        self.owners, self.tool, self.version, self.tag = owners, tool, version, tag

    def call(self, i: int) -> None:
        owner = self.owners[i % len(self.owners)]
        arguments = {"id": owner.store}
        if self.tool == "note_memories":
            arguments.update(body_md=f"bench note {self.tag} {i}", client_nonce=f"{self.tag}-{i}")
        data = self.request(
            "POST",
            "/mcp",
            rpc_body(i, self.tool, arguments, self.version),
            rpc_headers(owner, self.tool, self.version),
            200,
        )
        result = json.loads(data)["result"]
        if result["isError"]:
            raise RuntimeError(result["content"][0]["text"][:300])


class RestCall(HttpJob):
    """The REST request the tool performs."""

    def __init__(self, port: int, owners, operation: str, tag: str):
        super().__init__(port)
        self.owners, self.operation, self.tag = owners, operation, tag

    def call(self, i: int) -> None:
        owner = self.owners[i % len(self.owners)]
        if self.operation == "get":
            self.request("GET", f"/api/v1/memories/{owner.store}", None, owner.auth, 200)
        else:
            body = json.dumps({"body_md": f"bench note {self.tag} {i}", "client_nonce": f"{self.tag}-{i}"}).encode()
            headers = {**owner.auth, "Content-Type": "application/json"}
            self.request("POST", f"/api/v1/memories/{owner.store}/note", body, headers, 201)


def across_workers(port: int, owner, access_log: Path, calls: int = 40) -> str:
    """`calls` tool calls, each on a new connection: all must succeed; which worker pids answered them."""
    import http.client

    for i in range(calls):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {**rpc_headers(owner, "get_memories", "2026-07-28"), "Connection": "close"}
        conn.request("POST", "/mcp", rpc_body(i, "get_memories", {"id": owner.store}, "2026-07-28"), headers)
        response = conn.getresponse()
        payload = json.loads(response.read())
        conn.close()
        if response.status != 200 or payload["result"]["isError"]:
            raise RuntimeError(f"call {i} failed: {response.status} {payload}")
    pids = set(re.findall(r"^<(\d+)> .*POST /mcp", access_log.read_text(), flags=re.MULTILINE))
    return f"{calls}/{calls} ok, {len(pids)} workers"


def in_process(owner, rounds: int) -> list[list]:
    """Per-call wall time in this one process, no network and no gunicorn: WSGI (Django's test client)
    and ASGI (httpx's ASGITransport) paths interleaved round by round, so background load hits every
    case alike. Returns table rows (median and p90 ms, ratio to the REST call on the same stack)."""
    import asyncio
    import statistics
    import time

    import httpx
    from django.core.asgi import get_asgi_application
    from django.test import Client

    from bench import mcp_composition

    wsgi = Client()
    rest_headers = {"HTTP_AUTHORIZATION": owner.auth["Authorization"]}

    def mcp_wsgi(version: str):
        headers = {
            f"HTTP_{k.upper().replace('-', '_')}": v for k, v in rpc_headers(owner, "get_memories", version).items()
        }
        headers.pop("HTTP_CONTENT_TYPE")
        body = rpc_body(1, "get_memories", {"id": owner.store}, version)
        response = wsgi.post("/mcp", data=body, content_type="application/json", **headers)
        assert response.status_code == 200 and not response.json()["result"]["isError"], response.content

    def rest_wsgi():
        assert wsgi.get(f"/api/v1/memories/{owner.store}", **rest_headers).status_code == 200

    samples: dict[str, list[float]] = {}

    def timed(label: str, fn) -> None:
        start = time.perf_counter()
        fn()
        samples.setdefault(label, []).append(time.perf_counter() - start)

    wsgi_cases = [
        ("WSGI · REST GET /memories/{id}", rest_wsgi),
        ("WSGI · /mcp view · get_memories @2026-07-28", lambda: mcp_wsgi("2026-07-28")),
        ("WSGI · /mcp view · get_memories @2025-06-18", lambda: mcp_wsgi("2025-06-18")),
    ]

    async def asgi_rounds() -> None:
        django_app = get_asgi_application()
        async with mcp_composition.running() as composed:
            clients = {
                "django": httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=django_app), base_url="http://testserver"
                ),
                "sdk": httpx.AsyncClient(transport=httpx.ASGITransport(app=composed), base_url="http://testserver"),
            }
            body = rpc_body(1, "get_memories", {"id": owner.store}, "2026-07-28")
            headers = rpc_headers(owner, "get_memories", "2026-07-28")

            async def rest(client):
                assert (await client.get(f"/api/v1/memories/{owner.store}", headers=owner.auth)).status_code == 200

            async def mcp(client):
                response = await client.post("/mcp", content=body, headers=headers)
                assert response.status_code == 200 and not response.json()["result"]["isError"], response.text

            cases = [
                ("ASGI · REST GET /memories/{id}", lambda: rest(clients["django"])),
                ("ASGI · /mcp view · get_memories @2026-07-28", lambda: mcp(clients["django"])),
                ("ASGI · SDK mount · get_memories @2026-07-28", lambda: mcp(clients["sdk"])),
            ]
            for index in range(rounds):
                for label, fn in cases:
                    start = time.perf_counter()
                    await fn()
                    if index >= 10:  # warm-up
                        samples.setdefault(label, []).append(time.perf_counter() - start)
            for client in clients.values():
                await client.aclose()

    for index in range(rounds):
        for label, fn in wsgi_cases:
            if index < 10:
                fn()
            else:
                timed(label, fn)
    asyncio.run(asgi_rounds())
    rows = []
    for label, values in samples.items():
        stack = label.split(" · ")[0]
        base = statistics.median(samples[f"{stack} · REST GET /memories/{{id}}"])
        ordered = sorted(values)
        median = statistics.median(ordered)
        rows.append(
            [label, f"{median * 1000:.2f}", f"{ordered[int(len(ordered) * 0.9)] * 1000:.2f}", f"{median / base:.2f}×"]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per row (default 2)")
    parser.add_argument("--clients", default="1,4", help="comma-separated client counts (default 1,4)")
    parser.add_argument("--mounts", default=",".join(MOUNTS), help="comma-separated subset of: " + ", ".join(MOUNTS))
    parser.add_argument("--keep", action="store_true", help="keep the throw-away database")
    parser.add_argument("--rounds", type=int, default=300, help="in-process rounds per case (default 300)")
    parser.add_argument("--server-log", default="/dev/stderr", help="gunicorn's error log (default: stderr)")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    mounts = [m for m in args.mounts.split(",") if m]
    django_setup()
    with bench_database("mcp", keep=args.keep) as db_name:
        print(machine_line())
        owners = make_owners(16, "mcp-bench")
        print(
            table(
                ["in process (one call at a time)", "median ms", "p90 ms", "vs REST, same stack"],
                in_process(owners[0], args.rounds),
            )
        )
        print()
        rows, checks = [], []
        for mount in mounts:
            config = MOUNTS[mount]
            with tempfile.TemporaryDirectory() as folder:
                access_log = Path(folder) / "access.log"
                log_args = (
                    "--access-logfile", str(access_log), "--access-logformat", "%(p)s %(r)s %(s)s",
                    "--error-logfile", args.server_log, "--capture-output",
                )  # fmt: skip
                with gunicorn(db_name, config, extra_args=log_args) as server:
                    for n in clients:
                        cases = [
                            ("REST GET /memories/{id}", lambda k, n=n: RestCall(server.port, owners, "get", k)),
                            (
                                "MCP get_memories @2026-07-28",
                                lambda k: McpCall(server.port, owners, "get_memories", "2026-07-28", k),
                            ),
                            (
                                "MCP get_memories @2025-06-18",
                                lambda k: McpCall(server.port, owners, "get_memories", "2025-06-18", k),
                            ),
                            ("REST POST …/note", lambda k: RestCall(server.port, owners, "note", k)),
                            (
                                "MCP note_memories @2026-07-28",
                                lambda k: McpCall(server.port, owners, "note_memories", "2026-07-28", k),
                            ),
                        ]
                        base = {}
                        for label, make in cases:
                            tag = f"{mount}-{n}-{len(rows)}"
                            # Server CPU per request over the measured window: steadier than wall clock
                            # on a shared machine.
                            jobs = [make(f"{tag}-{c}") for c in range(n)]
                            result, cpu_ms = measured_load(server, jobs, duration=args.duration)
                            kind = "note" if "note" in label else "get"
                            base.setdefault(kind, (result, cpu_ms))
                            ratio = result.p50_ms / base[kind][0].p50_ms
                            cpu_ratio = cpu_ms / base[kind][1]
                            rows.append(
                                [
                                    mount,
                                    n,
                                    label,
                                    f"{result.rps:.0f}",
                                    f"{result.p50_ms:.2f}",
                                    f"{result.p99_ms:.2f}",
                                    f"{ratio:.2f}×",
                                    f"{cpu_ms:.2f}",
                                    f"{cpu_ratio:.2f}×",
                                ]
                            )
                    checks.append([mount, config.label, across_workers(server.port, owners[0], access_log)])
        headers = ["mount", "clients", "request", "req/s", "p50 ms", "p99 ms", "p50 vs REST", "server CPU ms/req"]
        print(table([*headers, "CPU vs REST"], rows))
        print()
        print(table(["mount", "server", "across workers (fresh connection per call)"], checks))
        _close_other_sessions()


def _close_other_sessions() -> None:
    """End the connections the in-process ASGI run left in asgiref's worker threads, so the DROP works."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


if __name__ == "__main__":
    main()
