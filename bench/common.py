"""Shared machinery of the benchmarks in `bench/` (issue 9): a throw-away database, a gunicorn server on a
free loopback port, a multi-process closed-loop load generator, and table printing.

Database: like `bench/import_0041.py`, each benchmark works in its own database `bench_<name>` created
(with every migration) on the configured server — the embedded PostgreSQL of the checkout unless
DATABASE_URL is set — and dropped at the end (`--keep` keeps it). Development data is never touched.

Load model (the same for HTTP and raw SQL, so ratios compare like with like): one OS process per
client, each with one persistent connection (an `http.client.HTTPConnection` with keep-alive, or one
psycopg connection in autocommit mode), sending one request at a time as fast as answers come back
(a closed loop). All clients start together after a warm-up and run for a fixed wall-clock window;
throughput = completed requests / window, latencies are per request on the client's clock.
"""

from __future__ import annotations

import contextlib
import http.client
import multiprocessing as mp
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def django_setup() -> None:
    """Configure Django for the calling script (settings: `config.settings`)."""
    import django

    django.setup()


@contextlib.contextmanager
def bench_database(name: str, *, keep: bool = False):
    """Create the throw-away database `bench_<name>` (migrated), point Django at it, drop it on exit.

    Yields the database name. Every connection to it (gunicorn, raw psycopg clients) must be closed
    before the block ends, or the DROP fails. Exits with a message, touching nothing, when `bench_<name>`
    already exists (`refuse_existing`).
    """
    from django.conf import settings
    from django.db import connections
    from django.test.utils import setup_databases, teardown_databases

    refuse_existing(f"bench_{name}")
    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = f"bench_{name}"
    old = setup_databases(verbosity=0, interactive=False, keepdb=False)
    try:
        yield connections["default"].settings_dict["NAME"]
    finally:
        connections.close_all()
        if not keep:
            teardown_databases(old, verbosity=0)


def refuse_existing(database: str) -> None:
    """Exit (status 75) when `database` exists on the configured server: another run of the same benchmark
    is using it, or a run kept it (`--keep`) or was killed. Creating it afresh would DROP it under that run
    without a word (a tester read it in the code; `bin/test` guards its databases the same way)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
        taken = cursor.fetchone() is not None
    if taken:
        print(
            f"database {database} already exists on this server: another run of this benchmark is using it, or an "
            f"earlier one kept it (--keep) or was killed. Drop it when no run uses it (dropdb {database}), or point "
            "DATABASE_URL at another server.",
            file=sys.stderr,
        )
        sys.exit(75)


def pg_params() -> dict:
    """psycopg.connect keyword arguments for Django's current default database."""
    from django.db import connection

    s = connection.settings_dict
    params = {"dbname": s["NAME"], "user": s["USER"], "host": s["HOST"] or None, "port": s["PORT"] or None}
    if s["PASSWORD"]:
        params["password"] = s["PASSWORD"]
    return {k: v for k, v in params.items() if v is not None}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ServerConfig:
    """How a benchmark runs the HTTP server: `stack` (a key of `STACKS`), worker processes and threads.

    The default stack is the one `bin/serve` runs; the others are the candidates measured for issue 16
    (`bench/stacks.py`, table in docs/decisions.md).
    """

    workers: int = 2
    threads: int = 8
    stack: str = "gunicorn-asgi+front"

    @property
    def label(self) -> str:
        return f"{self.stack} workers={self.workers} threads={self.threads}"

    def command(self, port: int) -> list[str]:
        """The argv that starts this server on 127.0.0.1:`port` (run with the checkout as cwd)."""
        return STACKS[self.stack](self, port)


def _gunicorn_cmd(app: str, *extra: str):
    def build(config: ServerConfig, port: int) -> list[str]:
        return [
            sys.executable, "-m", "gunicorn", "-c", str(ROOT / "config" / "gunicorn.conf.py"),
            "--bind", f"127.0.0.1:{port}", "--chdir", str(ROOT), *extra, app,
        ]  # fmt: skip

    return build


def _uvicorn_cmd(app: str):
    def build(config: ServerConfig, port: int) -> list[str]:
        return [
            sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(config.workers), "--no-access-log", app,
        ]  # fmt: skip

    return build


