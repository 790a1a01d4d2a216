"""The ASGI front every server process runs (SPEC §2 "Faults are not bugs"; choice: docs/decisions.md).

gunicorn's asyncio worker (`config.server`) parses HTTP and hands each request to `application`, which

- answers ``GET``/``HEAD /healthz`` on the event loop: no thread, no database, so it answers while every
  Django thread waits on a frozen database;
- answers ``/readyz`` from the readiness thread of `config.health` within `READY_BUDGET` seconds;
- passes requests under a mounted prefix (`mount`, e.g. the MCP server at ``/mcp``) to that ASGI app;
- reads every other request's body on the event loop — a body not complete within `BODY_TIMEOUT`
  seconds gets a 408 — and only then runs Django's WSGI application on a pool of `WEB_THREADS`
  threads, with the whole body in memory: a slow or idle client never holds a thread;
- answers 503 `overloaded_error` with `Retry-After` when Django has not answered `REQUEST_TIMEOUT`
  seconds after the body arrived (a request still queued for a thread is then never run);
- sends a streamed answer (the export) block by block as its thread reads it, each block under the
  request deadline, at the client's pace (`_Stream`, `_pump`; docs/export-import.md).

Error bodies are SPEC §2's object with a `Request-Id` header, like every response Django renders.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote_to_bytes

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.test.utils import override_settings
from django.urls import get_resolver

from config import fastlane, health
from config.database import ANSWER_BY, apply_request_budgets, request_deadline
from config.errors import (
    back_office_html,
    error_payload,
    is_back_office_path,
    new_request_id,
    retry_after_headers,
    security_headers,
)
from config.middleware import ScreenedRequest
from config.server import ABORT_CONNECTION, CLOSE_CONNECTION, stream_cut
from config.threads import STREAM_KEY, KeyedSlots, LifoThreadPool


class _PathDispatch:
    """The WSGI application Django threads run: requests under `API_PATH_PREFIX` go through a handler built
    with `API_MIDDLEWARE` — after the fast lanes (`config.fastlane`) had their chance at a plain POST or GET —,
    everything else (back office, guide, schema) through the full `MIDDLEWARE`. Every request is built as a
    `ScreenedRequest`, so a Content-Type Django cannot take is HostileInputMiddleware's 400, not a 500."""

    def __init__(self):
        self.full = get_wsgi_application()  # sets Django up
        with override_settings(MIDDLEWARE=settings.API_MIDDLEWARE):
            self.api = WSGIHandler()
        self.full.request_class = self.api.request_class = ScreenedRequest

    def __call__(self, environ: dict, start_response: Callable):
        if environ.get("PATH_INFO", "").startswith(settings.API_PATH_PREFIX):
            if environ["REQUEST_METHOD"] in ("POST", "GET"):
                response = fastlane.answer(environ)
                if response is not None:  # what Django's WSGIHandler hands back, done the same way
                    status = f"{response.status_code} {response.reason_phrase}"
                    start_response(status, [*response.items()])
                    return response
            return self.api(environ, start_response)
        return self.full(environ, start_response)


django_application = _PathDispatch()
# Load the URLconf (every view, serializer and the MCP server) and check the fast lanes now, at import: in a
# preloaded server that is the master, before it forks and freezes them (config/gunicorn.conf.py), instead of
# each worker at its first request.
URL_PATTERN_COUNT = len(get_resolver().url_patterns)
fastlane.active()

logger = logging.getLogger("memories.errors")

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

# prefix (no trailing slash) -> (ASGI app, optional lifespan: a factory of async context managers run
# while the process serves). Filled by `mount`.
MOUNTS: dict[str, tuple[ASGIApp, Callable[[], Any] | None]] = {}

# The Django threads: the thread idle the shortest time takes the next request (config/threads.py).
_pool = LifoThreadPool(max_workers=settings.WEB_THREADS, thread_name_prefix="django")
_JSON = (b"content-type", b"application/json")
_HTML = (b"content-type", b"text/html; charset=utf-8")


def mount(prefix: str, app: ASGIApp, *, lifespan: Callable[[], Any] | None = None) -> None:
    """Serve every request whose path is `prefix` or starts with ``prefix + "/"`` with the ASGI `app`.

    `lifespan`, when given, is called once at startup and must return an async context manager, entered
    before the first request and exited at shutdown (the MCP SDK's session manager needs one).
    """
    MOUNTS[prefix.rstrip("/")] = (app, lifespan)


def _headless(send: Callable) -> Callable:
    """`send` for a HEAD request: every body message goes out empty (the head is the answer). gunicorn drops a
    body on a no-body response too, but logs a WARNING for each — one per load balancer probe."""

    async def send_head(message: dict) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return send_head


def _closing(scope: dict) -> dict[str, str]:
    """The `Connection: close` header of an answer after which the connection must end (a body left unread),
    with the server told to end it (`config.server.CLOSE_CONNECTION`): the header alone did not stop gunicorn
    from keeping the connection and answering the next request, which a client honouring `close` believes
    unsent (found by a breaker)."""
    close_connection = (scope.get("extensions") or {}).get(CLOSE_CONNECTION)
    if close_connection is not None:
        close_connection()
    return {"Connection": "close"}


