"""Fast lanes: a few hot API routes answered without Django's middleware chain, URL resolver and DRF's
dispatch (issue 17; numbers in bench/RESULTS.md, reasons in docs/performance.md "Fast lanes").

A lane stands in for one method of one DRF view on one route, for the plain case only, and runs that
view's own code in `APIView.dispatch`'s order: the request side of every API middleware (the hostile-input
screening, the host check, …), the view's authentication classes (as DRF's `Request._authenticate` runs
them), the view's `check_permissions`, **the view's method itself** (`NoteView.post`, …) given a request
object that offers what a DRF `Request` offers (the body parsed on first use by the project's parser), and
for anything raised there the view's own `handle_exception` — DRF's 401 header or 403, the project's
exception handler, its logging — then DRF's `Response.render` with the project's renderer, the view's
default headers (``Allow``), the response side of every API middleware, the request id and Django's
request log. What it leaves out is the machinery between them: Django's handler and middleware chain, the
URL resolver, DRF's `Request` wrapper, content negotiation and `finalize_response`. Errors are therefore
rendered by the same code as with the lanes off; `tests/foundation/test_fastlane*.py` compare the bytes.

A lane *declines* — Django answers the request from the environ as it came, and nothing was written — when
the request is not the plain case:

- its shape (`_plain`): a JSON body (``Content-Type: application/json``, or with ``charset=utf-8``, a
  ``Content-Length`` within `MAX_REQUEST_BYTES`) and no query string for POST; no body for GET; no
  ``Transfer-Encoding``; no ``Accept`` other than ``*/*`` / ``application/json``; an ``Authorization``
  header; a path matching the lane's pattern (ASCII only);
- a middleware's request side answering or raising (an HTTPS redirect, a disallowed host or user agent, a
  hostile query, a Content-Type Django cannot take), or a ``format`` query parameter (DRF negotiates it
  before it authenticates);
- no authenticator taking the credential (an anonymous request), or a GET lane's view reading the body.

A lane never runs a view method twice: whatever the method raises, after or before its write, is answered
by `handle_exception`, as the view's dispatch would; an exception out of that or out of the render is
answered as Django's handler answers it (the API middleware's `process_exception` — a database fault is a
503 — else the URLconf's handler500 and Django's request log). A GET lane's method must write nothing
(wake, zoom and recall are reads; the authentication's touch of a token's last use is idempotent).

`settings.API_FAST_LANES` lists the lanes (dotted paths of `Lane` objects; ``FAST_LANES=false`` in the
environment empties it). A lane whose example route does not resolve to its view, a view with throttles,
versioning, its own negotiation, other parser or renderer classes or its own dispatch steps, or an API
middleware this module cannot run turns the lanes off at first use with one warning: nothing is ever
skipped silently.
"""

from __future__ import annotations

import functools
import io
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core import signals
from django.core.handlers.exception import response_for_exception
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpResponse
from django.urls import resolve
from django.utils.deprecation import MiddlewareMixin
from django.utils.log import log_response
from django.utils.module_loading import import_string
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings

from config.errors import new_request_id
from config.fields import UUID_PATTERN
from config.middleware import ScreenedRequest
from config.parsers import StrictJSONParser
from config.renderers import JSONRenderer

logger = logging.getLogger("memories.fastlane")
_RENDERER = JSONRenderer()  # stateless; DRF makes one per request

UUID_GROUP = UUID_PATTERN.removeprefix("^").removesuffix("$")  # the canonical (lowercase) UUID, unanchored
JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"})
ACCEPTED = frozenset({None, "*/*", "application/json"})  # an empty Accept matches no renderer: DRF's 406

# API middleware that is not a MiddlewareMixin: the request id, which a lane sets itself (the same two
# lines) and whose process_exception it runs, and the hostile-input screening, whose request side a lane
# runs (`screen`). Every other entry must be a MiddlewareMixin with at most process_request /
# process_response, which the lanes run.
_OWN = {"config.middleware.RequestIdMiddleware"}
_EXCEPTION_SIDES = {"config.middleware.RequestIdMiddleware"}  # their process_exception runs as Django runs it
_REQUEST_SIDES = {"config.middleware.HostileInputMiddleware": "screen"}


