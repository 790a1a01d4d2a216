"""gunicorn settings for `bin/serve` (environment overrides in the README's configuration table).

The stack (chosen by measurement, docs/decisions.md "Serving stack"): gunicorn's asyncio ASGI worker,
subclassed in `config.server` (header timeout, JSON protocol errors), running the ASGI front of
`config.asgi` (probes, body timeout, the MCP mount) which runs Django on `WEB_THREADS` threads.
"""

import gc
import multiprocessing
import os
import sys

from config.server import MAX_WORKERS, cpu_affinity_mode, web_concurrency, worker_cpu, workers_from_command_line

# One worker per CPU the server may run on (a cpuset, `taskset` or a container's CPU set), not per CPU of
# the machine. `on_starting` reads WEB_CONCURRENCY again once gunicorn has applied `--env`, and refuses a
# bad value; here a bad one only must not stop gunicorn from reaching that readable refusal.
_ALLOWED_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else multiprocessing.cpu_count()
try:
    workers = web_concurrency(os.environ, _ALLOWED_CPUS)
except ValueError:
    workers = _ALLOWED_CPUS
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "config.server.Worker")
# One listening socket, made by the master and shared by the workers: every idle worker's event loop is
# woken by a new connection and the first to accept takes it, so connections go to whichever worker is
# free. SO_REUSEPORT (one socket per worker, `reuse_port = True`) hashes each connection to a worker
# instead, idle or not: one worker did ≥ 70 % of 4 keep-alive clients' work in 8 runs of 40, against 6 of
# 90 with the shared socket (bench/RESULTS.md, 2026-12-03); that worker's GIL then set the rate while the
# other idled. A killed worker simply stops accepting; the others take its share until it is replaced.
reuse_port = False
# Connections per worker the event loop holds (idle and slow ones cost a socket, not a thread).
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "1000"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))  # a worker silent this long is restarted
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "10"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))  # seconds an idle kept-alive connection stays open
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
errorlog = "-"
# Request-line and header limits (SPEC §2): past them gunicorn answers 414 / 431 with the JSON error
# object (config.server). The app checks the body ceiling itself (413).
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190
asgi_lifespan = "on"
# Workers fork from a master that has already loaded Django, so a replaced worker (killed, restarted
# after `timeout`) serves again within a fraction of a second.
preload_app = True
# gunicorn's runtime-control socket defaults to one path per user ($HOME/.gunicorn/gunicorn.ctl), which
# several servers on one machine (tests, benchmarks, worktrees) would fight over; nothing here uses it.
control_socket_disable = True


def _settle_workers(server) -> None:
    """Set the number of workers: `--workers` (on the command line or in GUNICORN_CMD_ARGS, as gunicorn
    parsed it) wins; otherwise `WEB_CONCURRENCY` as the environment has it now, `--env WEB_CONCURRENCY=…`
    included, else one worker per allowed CPU. Raises ValueError for a count that is not 1 to 256."""
    argv = server.cfg.get_cmd_args_from_env() + sys.argv[1:]
    if workers_from_command_line(server.cfg.parser(), argv) is None:
        count = web_concurrency(os.environ, _ALLOWED_CPUS)
        server.cfg.set("workers", count)  # what a reload spawns, too
        server.num_workers = count
    elif not 1 <= server.num_workers <= MAX_WORKERS:
        raise ValueError(f"--workers must be 1 to {MAX_WORKERS}; got {server.num_workers}")


def on_starting(server):
    """In the master, after gunicorn has applied `--env` and before it listens or forks: settle the number
    of workers (`_settle_workers`) and refuse bad settings (gunicorn prints the RuntimeError's message and
    exits 1): a bad `WEB_CONCURRENCY` or `--workers` stops the server here instead of starting a master
    with no worker, and so does a bad `WEB_CPU_AFFINITY`.
    """
    try:
        cpu_affinity_mode()
        _settle_workers(server)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None


def on_reload(server):
    """On SIGHUP, after gunicorn has re-read this file and applied `--env` again: settle the number of
    workers the same way (the file alone reads the environment without `--env`, which gunicorn takes out
    while reloading). A value that became bad is logged and the current workers are kept: a reload never
    stops a serving master."""
    try:
        cpu_affinity_mode()
    except ValueError as exc:  # pre_fork then starts the workers unpinned
        server.log.error("Reload: %s; workers start unpinned", exc)
    try:
        _settle_workers(server)
    except ValueError as exc:
        server.log.error("Reload: %s; keeping %s workers", exc, len(server.WORKERS))
        server.cfg.set("workers", len(server.WORKERS))
        server.num_workers = len(server.WORKERS)


def pre_fork(server, worker):
    """In the master, just before it forks a worker: move every object the preloaded application made (Django,
    the URLconf, every view and serializer: ~170,000 tracked objects) into the collector's permanent
    generation (`gc.freeze`). The worker's full collections then never walk them again — one took 125 ms
    of CPU, a pause for every request on that worker, about every 3,000 notes (bench/RESULTS.md) — and
    the pages holding them stay shared with the master instead of being copied when a collection
    touches them. Objects are only frozen, never freed: they live as long as the process anyway.

    Also chooses the CPU the worker will be pinned to (with `WEB_CPU_AFFINITY=pin`, opt-in, when there are
    at least as many workers as allowed CPUs): the allowed CPU the fewest live workers hold, so workers
    stay spread as evenly as they can after any replacement (`config.server.worker_cpu`).
    """
    gc.freeze()
    taken = [getattr(live, "memories_cpu", None) for live in server.WORKERS.values() if live is not worker]
    try:
        mode = cpu_affinity_mode()
    except ValueError as exc:  # bad since start (a reload's --env): never stop a serving master over it
        server.log.error("%s; this worker is not pinned", exc)
        mode = "off"
    pin = mode == "pin" and hasattr(os, "sched_setaffinity")  # Linux; elsewhere nothing to pin
    worker.memories_cpu = worker_cpu(os.sched_getaffinity(0), taken, server.num_workers) if pin else None


def post_fork(server, worker):
    """In the new worker, before it starts any thread: pin it to the CPU `pre_fork` chose. Every thread
    it starts later (the event loop's, the Django threads) inherits the affinity, so the hand-offs between
    them — a request to a Django thread, its answer back to the loop, the GIL — wake a thread on the same
    CPU instead of another one: on the 2-core VM a cross-CPU wake is an inter-processor interrupt (a VM
    exit) and a third of a note's server CPU went to the scheduler (docs/decisions.md, "One CPU per
    worker, opt-in"). The GIL lets one of a worker's threads run Python at a time anyway."""
    cpu = getattr(worker, "memories_cpu", None)
    if cpu is None:
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:  # the CPU went offline since the master read its set: serve unpinned, never crash-loop
        server.log.warning("Worker %s not pinned to CPU %s: %s", worker.pid, cpu, exc)
        return
    server.log.info("Worker %s pinned to CPU %s (WEB_CPU_AFFINITY=pin)", worker.pid, cpu)