# `http://host:port` or `https://…` at the start of a request target: the absolute form (RFC 9112 §3.2.2).
_ABSOLUTE_FORM = re.compile(rb"[hH][tT][tT][pP][sS]?://[^/?#\\]*")  # the authority ends where a path could begin


def origin_form(scope: dict) -> dict:
    """`scope` with an absolute-form target (``GET http://host/healthz``) reduced to its path.

    RFC 9112 §3.2.2: a server MUST accept the absolute form; gunicorn passes it on whole, so every route
    answered 404 (a breaker). The scheme and authority are dropped from `raw_path` and `path` (an empty path
    is ``/``), and the authority, when there is one, replaces the Host header, as the RFC asks (so
    ALLOWED_HOSTS judges the host that was asked for, a second breaker). Any other scope is returned as it is."""
    raw = scope.get("raw_path") or b""
    found = _ABSOLUTE_FORM.match(raw)
    if found is None:
        return scope
    authority = found.group(0).split(b"://", 1)[1]
    headers = scope["headers"]
    if authority:
        headers = [(b"host", authority), *((name, value) for name, value in headers if name != b"host")]
    raw = raw[found.end() :] or b"/"
    return {**scope, "raw_path": raw, "path": unquote_to_bytes(raw).decode("utf-8", "replace"), "headers": headers}


async def application(scope: dict, receive: Callable, send: Callable) -> None:
    """The ASGI 3 entry point (HTTP and lifespan; WebSocket connections are closed)."""
    kind = scope["type"]
    if kind == "http":
        scope = origin_form(scope)
        path = scope["path"]
        if scope["method"] == "HEAD":
            send = _headless(send)
        if scope.get("http_version") == "1.1" and not any(name == b"host" for name, _ in scope["headers"]):
            # RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host; gunicorn served it
            # (a breaker: harmless alone, a smuggling ingredient behind a proxy that routes by Host).
            message = "An HTTP/1.1 request must carry a Host header."
            await _send_error(send, 400, "invalid_request_error", message, _closing(scope), path=path)
            return
        for prefix, (app, _) in MOUNTS.items():
            if path == prefix or path.startswith(prefix + "/"):
                await app(scope, receive, send)
                return
        if scope["method"] in ("GET", "HEAD") and path in ("/healthz", "/readyz"):
            # A probe is answered without reading a body it was sent; gunicorn then ends the connection once
            # the answer is out if the body had not all arrived (it cannot tell the next request from the
            # rest of it), so the answer says so instead of leaving the client to find out.
            await _probe(path, send, _closing(scope) if _has_body(scope["headers"]) else None)
            return
        await _django(scope, receive, send)
    elif kind == "lifespan":
        await _lifespan(receive, send)
    elif kind == "websocket":
        await send({"type": "websocket.close", "code": 1000})


async def _probe(path: str, send: Callable, headers: dict | None = None) -> None:
    if path == "/healthz":
        await _send_json(send, 200, health.LIVE_BODY, new_request_id(), headers)
        return
    ready = False
    with contextlib.suppress(TimeoutError):
        ready = await asyncio.wait_for(asyncio.wrap_future(health.check()), health.READY_BUDGET)
    if ready:
        await _send_json(send, 200, health.READY_BODY, new_request_id(), headers)
    else:
        retry = {**retry_after_headers(), **(headers or {})}
        await _send_error(send, 503, "overloaded_error", health.NOT_READY_MESSAGE, retry)


