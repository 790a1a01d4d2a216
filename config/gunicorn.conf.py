"""gunicorn settings (all overridable by environment variables, see the README)."""

import multiprocessing
import os

workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 + 1))
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread" if threads > 1 else "sync")
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
errorlog = "-"
# The app checks the body ceiling itself (413); gunicorn only bounds header sizes.
limit_request_line = 8190