class _RequestSide:
    """A middleware whose request side is one method (`_REQUEST_SIDES`), as a process_request hook."""

    def __init__(self, screen):
        self.process_request = screen


@dataclass(frozen=True)
class Lane:
    """One route answered by a fast lane.

    method: ``"POST"`` (a JSON body, no query) or ``"GET"`` (no body, a query), which names the view method
    run; a GET lane's method must write nothing but what authentication writes (a token's last use).
    pattern: a regular expression matched in full against PATH_INFO; its named groups are the view's keyword
    arguments (ASCII only).
    view: the DRF APIView (its authenticators, permissions, method, headers and OpenAPI description).
    example: keyword arguments for the route check, which must resolve through Django's URLconf to `view`
    with the same arguments.
    """

    method: str
    pattern: str
    view: type
    example: dict[str, str]
    compiled: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "compiled", re.compile(self.pattern))


class LaneRequest:
    """The request a view method gets from a lane: what DRF's `Request` offers, built without it.

    `data` parses the JSON body on first use, as DRF does (a ParseError is the view's 400); a GET lane
    declines when its view reads `data`. `query_params` is the query (`QueryDict`, DRF's too); `user`,
    `auth`, `authenticators` and `successful_authenticator` are set by the authentication;
    `parser_context` is ``{"view", "args", "kwargs", "request", "encoding"}`` as DRF sets it. Every other
    attribute is the Django request's (`_request`), as DRF's `Request.__getattr__` does.
    """

    def __init__(self, django_request: WSGIRequest, view: Any, kwargs: dict[str, str], body: bytes):
        self._request = django_request
        self._body = body
        self.query_params = django_request.GET
        self.parser_context = {
            "view": view,
            "args": (),
            "kwargs": kwargs,
            "request": self,
            "encoding": django_request.encoding or settings.DEFAULT_CHARSET,
        }
        self._user = self._auth = None
        self.authenticators = ()
        self.successful_authenticator = None

    @property
    def user(self) -> Any:
        return self._user

    @user.setter
    def user(self, value: Any) -> None:  # as DRF's setter: the Django request carries it too (logs, handlers)
        self._user = self._request.user = value

    @property
    def auth(self) -> Any:
        return self._auth

    @auth.setter
    def auth(self, value: Any) -> None:
        self._auth = self._request.auth = value

    @functools.cached_property
    def data(self) -> Any:
        if self._request.method == "GET":
            raise _Decline
        media_type = self._request.META.get("CONTENT_TYPE")
        return StrictJSONParser().parse(io.BytesIO(self._body), media_type, self.parser_context)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


@dataclass(frozen=True)
class _Loaded:
    lanes: tuple[Lane, ...]
    exception_hooks: tuple[Any, ...]  # API middleware with process_exception, innermost first (Django's order)
    hooks: tuple[Any, ...]  # the API middleware the lanes run (process_request / process_response), outermost first


@functools.cache
def _load(paths: tuple[str, ...], middleware: tuple[str, ...]) -> _Loaded:
    """The lanes of `paths` and the middleware hooks; no lanes when any check fails (logged once)."""
    try:
        hooks = tuple(_middleware_hooks(middleware))
        exception_hooks = tuple(
            import_string(path)(lambda request: None) for path in reversed(middleware) if path in _EXCEPTION_SIDES
        )
        lanes = tuple(import_string(path) for path in paths)
        for lane in lanes:
            _check(lane)
        return _Loaded(lanes, exception_hooks, hooks)
    except Exception as exc:
        logger.warning("fast lanes are off: %s", exc)
        return _Loaded((), (), ())


def _middleware_hooks(middleware: tuple[str, ...]) -> list[Any]:
    hooks = []
    for path in middleware:
        if path in _OWN:
            continue
        cls = import_string(path)
        if path in _REQUEST_SIDES:
            hooks.append(_RequestSide(getattr(cls(lambda request: None), _REQUEST_SIDES[path])))
            continue
        if not issubclass(cls, MiddlewareMixin) or any(
            getattr(cls, name, None) is not getattr(MiddlewareMixin, name, None)
            for name in ("__call__", "process_view", "process_exception", "process_template_response")
        ):
            raise ValueError(f"API middleware {path} does more than process_request/process_response")
        hooks.append(cls(lambda request: None))
    return hooks


