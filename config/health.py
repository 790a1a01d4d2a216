"""Liveness and readiness probes."""

from __future__ import annotations

from django.db import connection
from django.db.utils import DatabaseError
from django.http import JsonResponse

from config.errors import error_response
from config.views import allow_methods


@allow_methods("GET")
def healthz(request):
    """200 while the process is up; touches nothing else."""
    return JsonResponse({"status": "ok"})


@allow_methods("GET")
def readyz(request):
    """200 when the database answers `SELECT 1`; 503 `overloaded_error` otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        connection.close_if_unusable_or_obsolete()
        return error_response(request, status=503, type="overloaded_error", message="The database is unreachable.")
    return JsonResponse({"status": "ready"})
