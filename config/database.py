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
  `DB_REQUEST_DEADLINE` seconds after it started, the watchdog shuts the request thread's database
  socket down; the blocked call fails at once with an OperationalError, which `config.errors` renders
  as 503 `overloaded_error`, and Django replaces the connection on the next request.

Every error these produce is a `django.db.OperationalError` (psycopg: `QueryCanceled`,
`LockNotAvailable`, a closed connection, a connect timeout) and so a 503 with `Retry-After`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connections


def budget_options() -> str:
    """The libpq `options` string that sets the request budgets, e.g. ``-c statement_timeout=5000 …``.

    Values are milliseconds (PostgreSQL's unit for both settings); 0 means no limit.
    """
    statement_ms = int(settings.DB_STATEMENT_TIMEOUT * 1000)
    lock_ms = int(settings.DB_LOCK_TIMEOUT * 1000)
    return f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"


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


def _cut(wrapper: Any) -> bool:
    """Shut down the socket of `wrapper`'s open psycopg connection; True when there was one to cut."""
    raw = getattr(wrapper, "connection", None)
    if raw is None:
        return False
    try:
        fd = raw.pgconn.socket
    except Exception:  # already closed, or never connected
        return False
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)  # acts on the shared socket: the owner's blocked wait returns
        return True
    return False


class Watchdog:
    """Cuts the database connection of requests that overrun their deadline (see the module docstring).

    `arm(wrapper, seconds)` returns a token for `disarm(token)`; both are a dict store, cheap enough for
    every request. One daemon thread per process scans the armed requests every `interval` seconds, so a
    cut happens at most `interval` late. Thread-safe.
    """

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self._armed: dict[int, tuple[float, Any]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.cuts = 0

    def arm(self, wrapper: Any, seconds: float) -> int:
        """Watch `wrapper` (a Django DatabaseWrapper of the calling thread) for `seconds` from now."""
        if self._thread is None:
            self._start()
        token = next(self._ids)
        self._armed[token] = (time.monotonic() + seconds, wrapper)
        return token

    def disarm(self, token: int) -> None:
        """Stop watching; a token already cut or disarmed is ignored."""
        self._armed.pop(token, None)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            now = time.monotonic()
            for token, (deadline, wrapper) in list(self._armed.items()):
                if deadline <= now and self._armed.pop(token, None) is not None and _cut(wrapper):
                    self.cuts += 1


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