def _granian_cmd(interface: str, app: str):
    def build(config: ServerConfig, port: int) -> list[str]:
        threads = ["--blocking-threads", str(config.threads)] if interface == "wsgi" else []
        return [
            sys.executable, "-m", "granian", "--interface", interface, "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(config.workers), *threads, "--no-access-log", app,
        ]  # fmt: skip

    return build


# name -> argv builder. Workers and threads come from WEB_CONCURRENCY / WEB_THREADS (set by gunicorn()).
STACKS = {
    "gunicorn-asgi+front": _gunicorn_cmd("config.asgi:application"),  # what bin/serve runs
    # the same without the fast lanes (config/fastlane.py): every request through Django and DRF
    "gunicorn-asgi+front-no-lanes": _gunicorn_cmd("config.asgi:application", "--env", "FAST_LANES=false"),
    # the same with each worker pinned to a CPU of its own (opt-in; config/gunicorn.conf.py, post_fork)
    "gunicorn-asgi+front-pinned": _gunicorn_cmd("config.asgi:application", "--env", "WEB_CPU_AFFINITY=pin"),
    "gthread": lambda config, port: _gunicorn_cmd(
        "config.wsgi:application", "--worker-class", "gthread", "--threads", str(config.threads)
    )(config, port),  # the stack before issue 16
    "gunicorn-asgi+django-asgi": _gunicorn_cmd("config.asgi:application", "--worker-class", "asgi"),
    "gunicorn-asgi+a2wsgi": _gunicorn_cmd("bench.stacks:a2wsgi_app", "--worker-class", "asgi"),
    "uvicorn+a2wsgi": _uvicorn_cmd("bench.stacks:a2wsgi_app"),
    "granian-wsgi": _granian_cmd("wsgi", "config.wsgi:application"),
    "granian-asgi+a2wsgi": _granian_cmd("asgi", "bench.stacks:a2wsgi_app"),
    # issue 14: the MCP SDK's app composed with Django in a path-dispatching ASGI app (bench/mcp_composition.py)
    "gunicorn-asgi+mcp-composition": _gunicorn_cmd("bench.mcp_composition:application", "--worker-class", "asgi"),
}


@dataclass(frozen=True)
class Server:
    """A running gunicorn: its port and the master's pid (`cpu_seconds()` sums master + workers)."""

    port: int
    pid: int

    def cpu_seconds(self) -> float:
        return process_tree_cpu(self.pid)


def process_tree_cpu(pid: int) -> float:
    """User + system CPU seconds used so far by `pid` and its live children (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    for p in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


@contextlib.contextmanager
def gunicorn(db_name: str, config: ServerConfig = ServerConfig(), extra_args: tuple[str, ...] = ()):
    """Run the server `config` names (by default gunicorn with the project's config file, as `bin/serve`
    does) on a free loopback port against `db_name`; yields a Server.

    The server's log goes to a temporary file, printed if it fails to become ready within 60 s.
    `extra_args` are appended to gunicorn's command line (e.g. an access log).
    """
    port = free_port()
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="bench.settings",
        BENCH_DB_NAME=db_name,
        WEB_CONCURRENCY=str(config.workers),
        WEB_THREADS=str(config.threads),
        GUNICORN_THREADS=str(config.threads),
    )
    env.pop("GUNICORN_ACCESS_LOG", None)
    env.pop("GUNICORN_WORKER_CLASS", None)
    log = tempfile.NamedTemporaryFile("w+", prefix="bench-gunicorn-", suffix=".log", delete=False)  # noqa: SIM115
    cmd = [*config.command(port), *extra_args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"gunicorn did not start:\n{log.read()[-4000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
            except OSError:
                pass
            time.sleep(0.2)
        yield Server(port=port, pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


# --- closed-loop load ---------------------------------------------------------------------------------


class Job:
    """One client's work: `open()` once in the client process, then `call(i)` per request (i = 0, 1, …)."""

    def open(self) -> None:  # pragma: no cover - interface
        pass

    def call(self, i: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass


class HttpJob(Job):
    """Base for HTTP clients: one keep-alive `http.client.HTTPConnection` per client process."""

    def __init__(self, port: int):
        self.port = port
        self.conn = None

    def open(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def request(self, method: str, path: str, body: bytes | None, headers: dict, expect: int) -> bytes:
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != expect:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:500]!r}")
        return data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class PgJob(Job):
    """Base for raw SQL clients: one psycopg connection (autocommit, server-side prepared statements)."""

    def __init__(self, params: dict):
        self.params = params
        self.pg = None

    def open(self) -> None:
        import psycopg

        self.pg = psycopg.connect(**self.params, autocommit=True, prepare_threshold=0)

    def close(self) -> None:
        if self.pg is not None:
            self.pg.close()


