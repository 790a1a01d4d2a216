"""The one place an exception becomes SPEC §2's error object, for REST, plain Django views and MCP tools.

Shape: ``{"type": "error", "error": {"type", "message", "details"?}, "request_id": "req_…"}``.
Every 409 and 412 also carries ``x-should-retry: false`` so the anthropic SDK does not retry it (SPEC §5).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponse, JsonResponse
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


# Faults of the database rather than of the request: unreachable, restarting, cancelled by a budget
# (statement_timeout, lock_timeout), cut by the request deadline (config.database), a deadlock or
# serialization failure. All are worth retrying: 503 overloaded_error with Retry-After (SPEC §2).
DATABASE_FAULTS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
DATABASE_FAULT_MESSAGE = "The database is unavailable or did not answer in time; retry after a moment."


def is_database_fault(exc: BaseException) -> bool:
    """True when `exc` (or the exception it was raised from) is a database fault (`DATABASE_FAULTS`)."""
    return isinstance(exc, DATABASE_FAULTS) or isinstance(exc.__cause__, DATABASE_FAULTS)


def security_headers() -> dict[str, str]:
    """The headers Django's SecurityMiddleware and XFrameOptionsMiddleware put on every response they see,
    from the same settings, for the answers written before Django runs: the ASGI front's (probes, 408, 413,
    503, 500) and the HTTP layer's (400, 414, 431; `config.server`). HSTS is left out: SecurityMiddleware
    sends it only on HTTPS requests, which terminate at the proxy in front of us."""
    headers = {}
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers["X-Content-Type-Options"] = "nosniff"
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        headers["Referrer-Policy"] = policy if isinstance(policy, str) else ",".join(policy)
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers["Cross-Origin-Opener-Policy"] = settings.SECURE_CROSS_ORIGIN_OPENER_POLICY
    headers["X-Frame-Options"] = settings.X_FRAME_OPTIONS
    return headers


def retry_after_headers() -> dict[str, str]:
    """The ``Retry-After`` header (whole seconds, `settings.RETRY_AFTER`) of every 503."""
    return {"Retry-After": str(max(1, int(settings.RETRY_AFTER)))}


def log_fault(request: Any, exc: BaseException | None, status: int = 503) -> None:
    """Log a fault as ONE WARNING line without a traceback: method, path, request id and the cause."""
    django_request = getattr(request, "_request", request)
    cause = ""
    if exc is not None:
        first_line = (str(exc).strip().splitlines() or [""])[0][:200]
        cause = f": {type(exc).__name__}: {first_line}" if first_line else f": {type(exc).__name__}"
    logger.warning(
        "%s %s %s %s%s",
        status,
        getattr(django_request, "method", "-"),
        getattr(django_request, "path", "-"),
        request_id_of(request),
        cause,
    )


def fault_response(request: Any, exc: BaseException | None) -> HttpResponse:
    """Render a database fault: 503 overloaded_error + Retry-After, logged once (Django's request log,
    which would add a traceback, is told the response has been logged). A back-office page gets it as an
    HTML page (`back_office_page`), the API and everything else as SPEC §2's JSON error."""
    log_fault(request, exc)
    if is_back_office(request):
        response = back_office_page(request, status=503, headers=retry_after_headers())
    else:
        response = error_response(
            request, status=503, type="overloaded_error", message=DATABASE_FAULT_MESSAGE, headers=retry_after_headers()
        )
    response._has_been_logged = True  # django.utils.log.log_response: do not log it again
    return response


def is_back_office(request: Any) -> bool:
    """True for a request to the back office (the admin site's pages, whose users read HTML)."""
    return is_back_office_path(getattr(getattr(request, "_request", request), "path", "") or "")


def is_back_office_path(path: str) -> bool:
    """True for a path of the back office (`admin:index` and below; `path` as Django's ``request.path``)."""
    from django.urls import reverse

    return path.startswith(reverse("admin:index"))


def back_office_html(
    *, status: int, request_id: str, retry_after: str | None = None, message: str = "", outcome_unknown: bool = False
) -> str:
    """The back office's error page (`templates/backoffice/error.html`) as text: 503 says the database is
    busy and that nothing was saved (every back-office change and list action runs in one transaction,
    rolled back by the fault), 500 that an internal error occurred, 400, 403, 404, 408 and 413 what they
    mean, with `message` (the API's error message for the same refusal) when one is given; each shows the
    request id. `outcome_unknown`: a 503 the ASGI front sent because Django did not answer in time, whose
    change may still have been saved — the page says so instead of "nothing was saved". Rendered without
    touching the database (also by the front, `config.asgi`)."""
    from django.template.loader import render_to_string

    context = {
        "status": status,
        "request_id": request_id,
        "retry_after": retry_after,
        "message": message,
        "outcome_unknown": outcome_unknown,
    }
    return render_to_string("backoffice/error.html", context)