async def _django(scope: dict, receive: Callable, send: Callable) -> None:
    loop = asyncio.get_running_loop()
    body = b""
    declared = _declared_length(scope["headers"])
    if declared is not None and declared > settings.MAX_REQUEST_BYTES:  # refused before a byte of it is read
        message = f"Request body is {declared} bytes; the limit is {settings.MAX_REQUEST_BYTES} bytes."
        await _send_error(send, 413, "request_too_large", message, _closing(scope), path=scope["path"])
        return
    if _has_body(scope["headers"]):
        try:
            body = await _read_body(receive, loop.time() + settings.BODY_TIMEOUT, settings.MAX_REQUEST_BYTES + 1)
        except TimeoutError:
            await _send_error(
                send,
                408,
                "invalid_request_error",
                f"The request body did not arrive within {settings.BODY_TIMEOUT:g} seconds.",
                _closing(scope),
                path=scope["path"],
            )
            return
        if body is None:  # the client went away
            return
    # A chunked body past the limit was read no further (the middleware answers its 413): the rest of it is
    # still on the line, so the answer must end the connection.
    unread = len(body) > settings.MAX_REQUEST_BYTES
    answer = loop.create_future()
    work = _pool.submit(_answer_from_thread, loop, answer, _environ(scope, body))
    try:
        try:
            async with asyncio.timeout(settings.REQUEST_TIMEOUT):
                status, headers, content = await answer
        except TimeoutError:
            if not answer.done() or answer.cancelled():
                raise
            # Settled in the loop iteration in which the deadline fired (asyncio.timeout then cancels the
            # wake-up that carried it): the answer is there, so it is sent, as asyncio.wait_for did.
            status, headers, content = answer.result()
    except asyncio.CancelledError:
        # gunicorn cancels the task of a client gone for `asgi_disconnect_grace_period`, and every task of a
        # stopping worker: a request still queued for a thread is never run then either.
        work.cancel()
        _abandon(answer)  # settled in the pass the cancel came: nobody will send that stream
        raise
    except TimeoutError:
        work.cancel()  # a request still queued for a thread is never run
        request_id = new_request_id()
        logger.warning(
            "503 %s %s %s: no answer within %g s (REQUEST_TIMEOUT)",
            scope["method"],
            scope["path"],
            request_id,
            settings.REQUEST_TIMEOUT,
        )
        message = "The service did not answer in time; retry after a moment."
        await _send_error(send, 503, "overloaded_error", message, retry_after_headers(), request_id, path=scope["path"])
        return
    except Exception:
        request_id = new_request_id()
        logger.exception("500 %s %s %s: the WSGI application failed", scope["method"], scope["path"], request_id)
        message = "An internal error occurred. Quote the request id when reporting it."
        await _send_error(send, 500, "api_error", message, {}, request_id, path=scope["path"])
        return
    if isinstance(content, _Stream):
        # HTTP/1.0 has no chunked coding: a body without Content-Length ends with the connection. Our
        # gunicorn worker lets the application ask for that (config.server.CLOSE_CONNECTION); another
        # server keeps a keep-alive 1.0 client's connection open unless the answer is left unfinished.
        extensions = scope.get("extensions") or {}
        close_delimited = False
        if scope.get("http_version") == "1.0":
            close_connection = extensions.get(CLOSE_CONNECTION)
            if close_connection is None:
                close_delimited = True
            else:
                close_connection()
        await _send_stream(
            send,
            status,
            headers,
            content,
            close_delimited=close_delimited,
            abort=extensions.get(ABORT_CONNECTION),
            receive=receive,
        )
        return
    if unread:
        headers = [*headers, *((name.lower().encode(), value.encode()) for name, value in _closing(scope).items())]
    await _send_whole(send, scope, status, headers, content)


async def _send_whole(send: Callable, scope: dict, status: int, headers: list, content: bytes) -> None:
    """Send a whole (not streamed) answer, in blocks of `WHOLE_BLOCK_BYTES`. A client that has not taken a
    block within STREAM_SEND_TIMEOUT seconds loses the connection (one WARNING line): gunicorn waits for a
    full send buffer to drain with no limit, so a client that asked for a large answer (the OpenAPI document,
    a page of files) and never read it held its connection and the answer's memory for as long as it liked
    (a breaker). A client that keeps reading is not cut, as with the export (a second breaker: one bound on
    the whole answer cut a steady 20 KB/s reader): what it must take per STREAM_SEND_TIMEOUT is a block plus
    what the buffers between hold (the send queue's 128 KiB unsent low-water mark, gunicorn's 64 KiB) —
    about 200 KB, some 7 KB/s with the default 30 s (a third breaker measured the floor)."""
    block = WHOLE_BLOCK_BYTES
    head = {"type": "http.response.start", "status": status, "headers": headers}
    if len(content) <= block:  # most answers: the head and the body under one timer
        batches: list[list[dict]] = [[head, {"type": "http.response.body", "body": content}]]
    else:
        bodies = [
            {"type": "http.response.body", "body": content[at : at + block], "more_body": at + block < len(content)}
            for at in range(0, len(content), block)
        ]
        batches = [[head, bodies[0]], *([body] for body in bodies[1:])]
    # A timer handle per batch, not asyncio.timeout (7.9 µs against 3.1 µs a request, measured under uvloop):
    # when it fires it cancels this task, which the send it waits in raises here.
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    fired = False

    def too_slow() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    sent = 0
    for batch in batches:
        timer = loop.call_later(settings.STREAM_SEND_TIMEOUT, too_slow)
        try:
            for message in batch:
                await send(message)
        except asyncio.CancelledError:
            if not fired:
                raise  # cancelled from outside (a client gone, a stopping worker): as before
            task.uncancel()
            logger.warning(
                "answer %d to %s %s cut: the client did not take a block within %g s (STREAM_SEND_TIMEOUT; "
                "%d of %d bytes sent)",
                status,
                scope["method"],
                scope["path"],
                settings.STREAM_SEND_TIMEOUT,
                sent,
                len(content),
            )
            stream_cut.set(True)  # logged: gunicorn need not log the unfinished answer as an ERROR
            abort = (scope.get("extensions") or {}).get(ABORT_CONNECTION)
            if abort is not None:
                abort()
            return
        finally:
            timer.cancel()
        sent += len(batch[-1]["body"])


# The blocks a whole answer is handed to the server in (`_send_whole`), each under STREAM_SEND_TIMEOUT: the size
# of an export's blocks.
WHOLE_BLOCK_BYTES = 64 * 1024