@dataclass(frozen=True)
class MachineCpu:
    """Where the machine's CPU went during one measured window, in seconds (Linux /proc).

    server: the server's process tree (master + workers); database: every local `postgres` process
    (live backends and, through the postmaster's reaped-children counters, backends that exited), None
    when PostgreSQL is not on this machine; clients: the load generator's client processes; busy: all
    non-idle CPU of the machine (those three plus everything else); steal: time the hypervisor gave to
    other guests — a quiet machine has next to none; wall: the window's length.
    """

    server: float
    database: float | None
    clients: float
    busy: float
    steal: float
    wall: float
    workers: tuple[float, ...] = ()  # CPU seconds of each server worker process (with few keep-alive
    # clients one worker may get them all, and its GIL sets the rate: config/gunicorn.conf.py, reuse_port)

    def per_request_ms(self, requests: int) -> dict[str, float | None]:
        """Milliseconds of CPU per request for each part, plus "other" (busy minus the three parts)."""
        n = max(requests, 1)
        known = self.server + (self.database or 0.0) + self.clients
        return {
            "server": self.server * 1000 / n,
            "database": None if self.database is None else self.database * 1000 / n,
            "clients": self.clients * 1000 / n,
            "other": max(self.busy - known, 0.0) * 1000 / n,
            "machine": self.busy * 1000 / n,
        }

    @property
    def worker_split(self) -> str:
        """Each worker's share of the workers' CPU, e.g. ``"61/39"`` (per cent); ``""`` without workers."""
        total = sum(self.workers)
        if not self.workers or total <= 0:
            return ""
        return "/".join(f"{100 * w / total:.0f}" for w in self.workers)

    @property
    def steal_share(self) -> float:
        """Steal as a share of the machine's CPU capacity over the window (0.05 = 5 %)."""
        return self.steal / max(self.wall * (os.cpu_count() or 1), 1e-9)


