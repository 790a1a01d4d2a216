"""timestamptz values parsed by psycopg's C loader, with Django's meaning (config/postgresql/loaders.py)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

from config.postgresql.loaders import PSYCOPG_LOADER, TIMESTAMPTZ_OID, TimestamptzLoader, register_timestamptz_loader
from stores.models import Store
from tests.factories import StoreFactory

VALUES = [
    "2026-12-03 08:53:52.123456+00",
    "2026-12-03 08:53:52+00",
    "2000-02-29 23:59:59.999999+05:30",
    "1999-12-31 23:00:00-08",
    "0002-01-02 00:00:00+00",  # shown in every session zone within years 1..9999
    "9999-12-30 23:59:59.999999+00",
    "1970-01-01 00:00:00.5+00",
    "1883-11-18 12:00:00+00",  # before time zones: a seconds offset in some zones
]


def _raw_connection(session_zone: str) -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("context", None)
    params.pop("cursor_factory", None)
    raw = psycopg.connect(**params, autocommit=True)
    raw.execute("SELECT set_config('TimeZone', %s, false)", [session_zone])
    return raw


def _load_all(raw: psycopg.Connection, register) -> list[dt.datetime]:
    cursor = raw.cursor()
    register(cursor)
    literals = ", ".join(f"'{value}'::timestamptz" for value in VALUES)
    return list(cursor.execute(f"SELECT {literals}").fetchone())


@pytest.mark.django_db
@pytest.mark.parametrize("session_zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
@pytest.mark.parametrize("django_zone", [dt.UTC, zoneinfo.ZoneInfo("Asia/Kolkata"), None])
def test_the_same_values_and_tzinfo_as_djangos_loader(session_zone, django_zone):
    raw = _raw_connection(session_zone)
    try:
        ours = _load_all(raw, lambda cursor: register_timestamptz_loader(django_zone, cursor))
        djangos = _load_all(raw, lambda cursor: register_tzloader(django_zone, cursor))
    finally:
        raw.close()
    assert ours == djangos
    assert [value.tzinfo for value in ours] == [value.tzinfo for value in djangos]
    assert [value.utcoffset() for value in ours] == [value.utcoffset() for value in djangos]


@pytest.mark.django_db
def test_infinity_and_garbage_are_refused_as_djangos_loader_refuses_them():
    raw = _raw_connection("UTC")
    try:
        for literal in ("'infinity'::timestamptz", "'-infinity'::timestamptz"):
            with pytest.raises(psycopg.DataError):
                cursor = raw.cursor()
                register_timestamptz_loader(dt.UTC, cursor)
                cursor.execute(f"SELECT {literal}").fetchone()
            with pytest.raises(psycopg.DataError):
                cursor = raw.cursor()
                register_tzloader(dt.UTC, cursor)
                cursor.execute(f"SELECT {literal}").fetchone()
    finally:
        raw.close()


@pytest.mark.django_db
def test_django_connections_use_it_and_the_parse_runs_in_psycopgs_own_loader():
    connection.ensure_connection()
    loader_class = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    assert issubclass(loader_class, TimestamptzLoader)
    assert loader_class.timezone is connection.timezone  # so Django never re-registers its own per cursor
    loader = loader_class(TIMESTAMPTZ_OID, connection.connection)
    assert connection.timezone is dt.UTC  # the project's zone: UTC sessions, so psycopg's load is used as it is
    assert loader.load.__self__.__class__ is PSYCOPG_LOADER
    store = StoreFactory()
    loaded = Store.objects.values_list("created_at", flat=True).get(pk=store.pk)
    assert loaded == store.created_at and loaded.tzinfo is connection.timezone


def test_psycopgs_own_loader_is_the_c_one_with_the_binary_package():
    """The point of the change; if psycopg's binary package ever goes, this says so (values stay right)."""
    assert psycopg.pq.__impl__ == "binary"
    assert PSYCOPG_LOADER.__module__.startswith("psycopg_binary")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("zone", "local"),
    [("Asia/Kolkata", "0001-01-01 00:00:00"), ("America/St_Johns", "9999-12-31 23:59:59.999999")],
)
def test_the_first_and_last_local_instants_get_djangos_tzinfo_when_its_zone_is_the_sessions(zone, local):
    """With DATABASES TIME_ZONE set, Django's zone is the session's, and `load` was psycopg's own parse. For a
    value whose UTC instant lies outside years 1..9999 (local midnight of year 1 east of Greenwich, the last
    instant of 9999 west of it) psycopg returns a fixed-offset tzinfo, which Django's loader replaces by its
    zone: the same instant, but not Django's tzinfo."""
    django_zone = zoneinfo.ZoneInfo(zone)
    raw = _raw_connection(zone)
    try:
        values = []
        for register in (register_timestamptz_loader, register_tzloader):
            cursor = raw.cursor()
            register(django_zone, cursor)
            values.append(cursor.execute(f"SELECT '{local}'::timestamptz").fetchone()[0])
    finally:
        raw.close()
    ours, djangos = values
    assert djangos.tzinfo is django_zone
    assert ours == djangos and ours.tzinfo is djangos.tzinfo