# APIView's machinery a lane stands in for: a view overriding any of it does something a lane would skip.
_DISPATCH = (
    "setup", "dispatch", "initialize_request", "initial", "perform_authentication", "check_permissions",
    "check_throttles", "determine_version", "perform_content_negotiation", "finalize_response",
    "handle_exception", "get_exception_handler", "get_renderer_context", "get_parser_context",
)  # fmt: skip


def _check(lane: Lane) -> None:
    from rest_framework.views import APIView  # imports the authentication classes: not before Django is set up

    view = lane.view
    if lane.method not in ("POST", "GET"):
        raise ValueError(f"a lane answers POST or GET, not {lane.method}")
    if view.throttle_classes or view.versioning_class is not None:
        raise ValueError(f"{view.__name__} has throttles or versioning, which a lane does not run")
    if list(view.renderer_classes) != [JSONRenderer] or list(view.parser_classes) != [StrictJSONParser]:
        raise ValueError(f"{view.__name__} renders or parses with other classes than the lane's")
    if view.content_negotiation_class is not APIView.content_negotiation_class:
        raise ValueError(f"{view.__name__} has its own content negotiation")
    overridden = [name for name in _DISPATCH if getattr(view, name) is not getattr(APIView, name)]
    if overridden:
        raise ValueError(f"{view.__name__} overrides {', '.join(overridden)}, which a lane does not run")
    if not hasattr(view, lane.method.lower()):
        raise ValueError(f"{view.__name__} has no {lane.method} method")
    example_path = lane.pattern
    for name, value in lane.example.items():
        example_path = re.sub(rf"\(\?P<{name}>[^)]*\)", value, example_path)
    if not lane.compiled.fullmatch(example_path):
        raise ValueError(f"the example path {example_path} does not match the lane's pattern")
    found = resolve(example_path)
    if getattr(found.func, "view_class", None) is not view or found.kwargs != lane.example:
        raise ValueError(f"{example_path} does not resolve to {view.__name__} with {lane.example}")


def active() -> tuple[Lane, ...]:
    """The lanes in use under the current settings (empty when they are off or a check failed)."""
    return _load(tuple(settings.API_FAST_LANES), tuple(settings.API_MIDDLEWARE)).lanes


def _plain(environ: dict[str, Any], method: str) -> bool:
    """The plain case's shape: a JSON body and no query for POST; no body (any query, which the hostile-input
    screening then checks) for GET."""
    length = environ.get("CONTENT_LENGTH", "")
    if not (
        "HTTP_TRANSFER_ENCODING" not in environ
        and environ.get("HTTP_ACCEPT") in ACCEPTED
        and "HTTP_AUTHORIZATION" in environ
    ):
        return False
    if method == "GET":
        return length in ("", "0")
    return (
        not environ.get("QUERY_STRING")
        and environ.get("CONTENT_TYPE") in JSON_TYPES
        and length.isascii()
        and length.isdigit()  # ASCII digits only ("²".isdigit() is true)
        and 0 < int(length) <= settings.MAX_REQUEST_BYTES
    )


class _Decline(Exception):
    """Raised inside a lane: this request goes to Django."""