def _proc_cpu(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of `pid` (plus its reaped children's when `reaped`); 0 if it is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    used = int(fields[11]) + int(fields[12])
    if reaped:
        used += int(fields[13]) + int(fields[14])
    return used / tick


def _postgres_cpu() -> float | None:
    """CPU seconds of all local `postgres` processes; the postmaster's count includes exited backends."""
    total, seen = 0.0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            is_postmaster = Path(f"/proc/{parent}/comm").read_text().strip() != "postgres"
        except OSError:
            continue
        seen = True
        total += _proc_cpu(int(entry.name), reaped=is_postmaster)
    return total if seen else None


def _machine_times() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot (/proc/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq) / tick, steal / tick


class MachineMeter:
    """Measures `MachineCpu` over a window: `start(client_pids)`, then `stop()` (see run_load's `meter`)."""

    def __init__(self, server_pid: int | None = None):
        self.server_pid = server_pid

    def _snapshot(self, client_pids) -> tuple:
        busy, steal = _machine_times()
        server = process_tree_cpu(self.server_pid) if self.server_pid else 0.0
        clients = sum(_proc_cpu(pid) for pid in client_pids)
        workers = tuple(_proc_cpu(pid) for pid in self._workers)
        return time.perf_counter(), server, _postgres_cpu(), clients, busy, steal, workers

    def start(self, client_pids) -> None:
        self._pids = list(client_pids)
        self._workers: list[int] = []
        if self.server_pid:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{self.server_pid}/task/{self.server_pid}/children").read_text().split()
                self._workers = sorted(int(c) for c in children)
        self._before = self._snapshot(self._pids)

    def stop(self) -> MachineCpu:
        after = self._snapshot(self._pids)
        before = self._before
        database = None if before[2] is None or after[2] is None else after[2] - before[2]
        return MachineCpu(
            server=after[1] - before[1],
            database=database,
            clients=after[3] - before[3],
            busy=after[4] - before[4],
            steal=after[5] - before[5],
            wall=after[0] - before[0],
            workers=tuple(b - a for a, b in zip(before[6], after[6], strict=True)),
        )


@dataclass(frozen=True)
class LoadResult:
    clients: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    machine: MachineCpu | None = None  # when run_load was given a meter: the window's CPU, by part

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


class HttpHealth(HttpJob):
    """The floor of any request: GET /healthz, answered by the ASGI front itself (the serving stack: HTTP
    parsing and the event loop; no Django, no database)."""

    def call(self, i: int) -> None:
        self.request("GET", "/healthz", None, {}, 200)


def measured_load(server: Server, jobs: list[Job], *, duration: float, warmup: int = 20) -> tuple[LoadResult, float]:
    """`run_load(jobs)` against `server`; returns (result, server CPU milliseconds per request).

    Server CPU is user + system time of gunicorn's master and workers (/proc) over exactly the measured
    window, divided by the requests completed in it; warm-up requests and a worker thread's first-use costs
    (a new database connection, its prepared statements) fall outside it. A busy machine disturbs it far
    less than wall-clock latency. `result.machine` has the rest of the machine's CPU for the window.
    """
    result = run_load(jobs, duration=duration, warmup=warmup, meter=MachineMeter(server.pid))
    return result, result.machine.per_request_ms(result.requests)["server"]


def floor_line(server: Server, *, clients: int, duration: float, reference_rps: float | None, what: str) -> str:
    """Measure the framework floor (GET /healthz, `clients` clients) on `server`; return its report line.

    `reference_rps` (the raw SQL figure of the same run) adds a "= N % of <what>" ratio.
    """
    floor, cpu_ms = measured_load(server, [HttpHealth(server.port) for _ in range(clients)], duration=duration)
    line = (
        f"floor: GET /healthz (no DRF, no database) at {clients} clients: {floor.rps:,.0f} req/s, "
        f"p50 {floor.p50_ms:.2f} ms, {cpu_ms:.2f} ms server CPU/req"
    )
    return line + (f" = {floor.rps / reference_rps:.0%} of {what}" if reference_rps else "")


def _client(job: Job, warmup: int, barrier, start_at, duration: float, out) -> None:
    try:
        job.open()
        for i in range(warmup):
            job.call(-1 - i)
        barrier.wait()  # every client has warmed up
        barrier.wait()  # the parent has set the common start time
        end = start_at.value + duration
        lat = array("d")
        i = 0
        clock = time.perf_counter
        now = clock()
        while now < end:
            job.call(i)
            done = clock()
            lat.append(done - now)
            now = done
            i += 1
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=60)  # the parent has measured the window: its connections still count
        job.close()
        out.put(("ok", lat.tobytes()))
    except BaseException as exc:  # report, never hang the parent
        out.put(("error", repr(exc)))


def run_load(jobs: list[Job], *, duration: float, warmup: int = 20, meter: MachineMeter | None = None) -> LoadResult:
    """Run one client process per job (fork), all together for `duration` seconds; return the totals.

    `meter`, when given, measures the machine's CPU over exactly the measured window (warm-up and
    process start excluded) into `LoadResult.machine`. Raises RuntimeError if any client fails (e.g. an
    unexpected HTTP status).
    """
    from django.db import connections

    connections.close_all()  # never share a socket with forked children
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(jobs) + 1)
    start_at = ctx.Value("d", 0.0)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_client, args=(job, warmup, barrier, start_at, duration, out), daemon=True) for job in jobs
    ]
    for proc in procs:
        proc.start()
    machine = None
    with contextlib.suppress(Exception):  # a broken barrier: the failing client reports its error below
        barrier.wait(timeout=300)  # all warmed up: only now fix the window
        start_at.value = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in every process
        if meter is not None:
            meter.start(proc.pid for proc in procs)
        barrier.wait(timeout=60)
        if meter is not None:
            time.sleep(max(start_at.value + duration - time.perf_counter(), 0.0))
            machine = meter.stop()
        barrier.wait(timeout=duration + 120)  # every client has left its loop; they may now disconnect
    lat = array("d")
    errors = []
    for _ in procs:
        status, payload = out.get(timeout=duration + 120)
        if status == "ok":
            lat.frombytes(payload)
        else:
            errors.append(payload)
    for proc in procs:
        proc.join(timeout=10)
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    ordered = sorted(lat)
    return LoadResult(
        clients=len(jobs),
        requests=len(ordered),
        seconds=duration,
        p50_ms=percentile(ordered, 50) * 1000,
        p99_ms=percentile(ordered, 99) * 1000,
        machine=machine,
    )


# A window in which the hypervisor ran other guests for more than this share of the machine's capacity
# (steal) is not a quiet machine's measurement: `quiet_load` measures it again.
STEAL_LIMIT = 0.05


