"""gunicorn settings (all overridable by environment variables, see the README)."""

import multiprocessing
import os

# gthread with a few threads per worker: keep-alive API clients would each pin a whole sync worker
# (bench/RESULTS.md measured sync workers several times slower under concurrent keep-alive clients).
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread" if threads > 1 else "sync")
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
errorlog = "-"
# The app checks the body ceiling itself (413); gunicorn only bounds header sizes.
limit_request_line = 8190
