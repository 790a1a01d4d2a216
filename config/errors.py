"""The one place an exception becomes SPEC §2's error object, for REST, plain Django views and (later) MCP.

Shape: ``{"type": "error", "error": {"type", "message", "details"?}, "request_id": "req_…"}``.
Every 409 and 412 also carries ``x-should-retry: false`` so the anthropic SDK does not retry it (SPEC §5).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf

logger = logging.getLogger("memories.errors")


class DomainError(Exception):
    """Base of every error our services raise; rendered by `exception_handler`.

    Subclasses set `status`, `type` (SPEC §2 error type), `message` and optionally `reason`
    (becomes ``details.reason``). Instances may override `message` and add `details` (dict) and
    `extra` (keys placed inside ``error`` beside ``message``, as the path-conflict error needs).
    """

    status = 400
    type = "invalid_request_error"
    message = "Invalid request."
    reason: str | None = None

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> None:
        self.message = message or self.message
        if reason is not None:
            self.reason = reason
        self.details = dict(details or {})
        if self.reason and "reason" not in self.details:
            self.details["reason"] = self.reason
        self.extra = dict(extra or {})
        super().__init__(self.message)


class InvalidRequest(DomainError):
    """400 invalid_request_error."""


class AuthenticationError(DomainError):
    status, type, message = 401, "authentication_error", "Authentication required."


class PermissionError_(DomainError):
    status, type, message = 403, "permission_error", "You do not have permission to do that."


class NotFound(DomainError):
    """404 not_found_error; also what an unreadable store raises, so both bodies are identical."""

    status, type, message = 404, "not_found_error", "Not found."


class Conflict(DomainError):
    status, type, message = 409, "conflict_error", "Conflict."


class Gone(DomainError):
    status, type, message = 410, "gone_error", "This endpoint has been retired."


class RequestTooLarge(DomainError):
    status, type = 413, "request_too_large"
    message = "Request body is too large."


class ServiceUnavailable(DomainError):
    status, type, message = 503, "overloaded_error", "Service unavailable."


def new_request_id() -> str:
    """Return a fresh request id, ``req_`` + 24 hex characters."""
    import secrets

    return "req_" + secrets.token_hex(12)


def request_id_of(request: Any) -> str:
    """Return the request id set by RequestIdMiddleware (or a fresh one for requests that bypassed it)."""
    django_request = getattr(request, "_request", request)
    rid = getattr(django_request, "request_id", None)
    if rid is None:
        rid = new_request_id()
        if django_request is not None:
            with contextlib.suppress(AttributeError):  # exotic request objects
                django_request.request_id = rid
    return rid


def error_payload(
    *, status: int, type: str, message: str, request_id: str, details: dict | None = None, extra: dict | None = None
) -> dict[str, Any]:
    """Build the SPEC §2 body. `details` is included only when non-empty."""
    error: dict[str, Any] = {"type": type, "message": message}
    if extra:
        error.update(extra)
    if details:
        error["details"] = details
    return {"type": "error", "error": error, "request_id": request_id}


def error_response(
    request: Any,
    *,
    status: int,
    type: str,
    message: str,
    details: dict | None = None,
    extra: dict | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    """Render one error as a JsonResponse with `Request-Id` (and `x-should-retry: false` on 409 and 412)."""
    rid = request_id_of(request)
    response = JsonResponse(
        error_payload(status=status, type=type, message=message, request_id=rid, details=details, extra=extra),
        status=status,
        json_dumps_params={"ensure_ascii": False},
    )
    response["Request-Id"] = rid
    if status in (409, 412):
        response["x-should-retry"] = "false"
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def _flatten_validation(detail: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Turn DRF's nested ValidationError detail into ``[(field_path, message), …]``."""
    out: list[tuple[str, str]] = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = prefix if key in ("non_field_errors",) else (f"{prefix}.{key}" if prefix else str(key))
            out.extend(_flatten_validation(value, name))
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            for item in detail:
                out.append((prefix, str(item)))
        else:
            for index, item in enumerate(detail):
                out.extend(_flatten_validation(item, f"{prefix}[{index}]" if prefix else f"[{index}]"))
    else:
        out.append((prefix, str(detail)))
    return out


def describe(exc: BaseException) -> tuple[int, str, str, dict, dict, dict]:
    """Map any exception to ``(status, type, message, details, extra, headers)``.

    Used by the REST handler, the plain-Django handlers and (later) the MCP tool wrapper, so every
    surface reports the same error for the same cause. Unknown exceptions become a 500 `api_error`
    whose message never contains the exception text or a traceback.
    """
    if isinstance(exc, DomainError):
        return exc.status, exc.type, exc.message, exc.details, exc.extra, {}
    if isinstance(exc, drf.ValidationError):
        problems = _flatten_validation(exc.detail)
        message = "; ".join(f"{field}: {msg}" if field else msg for field, msg in problems) or "Invalid request."
        fields = {field: msg for field, msg in problems if field}
        return 400, "invalid_request_error", message, ({"fields": fields} if fields else {}), {}, {}
    if isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        return 401, "authentication_error", str(exc.detail), {}, {}, {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, (drf.PermissionDenied, DjangoPermissionDenied)):
        message = str(getattr(exc, "detail", "")) or "You do not have permission to do that."
        return 403, "permission_error", message, {}, {}, {}
    if isinstance(exc, (drf.NotFound, Http404)):
        return 404, "not_found_error", "Not found.", {}, {}, {}
    if isinstance(exc, drf.MethodNotAllowed):
        return 405, "invalid_request_error", str(exc.detail), {}, {}, {}
    if isinstance(exc, drf.NotAcceptable):
        return 406, "invalid_request_error", str(exc.detail), {}, {}, {}
    if isinstance(exc, drf.UnsupportedMediaType):
        return 415, "invalid_request_error", str(exc.detail), {}, {}, {}
    if isinstance(exc, drf.ParseError):
        return 400, "invalid_request_error", str(exc.detail), {}, {}, {}
    if isinstance(exc, drf.Throttled):
        return 429, "rate_limit_error", str(exc.detail), {}, {}, {}
    if isinstance(exc, RequestDataTooBig):
        return 413, "request_too_large", "Request body is too large.", {}, {}, {}
    if isinstance(exc, SuspiciousOperation):
        return 400, "invalid_request_error", "Malformed request.", {}, {}, {}
    if isinstance(exc, drf.APIException):
        return exc.status_code, "invalid_request_error", str(exc.detail), {}, {}, {}
    return 500, "api_error", "An internal error occurred. Quote the request id when reporting it.", {}, {}, {}


def exception_handler(exc: BaseException, context: dict) -> JsonResponse:
    """DRF's EXCEPTION_HANDLER: render every exception (ours, DRF's, unexpected) as SPEC §2's shape."""
    request = context.get("request")
    status, type_, message, details, extra, headers = describe(exc)
    if status >= 500:
        logger.exception("Unhandled error in %s", context.get("view").__class__.__name__, exc_info=exc)
    return error_response(
        request, status=status, type=type_, message=message, details=details, extra=extra, headers=headers
    )


# Plain-Django handlers (URLconf handler400/403/404/500), for requests that never reach a DRF view.
def handler400(request, exception=None):
    return error_response(request, status=400, type="invalid_request_error", message="Malformed request.")


def handler403(request, exception=None):
    return error_response(request, status=403, type="permission_error", message="Forbidden.")


def handler404(request, exception=None):
    return error_response(request, status=404, type="not_found_error", message="Not found.")


def handler500(request):
    return error_response(
        request,
        status=500,
        type="api_error",
        message="An internal error occurred. Quote the request id when reporting it.",
    )