def quiet_load(make_jobs, *, duration: float, warmup: int = 20, server_pid: int | None, label: str, attempts: int = 3):
    """`run_load(make_jobs(), meter=MachineMeter(server_pid))`, measured again (with fresh jobs from
    `make_jobs`, so nonces and paths stay unique) while the window's steal exceeds `STEAL_LIMIT`, at most
    `attempts` windows in all; returns the window with the least steal.

    Each window set aside is printed (``label``, its rate and steal), so the output shows every window that
    was measured. On a VM, steal in one-client windows went up to 30 % (bench/RESULTS.md, 2026-12-03): the
    hypervisor then delays every wake-up of a halted vCPU, which inflates latency and CPU per request on
    both sides of a ratio, unevenly.
    """
    windows = []
    while len(windows) < attempts and (not windows or windows[-1].machine.steal_share > STEAL_LIMIT):
        windows.append(run_load(make_jobs(), duration=duration, warmup=warmup, meter=MachineMeter(server_pid)))
    kept = min(windows, key=lambda window: window.machine.steal_share)
    for window in windows:
        if window is not kept:
            steal = window.machine.steal_share
            print(f"  set aside: {label}, {window.rps:,.0f} req/s at steal {steal:.0%}", flush=True)
    return kept


def percentile(ordered, pct: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (0 for an empty one)."""
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def time_calls(fn, *, repeat: int, warmup: int = 10) -> list[float]:
    """Call `fn()` `warmup` + `repeat` times in this process; return the sorted latencies (seconds)."""
    for _ in range(warmup):
        fn()
    out = []
    clock = time.perf_counter
    for _ in range(repeat):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return sorted(out)


# --- output -------------------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list]) -> str:
    """A plain Markdown table (pastes straight into RESULTS.md)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


# Columns of `machine_row`, after the label's column.
MACHINE_HEADERS = [
    "clients",
    "raw: PostgreSQL",
    "raw: clients",
    "raw: machine",
    "HTTP: server",
    "HTTP: PostgreSQL",
    "HTTP: clients",
    "HTTP: other",
    "HTTP: machine",
    "steal",
    "HTTP: worker split %",
]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def machine_row(label, clients: int, results: dict) -> list:
    """One row of the machine table for `results` {"raw": LoadResult, "http": LoadResult} measured with a
    meter: `label` (the row's first cell), the clients, then CPU ms per request by part and the steal."""
    raw = results["raw"].machine.per_request_ms(results["raw"].requests)
    web = results["http"].machine.per_request_ms(results["http"].requests)
    steal = max(results["raw"].machine.steal_share, results["http"].machine.steal_share)
    return [
        label,
        clients,
        _ms(raw["database"]),
        _ms(raw["clients"]),
        _ms(raw["machine"]),
        _ms(web["server"]),
        _ms(web["database"]),
        _ms(web["clients"]),
        _ms(web["other"]),
        _ms(web["machine"]),
        f"{steal:.0%}",
        results["http"].machine.worker_split,
    ]


def budget_line(raw_rps: float, web: dict, *, goal: float, unit: str) -> str:
    """What a ratio goal leaves for the server, from one run's own figures (ms of CPU per request).

    raw_rps: the raw SQL rate the goal is a share of; web: `MachineCpu.per_request_ms` of the HTTP side;
    goal: the share (0.5 = 50 %); unit: what a request is, for the text ("notes"). At `goal` × the raw
    rate the machine's cores give `cores / rate` of CPU per request; PostgreSQL, the client processes and
    the rest of the machine took `web["database"] + web["clients"] + web["other"]` of that per HTTP request
    in this run, so the server may use at most what remains. A necessary condition for the goal, not a
    sufficient one: nothing else on the machine gets cheaper when the server does.
    """
    cores = os.cpu_count() or 1
    rate = goal * raw_rps
    per_note = cores * 1000 / rate
    others = (web["database"] or 0.0) + web["clients"] + web["other"]
    left = per_note - others
    return (
        f"budget: {goal:.0%} of the raw rate is {rate:,.0f} {unit}/s; {cores} cores give {per_note:.2f} ms of CPU per "
        f"request at that rate; PostgreSQL, the clients and the rest took {others:.2f} ms per HTTP request here, "
        f"which leaves the server {left:.2f} ms (it used {web['server']:.2f} ms)"
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def machine_line() -> str:
    """One line naming the machine and its load (for the head of every benchmark's output)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
    load = os.getloadavg()
    return (
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, PostgreSQL {pg}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


# --- fixtures -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """A user who owns one private canonical user store, with a full-scope API token."""

    store: str  # store UUID as text
    user: object  # user UUID
    secret: str  # bearer token secret
    token_id: object  # ApiToken id (the `api_actor` of file-memory versions)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


def make_owners(n: int, prefix: str) -> list[Owner]:
    """`n` users `<prefix>-<k>`, each with a private canonical user store and a full-scope token."""
    from accounts.models import User
    from accounts.services import issue_token
    from stores.services import ensure_canonical_store

    out = []
    for k in range(n):
        user = User.objects.create_user(f"{prefix}-{k}", password=None)
        store, _ = ensure_canonical_store(scope="user", user=user, created_by=user)
        issued = issue_token(user=user, name="bench")
        out.append(Owner(store=str(store.pk), user=user.pk, secret=issued.secret, token_id=issued.token.pk))
    return out


def session_attaching(owner: Owner, name: str = "bench"):
    """An environment of `owner`'s user and a session in it attaching the owner's store read_write, made
    through the services the API uses; returns ``(environment, session)``. Setup only."""
    from accounts.models import User
    from sessions import selectors
    from sessions.services import environments, sessions
    from sessions.validation import clean_resources

    user = User.objects.get(pk=owner.user)
    environment = environments.create_environment(owner=user, name=name)
    resources = [{"type": "memory_store", "memory_store_id": owner.store, "access": "read_write"}]
    session = sessions.create_session(
        owner=user,
        environment_id=environment.pk,
        agent={"id": name, "version": 1},
        attach=selectors.stores_to_attach(user, clean_resources(resources)),
        metadata={},
        title=None,
    )
    return environment, session


def load_log(
    owner: Owner, entries: int, *, body, summaries: bool = True, top_level: int | None = None, chunk: int = 50_000
) -> None:
    """Bulk-load `entries` entries (seq 0..N-1, `body(seq)` text) into the owner's store with COPY and,
    when `summaries`, a live summary for every aligned range of size ≥ 2 inside [0, N) — the state of a
    fully compacted log — or only for the levels up to `top_level` (1: every pair of entries, nothing
    above). Sets the store's counters to match. Bypasses the API on purpose (setup only)."""
    import datetime as dt

    import psycopg

    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    step = dt.timedelta(seconds=1)

    def rows_entries():
        for seq in range(entries):
            text = body(seq)
            yield (owner.store, seq, owner.user, text, len(text.encode()), base + seq * step)

    def rows_summaries():
        size = 2
        while size <= entries and (top_level is None or size.bit_length() - 1 <= top_level):
            level = size.bit_length() - 1
            for start in range(0, entries - size + 1, size):
                text = f"Summary of entries {start}-{start + size - 1}: decisions, owners and open questions."
                yield (
                    owner.store,
                    start,
                    start + size - 1,
                    level,
                    text,
                    len(text.encode()),
                    "bench-stand-in",
                    owner.user,
                    "0" * 64,
                    1,
                    base + (start + size - 1) * step,
                )
            size *= 2

    with psycopg.connect(**pg_params(), autocommit=True) as pg, pg.cursor() as cur:
        with cur.copy(
            "COPY memories_entry (store_id, seq, author_id, body_md, size_bytes, created_at) FROM STDIN"
        ) as copy:
            for row in rows_entries():
                copy.write_row(row)
        count = 0
        if summaries:
            with cur.copy(
                'COPY memories_summary (store_id, start, "end", level, summary_md, size_bytes, model, '
                "author_id, source_digest, generation, created_at) FROM STDIN"
            ) as copy:
                for row in rows_summaries():
                    copy.write_row(row)
                    count += 1
        cur.execute(
            "UPDATE stores_store SET entry_count = %s, summary_count = %s WHERE id = %s",
            (entries, count, owner.store),
        )


def settle() -> None:
    """VACUUM ANALYZE the bulk-loaded tables (fresh statistics, visibility map) before timing."""
    import psycopg

    with psycopg.connect(**pg_params(), autocommit=True) as pg:
        for table_name in ("memories_entry", "memories_summary", "stores_store", "versions_memory", "versions_version"):
            pg.execute(f"VACUUM ANALYZE {table_name}")