def _answer_from_thread(loop: asyncio.AbstractEventLoop, answer: asyncio.Future, environ: dict[str, Any]) -> None:
    """On a pool thread: run Django for `environ` and hand the outcome to `answer` on the event loop.

    One wake-up of the loop per request (`call_soon_threadsafe`); an answer the front no longer waits for
    (it timed out) is dropped. A BaseException that is not an Exception (SystemExit, a CancelledError out
    of `async_to_sync`: Django's handler lets them through) is a 500 too, delivered as a RuntimeError caused
    by it: raised as it is on the event loop, a SystemExit would stop the worker.
    """
    try:
        outcome, failure = _call_django(environ), None
    except Exception as exc:
        outcome, failure = None, exc
    except BaseException as exc:
        failure = RuntimeError(f"the WSGI application raised {type(exc).__name__}")
        failure.__cause__ = exc
        outcome = None
    stream = outcome[2] if outcome is not None and isinstance(outcome[2], _Stream) else None
    if stream is not None:
        stream.done = loop.create_future()  # only constructed here; resolved on the loop (`_finish_stream`)
    loop.call_soon_threadsafe(_settle, answer, outcome, failure)
    if stream is not None:
        _pump(loop, stream, environ)


def _settle(answer: asyncio.Future, outcome: Any, failure: BaseException | None) -> None:
    if answer.done():  # cancelled by the request timeout
        if outcome is not None and isinstance(outcome[2], _Stream) and not outcome[2].go.done():
            outcome[2].go.set_exception(TimeoutError("the front no longer waits for this answer"))
        return
    if failure is not None:
        answer.set_exception(failure)
    else:
        answer.set_result(outcome)


