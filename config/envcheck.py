"""The streamed-answer settings read from the environment, checked once, for `config.settings` and for the
server's start check (`config.server.startup_problem`, which says what is wrong in one line before gunicorn
starts; the settings raise ImproperlyConfigured for every other entry point, `manage.py` included).

A breaker set `STREAM_SECONDS=-1` (every export cut, its client told so), `STREAM_SEND_TIMEOUT=0`,
`STREAM_SPOOL_BYTES=-5` (taken silently), `STREAM_SECONDS=abc` (a 39-line traceback ending in "could not
convert string to float: ''") and `STREAM_THREADS=0` (every export refused): each is refused naming the
variable, its range and the value given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_BLANK = " \t\r\n"
DEFAULT_WEB_THREADS = 8  # Django threads per server process when WEB_THREADS is unset (config/settings.py)


def _raw(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip(_BLANK)
    return value or None


def whole_number(
    environ: Mapping[str, str], name: str, default: Any, *, minimum: int, maximum: int, noun: str = ""
) -> Any:
    """The whole number `name` gives (ASCII digits, `minimum`..`maximum`; surrounding ASCII blanks ignored),
    `default` when unset or blank. Raises ValueError naming the variable, `noun` (what it counts), the range
    and the value given: `2.5`, `1_000` or other scripts' digits are typos. The one check of every count in
    the environment (`config.server`'s WEB_CONCURRENCY and WEB_THREADS too)."""
    raw = _raw(environ, name)
    if raw is None:
        return default
    value = int(raw) if raw.isascii() and raw.isdigit() else None
    if value is None or not minimum <= value <= maximum:
        counted = f" of {noun}" if noun else ""
        raise ValueError(f"{name} must be a whole number{counted}, {minimum} to {maximum}; got {environ.get(name)!r}")
    return value


_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def seconds(environ: Mapping[str, str], name: str, default: float, *, minimum: float, maximum: float) -> float:
    """The number of seconds `name` gives, a plain decimal from `minimum` to `maximum`, `default` when unset
    or blank. Raises ValueError naming the variable, the range and the value given (`1_0`, `1e3`, `nan`,
    other scripts' digits and 0.000001 — which cut every answer as 0 did, a breaker — included)."""
    raw = _raw(environ, name)
    if raw is None:
        return default
    value = float(raw) if _DECIMAL.fullmatch(raw) else math.nan
    if not (minimum <= value <= maximum):  # also refuses nan
        raise ValueError(
            f"{name} must be a number of seconds from {minimum:g} to {maximum:g}; got {environ.get(name)!r}"
        )
    return value


_STREAMS = "streamed answers"


def stream_settings(environ: Mapping[str, str], web_threads: int) -> dict[str, Any]:
    """`STREAM_SEND_TIMEOUT`, `STREAM_SECONDS`, `STREAM_THREADS` (default: half of `web_threads`, at least 1),
    `STREAM_THREADS_PER_USER`, `STREAM_SPOOL_BYTES` and `STREAM_SPOOL_MEMORY_BYTES` (README, "Configuration")
    from `environ`, by name. Raises ValueError for the first one out of its range."""
    return {
        "STREAM_SEND_TIMEOUT": seconds(environ, "STREAM_SEND_TIMEOUT", 30.0, minimum=1.0, maximum=3600.0),
        "STREAM_SECONDS": seconds(environ, "STREAM_SECONDS", 900.0, minimum=1.0, maximum=7 * 24 * 3600.0),
        # at most every Django thread of the process (the default is half of them)
        "STREAM_THREADS": whole_number(
            environ, "STREAM_THREADS", max(1, web_threads // 2), minimum=1, maximum=max(1, web_threads), noun=_STREAMS
        ),
        "STREAM_THREADS_PER_USER": whole_number(
            environ, "STREAM_THREADS_PER_USER", 1, minimum=1, maximum=256, noun=_STREAMS
        ),
        "STREAM_SPOOL_BYTES": whole_number(
            environ, "STREAM_SPOOL_BYTES", 256 * 1024 * 1024, minimum=0, maximum=2**40, noun="bytes"
        ),
        "STREAM_SPOOL_MEMORY_BYTES": whole_number(
            environ, "STREAM_SPOOL_MEMORY_BYTES", 1024 * 1024, minimum=0, maximum=2**32, noun="bytes"
        ),
    }
