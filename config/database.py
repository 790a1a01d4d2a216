"""Database budgets for the server's requests (SPEC §2 "Faults are not bugs").

Three layers, each for a fault the one before cannot see:

- `connect_timeout` (settings, every process): a server that accepts TCP but never answers the startup
  handshake fails the connect after `DB_CONNECT_TIMEOUT` seconds.
- `statement_timeout` / `lock_timeout` (`apply_request_budgets`, server processes only): PostgreSQL
  cancels a statement running longer than `DB_STATEMENT_TIMEOUT` or waiting on a lock longer than
  `DB_LOCK_TIMEOUT`. Management commands (migrations, imports) never call it, so they are exempt.
- the request deadline (`Watchdog`, armed around each request by the ASGI front, `config.asgi`):
  a server that is frozen (SIGSTOP, a hung host, a partition) cancels nothing and its kernel still
  acknowledges our packets, so a query would wait forever. When a request is still inside the database
  `DB_REQUEST_DEADLINE` seconds after it started, the watchdog cuts its connection: it sends PostgreSQL
  a cancel request for the running statement (at most `CANCEL_TIMEOUT` seconds, on a thread of its own);
  when the server took it, it gives the request `CUT_GRACE` seconds to end by itself (the cancelled
  statement fails at once; a commit already under way finishes and is answered), then shuts the request
  thread's database socket down if it has not, and cancels once more (a statement sent in between).
  A blocked call fails with an OperationalError, which `config.errors` renders as 503 `overloaded_error`,
  and Django replaces a cut connection on the next request. A request stays armed until it ends: a
  connection it opens after its deadline (or after a cut) is cut by the next scan.

A cut write did not happen, unless it had committed already. Shutting our socket down alone is not
enough: PostgreSQL reads the client socket only between statements, so a statement queued behind a row
lock would still run, and commit, once the lock is released (seen 4/4 for a note cut while another
transaction held its store row). So the cut first cancels: the server signals the backend before it
answers the cancel request, and a cancelled statement never commits. When the server cannot take the
cancel (frozen, unreachable), `client_connection_check_interval` (`DB_CLIENT_CHECK_INTERVAL`, part of
the request budgets, PostgreSQL >= 14) is the backstop: a backend running a statement polls its client
socket that often, finds it shut and aborts, lock waits included. What neither can stop is a statement
that the frozen server had already received and that completes the moment it thaws; the client cannot
tell that case from the others, so a 503 on a write means "retry", and retrying is safe only with the
same `client_nonce` (`Idempotency-Key`), which every client we ship sends.

Every error these produce is a `django.db.OperationalError` (psycopg: `QueryCanceled`,
`LockNotAvailable`, a closed connection, a connect timeout) and so a 503 with `Retry-After`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from psycopg import pq

logger = logging.getLogger("memories.errors")

# Seconds a cut waits for PostgreSQL to take its cancel request before shutting the socket down anyway:
# a live server answers in milliseconds; a frozen one accepts the connection and never answers.
CANCEL_TIMEOUT = 0.5
# Seconds a request whose cancel the server took gets to end by itself before its socket is shut down: a
# cancelled statement or a commit under way ends in milliseconds; only a backend stuck elsewhere needs it.
CUT_GRACE = 1.0

# The WSGI environ key with the `time.monotonic()` by which the ASGI front needs the answer (REQUEST_TIMEOUT
# after the body arrived; config/asgi.py `_environ`): work in several steps (an MCP batch,
# config/mcp_server.py) stops starting new ones in time to be answered.
ANSWER_BY = "memories.answer_by"


def budget_options() -> str:
    """The libpq `options` string that sets the request budgets, e.g. ``-c statement_timeout=5000 …``.

    Values are milliseconds (PostgreSQL's unit for these settings); 0 means no limit. The client check
    (`DB_CLIENT_CHECK_INTERVAL`; PostgreSQL >= 14, older servers refuse the connection) is left out when 0.
    """
    statement_ms = int(settings.DB_STATEMENT_TIMEOUT * 1000)
    lock_ms = int(settings.DB_LOCK_TIMEOUT * 1000)
    options = f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
    check_ms = int(settings.DB_CLIENT_CHECK_INTERVAL * 1000)
    if check_ms > 0:
        options += f" -c client_connection_check_interval={check_ms}"
    return options


def apply_request_budgets() -> None:
    """Give every database connection this process opens from now on the request budgets.

    Called once per server process before any request (the ASGI front's lifespan start-up, `config.wsgi`); it
    changes the connection parameters of each alias (connections already open keep theirs until Django
    replaces them). Existing libpq `options` are kept and the budgets appended.
    """
    extra = budget_options()
    for alias in connections:
        options = connections[alias].settings_dict.setdefault("OPTIONS", {})
        current = options.get("options", "")
        if extra not in current:
            options["options"] = f"{current} {extra}".strip()


def _handles(raw: Any) -> tuple[int, list[Any]] | None:
    """What a cut of psycopg connection `raw` needs, taken at once: (a duplicate of its socket, two libpq
    cancel connections — none when libpq cannot cancel with a timeout), or None when `raw` is closed or lost.

    The duplicate keeps the socket itself (not a file descriptor number the owner may close and the
    process reuse) until the cut is done; a cancel connection is a copy of what libpq needs to reach
    the server and name the backend, so nothing of `raw` is touched from the cutting thread but its
    `closed` flag. The second cancel is for a statement sent after the first one was answered.
    """
    try:
        pgconn = raw.pgconn
        fd = os.dup(pgconn.socket)
    except Exception:  # closed, or never connected
        return None
    cancels = []
    if psycopg.capabilities.has_cancel_safe():  # libpq >= 17; the older cancel blocks without a timeout
        with contextlib.suppress(Exception):
            cancels = [pgconn.cancel_conn(), pgconn.cancel_conn()]
    return fd, cancels


def _cancel(cancel: Any, timeout: float) -> bool:
    """Send the cancel request of libpq cancel connection `cancel`; True once the server took it.

    The server signals the backend before it closes the cancel connection, so after True the statement
    then running cannot commit (unless it was committing already). Waits at most `timeout` seconds;
    False on timeout or failure. Never raises; frees `cancel`.
    """
    end = time.monotonic() + timeout
    try:
        cancel.start()
        while (status := cancel.poll()) in (pq.PollingStatus.READING, pq.PollingStatus.WRITING):
            left = end - time.monotonic()
            if left <= 0:
                return False
            poller = select.poll()
            poller.register(cancel.socket, select.POLLIN if status == pq.PollingStatus.READING else select.POLLOUT)
            poller.poll(math.ceil(left * 1000))
        return status == pq.PollingStatus.OK
    except Exception:
        return False
    finally:
        cancel.finish()


@dataclass
class _Armed:
    deadline: float  # time.monotonic()
    wrapper: Any  # the Django DatabaseWrapper of the request's thread
    cut: Any = None  # the psycopg connection last cut, never cut twice
    ended: threading.Event = field(default_factory=threading.Event)  # set by `disarm`


class Watchdog:
    """Cuts the database connection of requests that overrun their deadline (see the module docstring).

    `arm(wrapper, seconds)` returns a token for `disarm(token)`; both are a dict store, cheap enough for
    every request. One daemon thread per process scans the armed requests every `interval` seconds, so a
    cut starts at most `interval` late; each cut runs on a short-lived thread of its own (the cancel may
    wait up to `cancel_timeout` seconds on a frozen server, the grace `grace` seconds), so one stuck cut
    never delays another. A request past its deadline stays armed until `disarm`: a connection it opens
    later is cut too. `started` counts the cuts started, `cuts` the connections whose socket a cut shut
    down (a cut the cancel alone ended shuts nothing). Thread-safe.
    """

    def __init__(self, interval: float = 0.25, cancel_timeout: float = CANCEL_TIMEOUT, grace: float = CUT_GRACE):
        self.interval = interval
        self.cancel_timeout = cancel_timeout
        self.grace = grace
        self._armed: dict[int, _Armed] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # disarm vs. the socket shutdown of a cut
        self._stopped = threading.Event()
        self.started = 0
        self.cuts = 0

    def arm(self, wrapper: Any, seconds: float) -> int:
        """Watch `wrapper` (a Django DatabaseWrapper of the calling thread) for `seconds` from now."""
        if self._thread is None:
            self._start()
        token = next(self._ids)
        self._armed[token] = _Armed(time.monotonic() + seconds, wrapper)
        return token

    def disarm(self, token: int) -> None:
        """Stop watching; an unknown token is ignored. Once this returns, no cut shuts this request's socket."""
        with self._lock:
            armed = self._armed.pop(token, None)
        if armed is not None:
            armed.ended.set()

    def stop(self) -> None:
        """End the scanning thread after its current scan (tests' own watchdogs; the process's never stops)."""
        self._stopped.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            now = time.monotonic()
            for token, armed in list(self._armed.items()):
                if armed.deadline <= now:
                    try:
                        self._scan(token, armed)
                    except Exception:  # the watchdog must outlive anything a cut runs into
                        logger.exception("the request deadline watchdog could not cut a connection")

    def _scan(self, token: int, armed: _Armed) -> None:
        """Start the cut of `armed`'s connection, if it has one open that was not cut yet."""
        raw = getattr(armed.wrapper, "connection", None)
        if raw is None or raw is armed.cut:  # not connected yet (a later scan cuts it), or cut already
            return
        handles = _handles(raw)
        if handles is None:
            return
        if token not in self._armed:  # ended meanwhile
            os.close(handles[0])
            for cancel in handles[1]:
                cancel.finish()
            return
        armed.cut = raw
        self.started += 1
        threading.Thread(
            target=self._cut, args=(token, armed, raw, *handles), name="db-deadline-cut", daemon=True
        ).start()

    def _cut(self, token: int, armed: _Armed, raw: Any, fd: int, cancels: list[Any]) -> None:
        """Cancel the running statement (at most `cancel_timeout` s). When the server took the cancel, the
        request ends by itself within milliseconds — its statement cancelled (a 503), or, if it was already
        committing, finished (its real answer) — so it gets `grace` seconds to do so before the socket is
        shut down: shutting down a connection whose commit is under way would answer 503 for a write that
        happened. Without a cancel the server took (frozen, unreachable, libpq < 17) the socket is shut down
        at once. After a shutdown, the second cancel stops a statement the request sent after the first
        cancel was answered (it was between statements then), which would otherwise commit later.

        Nothing is shut down once the request ended (`disarm`) or closed the connection. A cancel that
        reaches the server after the request ended finds the backend idle, and PostgreSQL ignores it; only
        if the thread's next request had started a statement within those milliseconds does that statement
        fail, with a 503 and nothing written.
        """
        first, again = [*cancels, None, None][:2]
        shut = False
        try:
            with socket.socket(fileno=fd) as sock:  # closes the duplicate whatever happens
                taken = first is not None and _cancel(first, self.cancel_timeout)
                first = None
                if taken:
                    give_up = time.monotonic() + self.grace
                    while not armed.ended.wait(0.01):
                        if raw.closed or time.monotonic() >= give_up:
                            break
                with self._lock:
                    shut = token in self._armed and not raw.closed
                    if shut:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)  # acts on the shared socket: the owner's wait returns
                        self.cuts += 1
            if shut and taken and again is not None:
                _cancel(again, self.cancel_timeout)
                again = None
        finally:
            for cancel in (first, again):
                if cancel is not None:
                    cancel.finish()


watchdog = Watchdog()


@contextlib.contextmanager
def request_deadline(seconds: float, using: str = "default"):
    """Cut this thread's connection `using` if the block is still running after `seconds` (0: never)."""
    if seconds <= 0:
        yield
        return
    token = watchdog.arm(connections[using], seconds)
    try:
        yield
    finally:
        watchdog.disarm(token)