def _abandon(answer: asyncio.Future) -> None:
    """Tell the thread of a streamed answer the front will never send (its task was cancelled after `_settle`
    had set the answer) to close it now, instead of waiting STREAM_SEND_TIMEOUT for `go`."""
    if answer.done() and not answer.cancelled() and answer.exception() is None:
        content = answer.result()[2]
        if isinstance(content, _Stream) and not content.go.done():
            content.go.set_exception(ConnectionError("the client left before the answer was started"))


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The request's Content-Length in bytes, or None when absent (gunicorn has already refused a malformed
    one with 400, so a value here is ASCII digits)."""
    for name, value in headers:
        if name == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() else None
    return None


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


async def _read_body(receive: Callable, deadline: float, limit: int) -> bytes | None:
    """The request body, read until complete or past `limit` bytes (Django then answers 413).

    Raises TimeoutError when it is not complete by `deadline` (event-loop time); None if the client left.
    """
    # Each message is awaited under `asyncio.timeout_at`, not `asyncio.wait_for`: on Python 3.11 wait_for
    # wraps every receive in a Task, three loop passes even when the message is already buffered (the usual
    # small POST), where an await that does not suspend costs none. When the deadline fires in the pass in
    # which the last message came, the cancelled receive left it with the server (gunicorn pops a chunk
    # only once resumed), so it is asked for once more without waiting: a message already there is read,
    # as wait_for read it, and only one still to come is the TimeoutError.
    loop = asyncio.get_running_loop()
    chunks, total = [], 0
    while True:
        if deadline <= loop.time():
            raise TimeoutError
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            async with asyncio.timeout(0):  # cancels at the next pass: only a message already there comes back
                message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        total += len(chunk)
        if total > limit or not message.get("more_body", False):
            return b"".join(chunks)


def _environ(scope: dict, body: bytes) -> dict[str, Any]:
    """PEP 3333 environ for `scope`, the way gunicorn's WSGI workers build it (PATH_INFO from the raw path,
    percent-decoded to bytes, as latin-1; RAW_URI the target as sent). Header names with ``_`` are dropped, as
    gunicorn does."""
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode("utf-8").decode("latin-1"),
        "PATH_INFO": unquote_to_bytes(raw_path.partition(b"?")[0]).decode("latin-1"),
        "RAW_URI": raw_path.decode("latin-1"),  # the target as sent, as gunicorn's WSGI workers set it
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or 0),
        "REMOTE_ADDR": str(client[0]),
        "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        ANSWER_BY: time.monotonic() + settings.REQUEST_TIMEOUT,  # when the front stops waiting
    }
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1")
        if "_" in name:
            continue
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            key = "HTTP_" + key
        value = raw_value.decode("latin-1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _call_django(environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes | _Stream]:
    """Run Django for one request on a pool thread; return (status, headers, body).

    The whole call, `close()` included (Django's request_finished handlers touch the database), runs
    under the request deadline of `config.database`. A streamed answer (`StreamingHttpResponse`: the
    export) comes back as a `_Stream` once its first block is read — a database fault up to there is a
    503 like any other — and the calling thread then sends the rest (`_pump`); at most `STREAM_THREADS`
    threads of a process stream at once, one more is a 503 with Retry-After.
    """
    started: list[Any] = []

    def start_response(status, headers, exc_info=None):
        started[:] = [status, headers]
        return lambda data: None  # the legacy write() callable; Django never uses it

    first = None
    with request_deadline(settings.DB_REQUEST_DEADLINE):
        result = django_application(environ, start_response)
        close = getattr(result, "close", None)
        streamed = getattr(result, "streaming", False)
        try:
            if streamed:
                blocks = iter(result)
                first = next(blocks, None)
            content = b"".join(result) if not streamed else first or b""
        except DatabaseError as exc:
            # A streamed body (the export) reads the database after the view returned, outside Django's
            # error handling: a fault there (a restart, the deadline) is a 503 like any other database
            # fault, not a 500 — nothing has been sent yet.
            streamed = False
            return _fault_answer(environ, "the streamed answer failed in the database", exc)
        finally:
            if close is not None and not (streamed and first is not None):
                close()
    status, headers = started
    head = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    if streamed and first is not None:
        if environ["REQUEST_METHOD"] == "HEAD":  # the head is the answer: no reading the rest for nothing
            _close_streamed(close, environ)
            return int(status.split(" ", 1)[0]), head, b""
        key = getattr(result, STREAM_KEY, None)  # None: a stream no user is counted for
        refused = _stream_slots.take(key)
        if refused == "key":
            _close_streamed(close, environ)
            return _too_many_streams(environ, key)
        if refused is not None:
            _close_streamed(close, environ)
            busy = (
                f"All {settings.STREAM_THREADS} streamed answers (exports) this server process sends at once are "
                "in progress; retry after a moment."
            )
            return _fault_answer(environ, f"{settings.STREAM_THREADS} streamed answers in progress", None, busy)
        return int(status.split(" ", 1)[0]), head, _Stream(first, blocks, close, key)
    if not any(name == b"content-length" for name, _ in head):
        head.append((b"content-length", str(len(content)).encode()))
    return int(status.split(" ", 1)[0]), head, content


def _fault_answer(
    environ: dict[str, Any], why: str, exc: BaseException | None, message: str | None = None
) -> tuple[int, list, bytes]:
    """The 503 overloaded_error answer (with Retry-After) of a request the front refuses or saw fail in the
    database, logged as one WARNING line (`why`). `message`: what the client reads (default: the service
    did not answer in time)."""
    request_id = new_request_id()
    detail = f": {exc}" if exc is not None else ""
    logger.warning("503 %s %s %s: %s%s", environ["REQUEST_METHOD"], environ["PATH_INFO"], request_id, why, detail)
    message = message or "The service did not answer in time; retry after a moment."
    payload = error_payload(status=503, type="overloaded_error", message=message, request_id=request_id)
    return _json_answer(503, payload, request_id, retry_after_headers())


# --- streamed answers ---------------------------------------------------------------------------------


class _Stream:
    """A streamed answer handed from its request's thread to the event loop (the export).

    The loop sends the head and `first` block (`_send_stream`), then the thread that read them — it holds
    the answer's database transaction — reads and sends the rest (`_pump`) and ends it. `go` tells the
    thread the loop has sent the head (or will not); `done` (a future of the loop) tells the loop the
    thread is finished: True when every block was sent, False when the stream was cut, a `_Handover` when
    the loop is to send the rest; `abort` tells the thread the client is gone.
    """

    def __init__(self, first: bytes, rest: Any, close: Callable[[], None], key: str | None = None) -> None:
        self.first, self.rest = first, rest
        self.key = key  # the stream slot's key (`_stream_slots`), released by `_pump` or the `_Handover`
        self.close: Callable[[], None] | None = close  # None once `_pump` has closed the body
        self.send: Callable[[dict], Awaitable[None]] | None = None
        self.go: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.done: asyncio.Future[bool] | None = None  # set by `_answer_from_thread` before the loop sees it
        self.abort = threading.Event()
        self.sending: concurrent.futures.Future | None = None  # the block `_pump` waits on the loop to send


# Streamed answers of this process at once, in all and per user (the key a view puts on its streamed response
# as `STREAM_KEY`; one without is counted in all only).
_stream_slots = KeyedSlots(lambda: settings.STREAM_THREADS, lambda: settings.STREAM_THREADS_PER_USER)


def _too_many_streams(environ: dict[str, Any], key: str | None) -> tuple[int, list, bytes]:
    """The 429 rate_limit_error (with Retry-After) of a streamed answer its user already has
    STREAM_THREADS_PER_USER of in progress on this process, logged as one WARNING line."""
    request_id = new_request_id()
    limit = settings.STREAM_THREADS_PER_USER
    logger.warning(
        "429 %s %s %s: %s already has %d streamed answers in progress (STREAM_THREADS_PER_USER)",
        environ["REQUEST_METHOD"],
        environ["PATH_INFO"],
        request_id,
        key,
        limit,
    )
    message = (
        f"You have {limit} streamed answer{'s' if limit != 1 else ''} (exports) in progress on this server "
        "process, the most one user may have at once; retry when one has ended."
    )
    payload = error_payload(status=429, type="rate_limit_error", message=message, request_id=request_id)
    return _json_answer(429, payload, request_id, retry_after_headers())


async def _send_stream(
    send: Callable,
    status: int,
    headers: list,
    stream: _Stream,
    *,
    close_delimited: bool = False,
    abort: Callable[[], None] | None = None,
    receive: Callable | None = None,
) -> None:
    """On the event loop: send the head and first block, let the thread send the rest — or, once it has
    read the whole answer, send what it read ahead (`_send_spooled`) — then end the answer.

    A stream the thread cut ends without its last message: gunicorn closes the connection, so the client
    sees the body end early (an export without its end line), never a complete-looking answer.
    `close_delimited` (HTTP/1.0 under a server that cannot be asked to close: no chunked coding, the body
    ends with the connection): a complete stream is left without its last message too, so the server
    closes the connection even for a keep-alive client; the client already has every block. Either way an
    answer left unfinished sets `config.server.stream_cut` in the request's task. `abort` (the server's
    `config.server.ABORT_CONNECTION`) drops the connection of a cut answer at once. With `receive`, a
    client that leaves ends the answer at once (`_cancel_on_disconnect`), not after the server's grace period.
    """
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": stream.first, "more_body": True})
    except BaseException:
        stream.go.set_exception(ConnectionError("the answer could not be started"))
        raise
    stream.send = send
    stream.go.set_result(None)
    watcher = None if receive is None else _cancel_on_disconnect(receive)
    try:
        try:
            outcome = await stream.done
        except asyncio.CancelledError:  # the client is gone (cancelled by the watcher or gunicorn), or a stop
            stream.abort.set()
            sending = stream.sending
            if sending is not None:  # a send to a lost connection waits in gunicorn's drain() forever
                sending.cancel()
            if stream.done.done() and isinstance(stream.done.result(), _Handover):
                stream.done.result().discard()  # settled in the pass the cancel came: nobody sends the rest
            raise
        complete = await _send_spooled(send, outcome) if isinstance(outcome, _Handover) else outcome
    finally:
        if watcher is not None:
            watcher.cancel()
    if complete and not close_delimited:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    stream_cut.set(True)  # logged already: gunicorn need not log the unfinished answer as an ERROR
    if not complete and abort is not None:
        abort()  # a cut: drop the connection and what is queued for it, not wait for the client to drain it


def _cancel_on_disconnect(receive: Callable) -> asyncio.Task:
    """Watch `receive` (the request's body is already read) for the client leaving, and then cancel the
    request's task at once, as the server would after its disconnect grace period (gunicorn: 3 s, during
    which a vanished export client kept its stream slot; found by a breaker). Returns the watcher: cancel it
    when the answer is over."""
    request_task = asyncio.current_task()

    async def watch() -> None:
        try:
            while (await receive())["type"] != "http.disconnect":
                pass  # the body's closing message(s): what comes next is the disconnect
        except Exception:  # a server whose receive fails here: the grace period applies as before
            return
        request_task.cancel()

    return asyncio.ensure_future(watch())


class _Handover:
    """What a streamed answer's thread hands the event loop once it has read the whole answer and closed
    it (`_pump`): the blocks still to send (`spool`), the block in flight (`sending`, sent at `sent_at`,
    `time.monotonic()`), the answer's `give_up` time (STREAM_SECONDS), and the request's method and path
    for the log. Its stream slot is released when the loop is done with it (`discard`)."""

    def __init__(
        self,
        spool: _Spool,
        sending: concurrent.futures.Future | None,
        sent_at: float,
        give_up: float,
        environ: dict[str, Any],
        key: str | None = None,
    ) -> None:
        self.spool, self.sending, self.sent_at, self.give_up = spool, sending, sent_at, give_up
        self.key = key
        self.what = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}"
        self._discarded = False

    def discard(self) -> None:
        """Cancel the block in flight, close the spool and free the stream slot (once)."""
        if self._discarded:
            return
        self._discarded = True
        if self.sending is not None and not self.sending.done():
            self.sending.cancel()
        try:
            self.spool.close()
        finally:
            _stream_slots.release(self.key)


async def _send_spooled(send: Callable, handover: _Handover) -> bool:
    """On the event loop, with no thread held: send the blocks `_pump` read ahead, each as the client takes
    it. Returns True when every block went out; False when the answer was cut (one WARNING line) by a
    client that takes more than STREAM_SEND_TIMEOUT seconds to accept a block or by STREAM_SECONDS. Reads
    of the spool's temporary file run on the loop (64 KiB each, normally from the page cache)."""
    why = None
    try:
        if handover.sending is not None:
            now = time.monotonic()
            left = min(settings.STREAM_SEND_TIMEOUT - (now - handover.sent_at), handover.give_up - now)
            try:
                async with asyncio.timeout(max(left, 0)):
                    await asyncio.wrap_future(handover.sending)
            except TimeoutError:
                why = _too_slow() if time.monotonic() < handover.give_up else _too_long()
                return False
        while handover.spool:
            left = handover.give_up - time.monotonic()
            if left <= 0:
                why = _too_long()
                return False
            message = {"type": "http.response.body", "body": handover.spool.pop(), "more_body": True}
            try:
                async with asyncio.timeout(min(settings.STREAM_SEND_TIMEOUT, left)):
                    await send(message)
            except TimeoutError:
                why = _too_slow() if time.monotonic() < handover.give_up else _too_long()
                return False
        return True
    except ConnectionError:
        return False  # the client is gone
    finally:
        handover.discard()
        if why is not None:
            logger.warning("streamed answer of %s cut: %s", handover.what, why)


