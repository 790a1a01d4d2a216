"""Our gunicorn worker: gunicorn's asyncio ASGI worker with a header timeout and SPEC §2 protocol errors.

gunicorn (pinned in requirements.txt) parses HTTP/1.1 itself and answers what it cannot parse — a request
line over `limit_request_line`, more than `limit_request_fields` headers or one over
`limit_request_field_size`, garbage, a bad Content-Length — before the application sees the request.
`Protocol` changes these things about gunicorn 27.0.1's `ASGIProtocol`:

- every response gunicorn writes itself (`_send_error_response`: 400, 408, 414, 431, 501, 500) is SPEC §2's
  JSON error object with a fresh `Request-Id` header and the security headers Django's middleware would
  add (`config.errors.security_headers`), instead of text/plain;
- headers must be complete within `HEADER_TIMEOUT` seconds of the request's first byte (of the connection,
  for a new one): past it a connection that sent part of a request gets 408 and is closed, one that sent
  nothing is closed. gunicorn alone waits forever for a new connection's first request;
- every scope carries `CLOSE_CONNECTION`, with which config/asgi.py ends the connection after an answer
  that must end it: an HTTP/1.0 streamed answer (no Content-Length), one that leaves a body unread; and
  gunicorn's ERROR about an unfinished response is not logged for a stream cut on purpose
  (`UnfinishedOnPurpose`), which config/asgi.py has logged already; every scope carries `ABORT_CONNECTION`,
  with which such a cut drops its connection at once;
- every connection keeps at most `NOTSENT_LOWAT` bytes unsent in the kernel (TCP_NOTSENT_LOWAT), so that
  a slow but steady reader of a streamed answer is not taken for a stalled one;
- bytes of a keep-alive client's next request that arrive before gunicorn reset its parser are held and
  fed after the reset (`_hold_next_request`): gunicorn_h1c keeps only 64 KiB after a finished message and
  gunicorn then closed the connection without answering.

These hooks are not public API of gunicorn (`_send_error_response`, `_on_headers_complete`,
`_cancel_keepalive_timer`, `_arm_keepalive_timer`, `_current_request`, `_closed`, `_request_ready`,
`_build_http_scope`, `transport`, `_callback_parser` and its `is_complete`, `_feed_callback_parser`,
`_websocket`, `reader`, `_max_buffer_size`, `_pause_reading`, `_resume_reading` (and that the connection
loop calls it right before it resets the parser), the request's `must_close`, gunicorn's log message text,
the module name `gunicorn.workers.gasgi.ASGIProtocol`, which `ASGIWorker._serve` instantiates, and
`ASGIWorker._setup_event_loop`, which makes the worker's loop (`Loop`, keeping the listen backlog)):
gunicorn is pinned exactly and tests/chaos/test_slow_clients.py, test_protocol_errors.py,
test_stream_ends.py and test_keepalive_bodies.py drive each path through a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import socket
import struct
from collections.abc import Iterable
from http import HTTPStatus

import uvloop
from gunicorn.asgi.protocol import _REASON_PHRASES, ASGIProtocol
from gunicorn.workers import gasgi

logger = logging.getLogger("memories.errors")

# gunicorn 27.0.1 names 33 statuses in its status lines and writes "Unknown" for the rest: the application's
# 406, 412 (a heartbeat's precondition), 416, 423, … went out as "HTTP/1.1 406 Unknown" (a tester). The
# standard phrases fill in what it lacks, before any status line is cached; its own stay as they are. A
# private table of the pinned gunicorn; tests/foundation/test_http_parser.py checks it.
for _status in HTTPStatus:
    _REASON_PHRASES.setdefault(_status.value, _status.phrase)

# The scope extension every request carries (`Protocol._build_http_scope`): calling it before the response
# starts makes gunicorn close the connection after the response, which gunicorn 27.0.1 otherwise decides
# from the request alone — for an HTTP/1.0 streamed answer (no Content-Length, no chunked coding: the body
# ends with the connection; config/asgi.py `_send_stream`) and for an answer that leaves a body unread.
CLOSE_CONNECTION = "memories.close_connection"

# The scope extension every request carries (`Protocol._build_http_scope`): calling it drops the connection
# at once, discarding what is still queued for the client. config/asgi.py calls it when it cuts a streamed
# answer: gunicorn's own close waits until the client has drained the write buffer, so a cut client that
# stopped reading kept its socket and megabytes of kernel buffers for as long as it liked.
ABORT_CONNECTION = "memories.abort_connection"

# Set (in the request's task) by config/asgi.py when it leaves a streamed answer without its end on
# purpose — a cut it has already logged as one WARNING line — so that gunicorn's own ERROR line about the
# unfinished response is not logged as well (`UnfinishedOnPurpose`).
stream_cut: contextvars.ContextVar[bool] = contextvars.ContextVar("memories_stream_cut", default=False)

_UNFINISHED = "ASGI application returned without completing the response"


class UnfinishedOnPurpose(logging.Filter):
    """Drops gunicorn's ERROR "ASGI application returned without completing the response" when the
    application left the response unfinished on purpose (`stream_cut` set in the request's task): the cut
    answer was logged once already, with its cause. Installed on the `gunicorn.error` logger by `Worker`.
    Every other record — that one too, when an application forgot to finish — passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (stream_cut.get() and isinstance(record.msg, str) and record.msg.startswith(_UNFINISHED))


HEADER_TIMEOUT_DEFAULT = 10.0

# gunicorn picks its C parser (gunicorn_h1c) by reading `ASGIProtocol._h1c_has_limits` on the base class,
# but the first availability check stores that flag on the class it is called through — our subclass — so
# a subclassed protocol silently fell back to the pure Python parser (issue 17: about a tenth of a
# request's CPU). Running the check once on the base class sets the flags where gunicorn reads them.
ASGIProtocol._check_h1c_protocol_available()


def _settings_value(name: str, default: float) -> float:
    try:
        from django.conf import settings

        return float(getattr(settings, name, default))
    except Exception:  # settings not configured (the master process)
        return default


CPU_AFFINITY_ENV = "WEB_CPU_AFFINITY"
CPU_AFFINITY_MODES = ("pin", "off")


def cpu_affinity_mode(environ=os.environ) -> str:
    """`WEB_CPU_AFFINITY` from `environ`: ``"off"`` (the default) or ``"pin"``.

    Raises ValueError naming the variable and the accepted values for anything else (an empty value is the
    default), so a typo stops the server at start instead of silently changing how it runs.
    """
    raw = environ.get(CPU_AFFINITY_ENV, "")
    value = raw.strip().lower() or "off"
    if value not in CPU_AFFINITY_MODES:
        modes = ", ".join(CPU_AFFINITY_MODES)
        raise ValueError(f"{CPU_AFFINITY_ENV} must be one of {modes} (any case); got {raw!r}")
    return value


CONCURRENCY_ENV = "WEB_CONCURRENCY"
MAX_WORKERS = 256


def web_concurrency(environ, default: int) -> int:
    """The number of gunicorn worker processes `WEB_CONCURRENCY` in `environ` asks for, `default` when it
    is unset or empty (surrounding ASCII spaces and tabs ignored).

    Raises ValueError naming the variable for anything but ASCII digits giving 1 to `MAX_WORKERS` (256):
    `0` would start a master with no worker that accepts connections and never answers them, `abc`,
    `2.5`, `1_000` or other scripts' digits are typos, and a huge count kept the master forking so long
    that it did not stop on TERM.
    """
    count = _count(environ, CONCURRENCY_ENV, MAX_WORKERS, "worker processes")
    return default if count is None else count


def _count(environ, name: str, maximum: int, noun: str) -> int | None:
    """The whole number 1..`maximum` the variable `name` of `environ` gives, None when it is unset or blank;
    ValueError naming the variable and `noun` for anything else (`config.envcheck.whole_number`)."""
    from config.envcheck import whole_number

    return whole_number(environ, name, None, minimum=1, maximum=maximum, noun=noun)


THREADS_ENV = "WEB_THREADS"
MAX_THREADS = 256


def web_threads(environ) -> int | None:
    """`WEB_THREADS` in `environ` (Django threads per worker process), None when unset or empty (the
    settings' default applies). Raises ValueError naming the variable for anything but ASCII digits giving
    1 to `MAX_THREADS`: `0` passed the start check and then failed every worker's import with a traceback
    (found by a breaker), a negative count made POLL_WAITERS negative."""
    return _count(environ, THREADS_ENV, MAX_THREADS, "threads")


def startup_problem(environ=os.environ) -> str | None:
    """What is wrong with the server's own variables (`WEB_CONCURRENCY`, `WEB_THREADS`, `WEB_CPU_AFFINITY`,
    the `STREAM_*` ones of `config.envcheck`) in `environ`, as one line, or None. `python -m config.server`
    prints it and exits 1: `bin/serve` and the Docker image run that before gunicorn, whose import reads
    `WEB_CONCURRENCY` with `int()` and would answer a bad value with a traceback before
    config/gunicorn.conf.py could say what is wrong."""
    from config.envcheck import DEFAULT_WEB_THREADS, stream_settings

    try:
        web_concurrency(environ, 1)
        threads = web_threads(environ)
        cpu_affinity_mode(environ)
        stream_settings(environ, threads or DEFAULT_WEB_THREADS)
    except ValueError as exc:
        return str(exc)
    return None


def workers_from_command_line(parser, argv: list[str]) -> int | None:
    """`--workers`/`-w` as given in `argv` (gunicorn's arguments: `GUNICORN_CMD_ARGS`' then the command
    line's), parsed with gunicorn's own `parser` (`Config.parser()`); None when neither gives it."""
    args, _unknown = parser.parse_known_args(argv)
    return args.workers


def worker_cpu(allowed: Iterable[int], taken: Iterable[int | None], workers: int) -> int | None:
    """The CPU a new worker process is pinned to (docs/decisions.md, "One CPU per worker, opt-in").

    `allowed`: the CPU numbers the master may run on (`os.sched_getaffinity(0)`); `taken`: the CPU of
    every live worker (None for one that is not pinned); `workers`: how many workers the server runs
    (`WEB_CONCURRENCY`). Returns the allowed CPU the fewest live workers hold, the lowest-numbered on a
    tie: workers spread one per CPU (in turn when there are more), and a replacement takes the least held
    CPU, its predecessor's when there are as many workers as CPUs.

    Returns None (not pinned) when fewer than two CPUs are allowed, or when there are fewer workers than
    CPUs: a worker's work outside the GIL (system calls, libpq, the kernel's side of its sockets) then
    runs on the spare CPUs; pinning one worker to one of two CPUs cost a quarter of its rate at 4 clients.
    """
    cpus = sorted(set(allowed))
    if len(cpus) < 2 or workers < len(cpus):
        return None
    load = dict.fromkeys(cpus, 0)
    for cpu in taken:
        if cpu in load:
            load[cpu] += 1
    return min(cpus, key=lambda cpu: (load[cpu], cpu))


def protocol_error_body(status: int, message: str, request_id: str) -> bytes:
    """The SPEC §2 body of an error gunicorn answers itself (`api_error` for 5xx, else invalid_request)."""
    from config.errors import error_payload

    error_type = "api_error" if status >= 500 and status != 501 else "invalid_request_error"
    if status >= 500 and status != 501:
        message = "An internal error occurred. Quote the request id when reporting it."
    payload = error_payload(status=status, type=error_type, message=message[:300], request_id=request_id)
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


# Unsent bytes the kernel queues for a connection (TCP_NOTSENT_LOWAT, Linux; bytes in flight are not
# limited). Without it the send queue autotunes to megabytes and the socket is writable again only once a
# third of it has drained: a client taking a streamed answer steadily at 40 kB/s let no block through for
# 30 s and was cut as stalled (found by a breaker).
NOTSENT_LOWAT = 128 * 1024

# Bytes handed to gunicorn's parser at a time (`Protocol.data_received`): gunicorn_h1c keeps at most 64 KiB
# after a finished message, so one read carrying the end of a request and more than that of the next ones
# (pipelined, or held by `_hold_next_request` meanwhile) lost the rest (found by a breaker).
_FEED_SLICE = 32 * 1024


class Protocol(ASGIProtocol):
    """gunicorn's HTTP/1 protocol with a header timeout and JSON error responses (module docstring)."""

    def connection_made(self, transport):
        self._header_timer = None
        self._header_bytes = False
        self._next_request = None
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(socket, "TCP_NOTSENT_LOWAT"):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
        self._arm_header_timer()

    def data_received(self, data):
        if len(data) > _FEED_SLICE:  # so that what follows a finished request is never over 64 KiB at once
            view = memoryview(data)
            for start in range(0, len(data), _FEED_SLICE):
                self._data_received_one(bytes(view[start : start + _FEED_SLICE]))
            return
        self._data_received_one(data)

    def _data_received_one(self, data):
        if self._hold_next_request(data):
            return
        super().data_received(data)

    def _feed_callback_parser(self, data):
        if self._current_request is None and not self._closed and data:
            # The first bytes of a new request — read from the socket, or a pipelined tail gunicorn feeds
            # again after the previous answer (without this, a partial request pipelined behind an export was
            # closed silently by the keep-alive timer; found by a breaker)
            if self._header_timer is None:
                self._cancel_keepalive_timer()
                self._arm_header_timer()
            self._header_bytes = True
        return super()._feed_callback_parser(data)

    def _arm_keepalive_timer(self):
        if self._header_timer is not None:
            return  # a request has begun: its headers are timed by HEADER_TIMEOUT, not by the idle keep-alive
        super()._arm_keepalive_timer()

    def _hold_next_request(self, data) -> bool:
        """Hold `data` when it came after the current request's last byte and before gunicorn's connection
        loop reset the parser for the next request; True when held.

        A keep-alive client sends its next request as soon as it has read our answer, and under uvloop those
        bytes can reach `data_received` before the loop's task wakes from the answer (I/O callbacks run ahead
        of the wake-up queued when the answer went out). gunicorn_h1c keeps at most 64 KiB after a completed
        message (`limit_remaining`), and the loop closes a connection whose kept tail was cut
        (`remaining_truncated`): a request over 64 KiB got no answer and no `Connection: close` — 30 % of
        100 KB POSTs on one connection (found by a breaker). Held here instead (reading paused past
        `_max_buffer_size`), the bytes go to the reset parser (`_release_next_request`).
        """
        if self._next_request is None:
            parser = self._callback_parser
            if (
                parser is None
                or self._current_request is None
                or not getattr(parser, "is_complete", False)
                or self._websocket is not None
                or self.reader is not None
            ):
                return False
            self._next_request = bytearray()
        self._next_request += data
        if len(self._next_request) > self._max_buffer_size:
            self._pause_reading()
        return True

    def _resume_reading(self):
        # gunicorn's connection loop calls this just before it takes the parser's tail and resets the parser
        # for the next request, in the same step: the held bytes are fed once that step is over.
        if self._next_request is not None:
            self.worker.loop.call_soon(self._release_next_request)
            return
        super()._resume_reading()

    def _release_next_request(self):
        parser = self._callback_parser
        if self._next_request is None or self._closed or parser is None or getattr(parser, "is_complete", False):
            return  # gone, or the parser not reset yet (a pipelined request first): the loop calls again
        held, self._next_request = bytes(self._next_request), None
        super()._resume_reading()
        self.data_received(held)  # in slices: the parser may finish a request in each

    def _on_headers_complete(self):
        self._disarm_header_timer()
        return super()._on_headers_complete()

    def connection_lost(self, exc):
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self):
        if self._closed or self._current_request is not None:
            return
        timeout = _settings_value("HEADER_TIMEOUT", HEADER_TIMEOUT_DEFAULT)
        self._header_timer = self.worker.loop.call_later(timeout, self._header_timeout)

    def _disarm_header_timer(self):
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self):
        self._header_timer = None
        if self._closed or self._current_request is not None:
            return
        if self._header_bytes:
            timeout = _settings_value("HEADER_TIMEOUT", HEADER_TIMEOUT_DEFAULT)
            self._send_error_response(408, f"The request headers did not arrive within {timeout:g} seconds.")
        self._close_transport()
        if self._request_ready is not None:
            self._request_ready.set()  # wake the connection loop so it sees the closed transport and ends

    def _build_http_scope(self, request, sockname, peername):
        scope = super()._build_http_scope(request, sockname, peername)
        extensions = scope.setdefault("extensions", {})
        extensions[ABORT_CONNECTION] = self._abort_connection
        extensions[CLOSE_CONNECTION] = self._close_after_response
        return scope

    def _close_after_response(self):
        """`CLOSE_CONNECTION`: the connection ends after the current response (read by gunicorn's
        `_will_close` when the response starts, which then also sends `Connection: close`)."""
        if self._current_request is not None:
            self._current_request.must_close = True

    def _abort_connection(self):
        """`ABORT_CONNECTION`: drop the connection now, with whatever is still queued for the client — in the
        event loop's buffer (`abort`) and in the kernel's send queue (SO_LINGER 0: a reset, not a FIN sent
        after every queued byte)."""
        if self.transport is None or self._closed:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _send_error_response(self, status, message, extra_headers=()):
        from config.errors import new_request_id, security_headers

        if self._closed:
            # The client went away (e.g. mid-body) and the application had nobody to answer: gunicorn would
            # log a 500 for what is not a fault of ours, and no one could read the response anyway.
            logger.info("%s not sent: the client closed the connection before the response", status)
            return

        request_id = new_request_id()
        body = protocol_error_body(status, str(message), request_id)
        reason = _REASON_PHRASES.get(status)
        if reason is None:
            try:
                reason = HTTPStatus(status).phrase
            except ValueError:
                reason = "Error"
        extra = "".join(f"{name}: {value}\r\n" for name, value in (*security_headers().items(), *extra_headers))
        head = (
            f"HTTP/1.1 {status} {reason}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Request-Id: {request_id}\r\n"
            f"{extra}"
            "Connection: close\r\n"
            "\r\n"
        )
        logger.warning("%s %s (answered by the HTTP layer): %s", status, request_id, str(message)[:200])
        self._safe_write(head.encode("latin-1") + body)


