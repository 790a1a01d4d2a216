"""Liveness and readiness probes (SPEC §2 "Faults are not bugs").

Under the server (`config.asgi`) the front answers both without waiting for a Django thread:
`/healthz` from the event loop, `/readyz` by running `database_ready` on a thread of its own for at
most `READY_BUDGET` seconds. The Django views below answer the same bodies for plain WSGI servers and
the test client.
"""

from __future__ import annotations

import concurrent.futures

from django.db import connection
from django.http import JsonResponse

from config.database import request_deadline
from config.errors import error_response, retry_after_headers
from config.views import allow_methods

LIVE_BODY = {"status": "ok"}
READY_BODY = {"status": "ready"}
NOT_READY_MESSAGE = "The database is unreachable or did not answer in time."
READY_BUDGET = 1.5  # seconds; /readyz answers within 2 s whatever the database does


def database_ready() -> bool:
    """Run ``SELECT 1`` on this thread's connection, cut after `READY_BUDGET` seconds; True when it answered.

    Never raises for a database fault. The connection is closed after every check, so each check also
    proves that a new connection can be made (and no idle connection outlives it).
    """
    try:
        with request_deadline(READY_BUDGET), connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        return False
    finally:
        connection.close()
    return True


# One thread does every readiness check of a process: a check stuck on a frozen database delays the next
# ones (they time out and answer 503) instead of piling up threads.
_checker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="readyz")


def check() -> concurrent.futures.Future:
    """Start `database_ready` on the checker thread; the future's result is its bool."""
    return _checker.submit(database_ready)


def ready_within(seconds: float = READY_BUDGET) -> bool:
    """`database_ready` on the checker thread, waiting at most `seconds`; False on timeout."""
    future = check()
    try:
        return future.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        return False


def not_ready_response(request) -> JsonResponse:
    """The 503 `/readyz` answers while the database is not ready."""
    return error_response(
        request, status=503, type="overloaded_error", message=NOT_READY_MESSAGE, headers=retry_after_headers()
    )


@allow_methods("GET")
def healthz(request):
    """200 while the process is up; touches nothing else (never the database)."""
    return JsonResponse(LIVE_BODY)


@allow_methods("GET")
def readyz(request):
    """200 when the database answers `SELECT 1` within `READY_BUDGET`; 503 `overloaded_error` otherwise."""
    if ready_within():
        return JsonResponse(READY_BODY)
    return not_ready_response(request)