def _too_slow() -> str:
    return f"the client did not take a block within {settings.STREAM_SEND_TIMEOUT:g} s"


def _too_long() -> str:
    return f"still streaming after STREAM_SECONDS ({settings.STREAM_SECONDS:g} s)"


class _Spool:
    """The blocks of a streamed answer read ahead of its client, first in, first out (`_pump`).

    Held in memory up to `memory` bytes, past that in an anonymous temporary file (deleted by the system
    even if the process dies); `full` once `limit` bytes are held. A file that cannot be written (a full
    disk) ends the spooling: the block stays in memory and `full` turns true, so the reader waits for the
    client as without a spool. Used by one thread only.
    """

    def __init__(self, memory: int, limit: int) -> None:
        self.memory, self.limit = memory, limit
        self._blocks: collections.deque[bytes | int] = collections.deque()  # a block, or its length in the file
        self._held = self._in_memory = 0
        self._file: Any = None
        self._read_at = self._write_at = 0

    def __bool__(self) -> bool:
        return bool(self._blocks)

    @property
    def full(self) -> bool:
        return self._held >= self.limit

    def push(self, block: bytes) -> None:
        if self._in_memory + len(block) > self.memory and self.limit > 0:
            try:
                if self._file is None:
                    self._file = tempfile.TemporaryFile(prefix="memories-stream-")  # noqa: SIM115 (closed by close())
                self._file.seek(self._write_at)
                self._file.write(block)
                self._write_at += len(block)
                self._blocks.append(len(block))
                self._held += len(block)
                return
            except OSError as exc:
                logger.warning("a streamed answer stops reading ahead of its client: %s", exc)
                self.limit = 0  # full from now on; what is left goes through memory one block at a time
        self._blocks.append(block)
        self._in_memory += len(block)
        self._held += len(block)

    def pop(self) -> bytes:
        item = self._blocks.popleft()
        if isinstance(item, bytes):
            self._in_memory -= len(item)
            self._held -= len(item)
            return item
        self._file.seek(self._read_at)
        block = self._file.read(item)
        self._read_at += item
        self._held -= item
        if self._read_at == self._write_at:  # nothing left in the file: its space is reused from the start
            self._file.seek(0)
            self._file.truncate()
            self._read_at = self._write_at = 0
        return block

    def close(self) -> None:
        self._blocks.clear()
        if self._file is not None:
            self._file.close()