def back_office_page(
    request: Any, *, status: int, headers: dict[str, str] | None = None, message: str = ""
) -> HttpResponse:
    """`back_office_html` as a Django response with `Request-Id` and `headers` (Retry-After, say)."""
    rid = request_id_of(request)
    retry_after = (headers or {}).get("Retry-After")
    body = back_office_html(status=status, request_id=rid, retry_after=retry_after, message=message)
    response = HttpResponse(body, status=status, content_type="text/html; charset=utf-8")
    response["Request-Id"] = rid
    for key, value in (headers or {}).items():
        response[key] = value
    return response


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
) -> HttpResponse:
    """Render one error as a JsonResponse with `Request-Id` (and `x-should-retry: false` on 409 and 412).

    On a back-office path (the screening middleware refuses those too) the same refusal is the back
    office's HTML page, with `message` and `headers`, for the people who read it."""
    if is_back_office(request):
        return back_office_page(request, status=status, headers=headers, message=message)
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
            if key in ("non_field_errors",):
                name = prefix
            elif isinstance(key, int):  # DRF's ListField keys a child's errors by its index: `scopes[0]`
                name = f"{prefix.removesuffix('[]')}[{key}]"  # a query's `statuses[]=…`: `statuses[0]`
            elif prefix and str(key).startswith('"'):  # a key `config.text.field_name` wrote as JSON: `a["x: y"]`
                name = f"{prefix}[{key}]"
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
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


