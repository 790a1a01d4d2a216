"""A timestamptz loader with Django's meaning and psycopg's C parser (issue 17).

Django registers `psycopg_any.BaseTzLoader`, a subclass of psycopg's *Python* loader (its C loader cannot
be subclassed), so every ``timestamptz`` a query returns is parsed with a regular expression in Python:
about 5 µs each, seven per note. This loader keeps Django's contract — the value psycopg would load, with
its tzinfo replaced by the connection's Django time zone (`timezone`, None to make it naive) — but parses
with the loader psycopg itself would use (C when psycopg's binary package is installed).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
from psycopg import adapt
from psycopg.pq import Format

TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
# psycopg's own text loader for timestamptz: the C one when psycopg's binary package is installed.
PSYCOPG_LOADER = psycopg.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
_PROBE = b"2000-01-01 00:00:00+00"


class TimestamptzLoader(adapt.Loader):
    """Load a PostgreSQL ``timestamptz`` (text format) as Django's loader does, parsed by psycopg's loader.

    `timezone` (class attribute, set per registration like Django's `SpecificTzLoader`): the tzinfo every
    value gets (None: naive). Django compares it with its connection's time zone before each cursor, as it
    does for its own loader. When the session time zone is UTC and Django's is `datetime.timezone.utc` (the
    project's settings), psycopg's parse already carries that very tzinfo for every value, and `load` is
    psycopg's loader itself: no Python frame per value. Errors (``infinity``, a malformed value) are psycopg's.
    """

    timezone: dt.tzinfo | None = None

    def __init__(self, oid: int, context: Any = None):
        super().__init__(oid, context)
        parse = self._parse = PSYCOPG_LOADER(oid, context).load
        if self.timezone is dt.UTC and _tzinfo_of(parse) is dt.UTC:
            # A UTC session: every value reads +00 and psycopg returns it in UTC, tzinfo included. In another
            # zone psycopg falls back to a fixed offset for an instant outside years 1..9999 in UTC (local
            # midnight of year 1 east of Greenwich), whose tzinfo Django's loader replaces by its zone.
            self.load = parse

    def load(self, data: Any) -> dt.datetime:
        return self._parse(data).replace(tzinfo=self.timezone)


def _tzinfo_of(parse: Any) -> dt.tzinfo | None:
    try:
        return parse(_PROBE).tzinfo
    except Exception:  # a DateStyle psycopg cannot parse: every value goes through `load` (and fails there)
        return None


def register_timestamptz_loader(timezone: dt.tzinfo | None, context: Any) -> None:
    """Register `TimestamptzLoader` with `timezone` on a psycopg adapters context (a connection, a cursor,
    or an `AdaptersMap`), as Django's `psycopg_any.register_tzloader` registers its own."""

    class SpecificTzLoader(TimestamptzLoader):
        pass

    SpecificTzLoader.timezone = timezone
    adapters = context if isinstance(context, adapt.AdaptersMap) else context.adapters
    adapters.register_loader("timestamptz", SpecificTzLoader)