def _pump(loop: asyncio.AbstractEventLoop, stream: _Stream, environ: dict[str, Any]) -> None:
    """On the request's thread: read the stream's blocks (each under the request deadline) and send each
    through the event loop (gunicorn's write back-pressure tells when the client has taken one).

    Reading runs ahead of the client into a `_Spool` (`STREAM_SPOOL_BYTES`), so a slow client holds
    neither the answer's database transaction nor this thread: once the last block is read the body is
    closed (the transaction ends, Django's request_finished runs) and what is left to send is handed to
    the event loop (`_Handover`, sent by `_send_spooled`), which then holds the stream's slot. A spool that
    is full makes the reading wait for the client again.

    Cut — logged as one WARNING line, the answer left without its end — by a database fault, a client
    that takes more than `STREAM_SEND_TIMEOUT` seconds to accept a block, or `STREAM_SECONDS` in all.
    Always closes the response; frees the stream's slot unless it hands the answer over.
    """
    started = time.monotonic()
    give_up = started + settings.STREAM_SECONDS
    spool = _Spool(settings.STREAM_SPOOL_MEMORY_BYTES, settings.STREAM_SPOOL_BYTES)
    reading = True
    sent: concurrent.futures.Future | None = None  # the block in flight
    sent_at = 0.0
    handover: _Handover | None = None
    complete = False
    why = None
    try:
        stream.go.result(timeout=settings.STREAM_SEND_TIMEOUT)
        while not stream.abort.is_set():
            if sent is not None and sent.done():
                sent.result()  # a send that failed ends the stream (the client is gone)
                sent = None
            now = time.monotonic()
            if now >= give_up:
                why = _too_long()
                break
            if sent is not None and now - sent_at >= settings.STREAM_SEND_TIMEOUT:
                why = _too_slow()
                break
            if sent is None and spool:
                sent, sent_at = _send_block(loop, stream, spool.pop()), now
                continue
            if reading and not (spool and spool.full):  # an empty spool takes the next block, full or not
                with request_deadline(settings.DB_REQUEST_DEADLINE):
                    block = next(stream.rest, None)
                if block is None:
                    reading = False
                    _close_streamed(stream.close, environ)  # the transaction ends here, not with the client
                    stream.close = None
                    if sent is not None or spool:  # the loop sends the rest; this thread is free
                        handover = _Handover(spool, sent, sent_at, give_up, environ, stream.key)
                        break
                else:
                    spool.push(block)
                continue
            if sent is None:  # nothing left to read or to send
                complete = True
                break
            try:
                sent.result(timeout=min(settings.STREAM_SEND_TIMEOUT - (now - sent_at), give_up - now))
            except concurrent.futures.TimeoutError:
                continue  # the next pass names the limit
    except DatabaseError as exc:
        why = f"the database failed: {exc}"
    except (concurrent.futures.CancelledError, TimeoutError, ConnectionError):
        pass  # the loop never sent the head (the front gave up on the request, or the client left)
    except Exception:
        logger.exception("the streamed answer of %s %s failed", environ["REQUEST_METHOD"], environ["PATH_INFO"])
    finally:
        if handover is not None:  # the loop owns the rest of the answer, its spool and its slot
            loop.call_soon_threadsafe(_finish_stream, stream.done, handover)
        else:
            try:
                if sent is not None and not sent.done():
                    sent.cancel()
                spool.close()
                if stream.close is not None:
                    _close_streamed(stream.close, environ)
            finally:
                _stream_slots.release(stream.key)
                if why is not None:
                    what = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}"
                    logger.warning("streamed answer of %s cut: %s", what, why)
                loop.call_soon_threadsafe(_finish_stream, stream.done, complete)