# A 400 names at most this many problems, each field path and message cut to these many characters: a body
# of 10,000 unknown keys (650 KB) was answered with every name twice (3.1 MB), one 900 KB key with 1.8 MB
# (found by a breaker). An answer never grows with what the client sent beyond these bounds.
MAX_LISTED_PROBLEMS = 20
MAX_FIELD_CHARS = 100
MAX_PROBLEM_CHARS = 500


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` - 1 characters and "…" when it is longer than `limit` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def field_problems(problems: dict[str, str], **details: Any) -> InvalidRequest:
    """A service's 400 naming several fields (``{field_path: problem}``) in the shape and bounds of a
    serializer's refusal (`validation_summary`): the message ``field: problem; …`` and `details.fields`, plus
    `details`."""
    message, fields = validation_summary({field: [problem] for field, problem in problems.items()})
    return InvalidRequest(message, details={**details, "fields": fields})


def validation_summary(detail: Any) -> tuple[str, dict[str, str]]:
    """(message, details.fields) of a DRF ValidationError: every problem in the message, in order, up to
    `MAX_LISTED_PROBLEMS` (then how many more); a field with two problems keeps both in `fields`."""
    problems = _flatten_validation(detail)
    shown = [(cut(field, MAX_FIELD_CHARS), cut(msg, MAX_PROBLEM_CHARS)) for field, msg in problems]
    shown = shown[:MAX_LISTED_PROBLEMS]
    message = "; ".join(f"{field}: {msg}" if field else msg for field, msg in shown) or "Invalid request."
    if len(problems) > len(shown):
        message += f"; and {len(problems) - len(shown)} more"
    fields: dict[str, str] = {}
    for field, msg in shown:
        if field:
            fields[field] = f"{fields[field]}; {msg}" if field in fields else msg
    return message, fields


# A 400 whose message starts with a request field's name (`cursor: …`, `pattern: …`, a nested one such as
# `precondition.content_sha256: …` or `resources[0].access: …`): the form `validation_summary` writes.
_NAMED_FIELD = re.compile(r"([a-z][a-z0-9_]*(?:\.[A-Za-z0-9_]+|\[[0-9]+\])*): (.+)", re.DOTALL)


def _with_named_field(exc: DomainError) -> dict[str, Any]:
    """`exc.details`, plus ``fields: {name: problem}`` when `exc` is a 400 whose message names one request field
    (``"cursor: invalid or tampered cursor; …"``): a refusal a service raises after the serializer passed
    (a cursor's signature, a pattern RE2 rejects) has the same shape as the serializer's own, so a client reads
    `details.fields` whichever layer refused (a tester found `details.fields` for one malformed cursor and
    none for another)."""
    match = _NAMED_FIELD.fullmatch(exc.message) if exc.status == 400 else None
    if match is None or "fields" in exc.details:
        return exc.details
    return {**exc.details, "fields": {match.group(1): match.group(2)}}


def describe(exc: BaseException) -> tuple[int, str, str, dict, dict, dict]:
    """Map any exception to ``(status, type, message, details, extra, headers)``.

    Used by the REST handler, the plain-Django handlers and the MCP tools (`config.mcp_tools`), so every
    surface reports the same error for the same cause. Unknown exceptions become a 500 `api_error`
    whose message never contains the exception text or a traceback.
    """
    if isinstance(exc, DomainError):
        headers = retry_after_headers() if exc.status == 503 else {}
        return exc.status, exc.type, exc.message, _with_named_field(exc), exc.extra, headers
    if is_database_fault(exc):
        return 503, "overloaded_error", DATABASE_FAULT_MESSAGE, {}, {}, retry_after_headers()
    if isinstance(exc, drf.ValidationError):
        message, fields = validation_summary(exc.detail)
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
        return 400, "invalid_request_error", bad_request_message(exc), {}, {}, {}
    if isinstance(exc, drf.APIException):
        return exc.status_code, "invalid_request_error", str(exc.detail), {}, {}, {}
    return 500, "api_error", "An internal error occurred. Quote the request id when reporting it.", {}, {}, {}


def exception_handler(exc: BaseException, context: dict) -> JsonResponse:
    """DRF's EXCEPTION_HANDLER: render every exception (ours, DRF's, unexpected) as SPEC §2's shape."""
    request = context.get("request")
    status, type_, message, details, extra, headers = describe(exc)
    if status == 503:
        log_fault(request, exc)
    elif status >= 500:
        logger.exception("Unhandled error in %s", context.get("view").__class__.__name__, exc_info=exc)
    response = error_response(
        request, status=status, type=type_, message=message, details=details, extra=extra, headers=headers
    )
    if status >= 500:
        response._has_been_logged = True  # logged above; django.request would log it a second time
    return response


class OneLineWarning(logging.Filter):
    """A logging filter for a client's refusals that Django logs as ERRORs with their traceback (the
    `django.security` loggers: a Host outside ALLOWED_HOSTS, a suspicious file name, …): each becomes one
    WARNING line — the client's doing, not a fault of ours, and any client could flood the log with them.
    Changes the record in place; use it on a logger whose records no other handler sees (propagate False)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.exc_info = record.exc_text = record.stack_info = None
        return True


WRONG_HOST_MESSAGE = "The Host header names a host this server does not serve (the server's ALLOWED_HOSTS)."


def bad_request_message(exc: BaseException | None) -> str:
    """The message of a 400 for Django's refusal `exc`: a Host not in ALLOWED_HOSTS says so (a deployment
    behind a proxy that forgot the setting got "Malformed request." and no hint — a tester; Django's
    security log names the host), anything else "Malformed request."."""
    return WRONG_HOST_MESSAGE if isinstance(exc, DisallowedHost) else "Malformed request."


# Plain-Django handlers (URLconf handler400/403/404/500), for requests that never reach a DRF view.
def handler400(request, exception=None):
    if is_back_office(request):
        wrong_host = isinstance(exception, DisallowedHost)
        return back_office_page(request, status=400, message=WRONG_HOST_MESSAGE if wrong_host else "")
    return error_response(request, status=400, type="invalid_request_error", message=bad_request_message(exception))


def handler403(request, exception=None):
    if is_back_office(request):
        return back_office_page(request, status=403)
    return error_response(request, status=403, type="permission_error", message="Forbidden.")


def handler404(request, exception=None):
    """Django's 404 for a path no route takes. A path that ends in "/" and names a route without it says so:
    the API's routes take no trailing slash, and a bare "Not found." left a tester guessing (routes are
    public: it tells nothing about any store)."""
    if is_back_office(request):
        return back_office_page(request, status=404)
    message = "Not found."
    path = request.path_info
    if len(path) > 1 and path.endswith("/"):
        from django.urls import Resolver404, resolve

        try:
            resolve(path.rstrip("/"))
        except Resolver404:
            pass
        else:
            message = f"Not found: routes take no trailing slash (this one is {path.rstrip('/')})."
    return error_response(request, status=404, type="not_found_error", message=message)


def handler500(request):
    """Django's last resort (an exception outside DRF views, e.g. in a middleware or an admin view).

    A database fault becomes the 503 of `fault_response` (one WARNING line, no traceback); anything else
    stays a 500 `api_error` whose traceback Django's request log records.
    """
    exc = sys.exc_info()[1]
    if exc is not None and is_database_fault(exc):
        return fault_response(request, exc)
    if is_back_office(request):
        return back_office_page(request, status=500)
    return error_response(
        request,
        status=500,
        type="api_error",
        message="An internal error occurred. Quote the request id when reporting it.",
    )
