"""gunicorn settings for `bin/serve` (environment overrides in the README's configuration table).

The stack (chosen by measurement, docs/decisions.md "Serving stack"): gunicorn's asyncio ASGI worker,
subclassed in `config.server` (header timeout, JSON protocol errors), running the ASGI front of
`config.asgi` (probes, body timeout, the MCP mount) which runs Django on `WEB_THREADS` threads.
"""

import multiprocessing
import os

workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "config.server.Worker")
# One listening socket per worker (SO_REUSEPORT): the kernel spreads new connections evenly over the
# workers, instead of the busiest-awake worker accepting most of them; a killed worker's socket leaves
# the group, so its share goes to the others until it is replaced.
reuse_port = True
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