def _send_block(loop: asyncio.AbstractEventLoop, stream: _Stream, block: bytes) -> concurrent.futures.Future:
    """Hand `block` to the event loop to send; the future settles when gunicorn has taken it."""
    message = {"type": "http.response.body", "body": block, "more_body": True}
    sent = asyncio.run_coroutine_threadsafe(stream.send(message), loop)
    stream.sending = sent
    if stream.abort.is_set():  # set before `sending` was there to be cancelled
        sent.cancel()
    return sent


def _close_streamed(close: Callable[[], None], environ: dict[str, Any]) -> None:
    """Close a streamed answer on its own thread (its body, then Django's request_finished), under the
    request deadline; a database fault there is one WARNING line.

    A body that cannot be closed (an `itertools.chain`, say) keeps its generator suspended inside the
    export's `transaction.atomic()`: the thread's connection would then stay "in an atomic block" and every
    later request on the thread would fail (found by a breaker: one cut export, then 500s forever). Such a
    connection is reset and closed here — PostgreSQL rolls the transaction back — and logged as an ERROR,
    since it is a bug of the view.
    """
    try:
        with request_deadline(settings.DB_REQUEST_DEADLINE):
            close()
    except DatabaseError as exc:
        logger.warning("closing the streamed answer of %s failed in the database: %s", environ["PATH_INFO"], exc)
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.in_atomic_block:
        logger.error("the streamed answer of %s left a transaction open: connection closed", environ["PATH_INFO"])
        # Django's own state of an atomic block (django.db.transaction.Atomic), reset as if it had exited
        connection.in_atomic_block = False
        connection.savepoint_ids = []
        connection.atomic_blocks = []
        connection.needs_rollback = False
        connection.closed_in_transaction = False
        connection.commit_on_exit = True
        with contextlib.suppress(DatabaseError):
            connection.close()


def _finish_stream(done: asyncio.Future, outcome: bool | _Handover) -> None:
    """On the loop: settle a stream's `done` with the thread's outcome (True complete, False cut, or a
    `_Handover`); a handover nobody waits for any more (the request's task was cancelled) is discarded."""
    if not done.done():
        done.set_result(outcome)
    elif isinstance(outcome, _Handover):
        outcome.discard()


def _json_answer(
    status: int, payload: dict, request_id: str, headers: dict | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """A JSON answer made outside Django, with the headers Django's middleware would add: (status, head, body)."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return status, _head(_JSON, body, request_id, headers), body


def _head(content_type: tuple[bytes, bytes], body: bytes, request_id: str, headers: dict | None) -> list:
    """The headers of an answer made outside Django: its type and length, `Request-Id`, the security headers
    Django's middleware would add, then `headers`."""
    head = [content_type, (b"content-length", str(len(body)).encode()), (b"request-id", request_id.encode())]
    extra = {**security_headers(), **(headers or {})}
    return head + [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in extra.items()]


async def _send_json(send: Callable, status: int, payload: dict, request_id: str, headers: dict | None = None):
    status, head, body = _json_answer(status, payload, request_id, headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _send_error(
    send: Callable,
    status: int,
    type_: str,
    message: str,
    headers: dict,
    request_id: str | None = None,
    *,
    path: str = "",
) -> None:
    """Send SPEC §2's JSON error — or, for a back-office `path`, the back office's HTML page with the same
    status, message and headers (a 503 of the front's deadline says the change may have been saved)."""
    request_id = request_id or new_request_id()
    if path and is_back_office_path(path):
        retry_after = (headers or {}).get("Retry-After")
        page = back_office_html(
            status=status, request_id=request_id, retry_after=retry_after, message=message, outcome_unknown=True
        ).encode("utf-8")
        await send(
            {"type": "http.response.start", "status": status, "headers": _head(_HTML, page, request_id, headers)}
        )
        await send({"type": "http.response.body", "body": page})
        return
    payload = error_payload(status=status, type=type_, message=message, request_id=request_id)
    await _send_json(send, status, payload, request_id, headers)


async def _lifespan(receive: Callable, send: Callable) -> None:
    """ASGI lifespan: at startup apply the database budgets and enter the mounted apps' lifespans; leave
    them at shutdown. Runs in every worker process before its first request."""
    async with contextlib.AsyncExitStack() as stack:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    apply_request_budgets()
                    for _, lifespan in MOUNTS.values():
                        if lifespan is not None:
                            await stack.enter_async_context(lifespan())
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await stack.aclose()
                _pool.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return