class Loop(uvloop.Loop):
    """uvloop's event loop, whose `create_server` keeps the listen backlog of the socket it is given.

    gunicorn's master makes the listening socket with `backlog` (2048) and each worker serves it through
    `create_server(sock=…)` without a backlog, so uvloop (as asyncio) called `listen(100)` on it again: the
    socket every worker shares queued at most 100 connections not yet accepted, and a burst past that waited
    for SYN retransmits (one second, then two…). `listen_backlog` is set by `Worker` from gunicorn's setting.
    """

    listen_backlog = 2048

    async def create_server(self, *args, backlog=None, **kwargs):
        """asyncio's `create_server`, listening with `listen_backlog` whatever `backlog` says."""
        return await super().create_server(*args, backlog=self.listen_backlog, **kwargs)


class Worker(gasgi.ASGIWorker):
    """gunicorn's `asgi` worker serving connections with `Protocol` (config/gunicorn.conf.py selects it), on
    `Loop`."""

    def init_process(self):
        gasgi.ASGIProtocol = Protocol  # the name ASGIWorker._serve instantiates, in this worker process only
        logging.getLogger("gunicorn.error").addFilter(UnfinishedOnPurpose())
        super().init_process()

    def _setup_event_loop(self):
        # gunicorn's own picks uvloop when it is installed (`asgi_loop = "auto"`); it is pinned, and `Loop` is
        # uvloop's loop with the listen backlog kept.
        self.loop = Loop()
        self.loop.listen_backlog = self.cfg.backlog
        asyncio.set_event_loop(self.loop)


if __name__ == "__main__":
    import sys

    problem = startup_problem()
    if problem:
        sys.exit(f"==> {problem}")