def answer(environ: dict[str, Any]) -> HttpResponse | None:
    """The response of the lane for `environ` (a WSGI environ whose body is complete in ``wsgi.input``),
    or None when no lane takes it; Django then answers from the environ as it came (body unread).

    The response is what Django's handler would hand back: closing it sends `request_finished`. An
    exception out of the view's `handle_exception` or the render is answered as Django's handler answers it
    (`_exception_response`); only BaseExceptions that are not Exceptions propagate.
    """
    loaded = _load(tuple(settings.API_FAST_LANES), tuple(settings.API_MIDDLEWARE))
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    for lane in loaded.lanes:
        matched = lane.compiled.fullmatch(path) if lane.method == method else None
        if matched is not None:
            break
    else:
        return None
    if not _plain(environ, method):
        return None
    body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])) if method == "POST" else b""
    environ["wsgi.input"] = io.BytesIO(body)  # unread, for Django if the lane declines
    signals.request_started.send(sender=WSGIRequest, environ=environ)
    try:
        # A copy: WSGIRequest and the middleware write to META (SCRIPT_NAME, PATH_INFO, …); a declined request
        # reaches Django as it came. The handlers' request class: a Content-Type it cannot take is the
        # hostile-input screening's 400 (the lane declines; Django answers it).
        request = ScreenedRequest({**environ, "wsgi.input": io.BytesIO(body)})
        request.request_id = new_request_id()
        try:
            response = _run(lane, matched.groupdict(), request, body, loaded.hooks)
        except _Decline:
            raise
        except Exception as exc:  # out of handle_exception or the render: what Django's handler does with it
            response = _exception_response(request, exc, loaded.exception_hooks)
        for hook in reversed(loaded.hooks):
            if hasattr(hook, "process_response"):
                response = hook.process_response(request, response)
    except _Decline:
        signals.request_finished.send(sender=WSGIRequest)  # started and finished stay paired
        return None
    except BaseException:
        signals.request_finished.send(sender=WSGIRequest)  # the front answers 500; Django's housekeeping runs
        raise
    response["Request-Id"] = request.request_id
    response._resource_closers.append(request.close)
    return response


def _run(lane: Lane, kwargs: dict[str, str], request: WSGIRequest, body: bytes, hooks) -> HttpResponse:
    for hook in hooks:
        try:
            refused = hasattr(hook, "process_request") and hook.process_request(request) is not None
        except Exception as exc:  # DisallowedHost, PermissionDenied (DISALLOWED_USER_AGENTS), …: Django's to render
            raise _Decline from exc
        if refused:
            raise _Decline
    view = lane.view()  # as `View.as_view()` and `APIView.dispatch` set it up
    view.setup(request, **kwargs)
    view.format_kwarg = None
    view.headers = view.default_response_headers
    view.request = lane_request = LaneRequest(request, view, kwargs, body)
    try:  # APIView.dispatch's order: authenticate, check permissions, run the method
        _authenticate(lane_request, view)
        view.check_permissions(lane_request)
        response = getattr(view, lane.method.lower())(lane_request, **kwargs)
    except _Decline:
        raise
    except Exception as exc:  # DRF's own: the 401 header or 403, the project's exception handler, its logging
        response = view.handle_exception(exc)
    if isinstance(response, Response):  # what finalize_response and Django's handler do with it
        response.accepted_renderer = _RENDERER
        response.accepted_media_type = "application/json"
        response.renderer_context = view.get_renderer_context()
    for name, value in view.headers.items():
        response[name] = value
    if isinstance(response, Response):
        response.render()
    if response.status_code >= 400:  # Django's request log, as its handler writes it
        log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
    return response


def _exception_response(request: WSGIRequest, exc: Exception, hooks) -> HttpResponse:
    """Django's answer to an exception out of a view or its render: the API middleware's
    `process_exception` (RequestIdMiddleware: a database fault is a 503), else `response_for_exception`
    (the URLconf's handler500, the ``django.request`` log with the traceback, `got_request_exception`)."""
    for hook in hooks:
        response = hook.process_exception(request, exc)
        if response is not None:
            return response
    return response_for_exception(request, exc)


def _authenticate(request: LaneRequest, view: Any) -> None:
    """DRF's `Request._authenticate` over the view's authenticators: the first that returns a user wins; an
    authenticator's APIException leaves the request anonymous and propagates (the view's 401). Declines when
    none authenticates (an anonymous request is Django's to answer)."""
    request.authenticators = view.get_authenticators()
    for authenticator in request.authenticators:
        try:
            found = authenticator.authenticate(request)
        except exceptions.APIException:
            request.user, request.auth = api_settings.UNAUTHENTICATED_USER(), None  # DRF's _not_authenticated
            raise
        if found is not None:
            request.user, request.auth = found
            request.successful_authenticator = authenticator
            return
    raise _Decline
