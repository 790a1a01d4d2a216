"""Helpers for the few plain Django views outside DRF (health probes, the guide)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.decorators.csrf import csrf_exempt

from config.errors import error_response


def allow_methods(*methods: str) -> Callable:
    """Decorate a plain view: CSRF-exempt (it takes no form posts) and other methods get a 405 error object.

    `methods` are upper-case names; HEAD is allowed wherever GET is.
    """
    allowed = {m.upper() for m in methods}
    if "GET" in allowed:
        allowed.add("HEAD")

    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.method not in allowed:
                return error_response(
                    request,
                    status=405,
                    type="invalid_request_error",
                    message=f'Method "{request.method}" not allowed.',
                    headers={"Allow": ", ".join(sorted(allowed))},
                )
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def csrf_failure(request, reason: str = ""):
    """CSRF_FAILURE_VIEW: the back office keeps Django's page; everything else gets the error object (403)."""
    if request.path.startswith("/backoffice/"):
        return django_csrf_failure(request, reason=reason)
    return error_response(request, status=403, type="permission_error", message="CSRF verification failed.")
