"""The benchmarks' CPU meter (bench/common.py `MachineMeter`, issue 17): it must count the CPU of the client
processes and of their PostgreSQL backends over exactly the measured window.

These tests check the instrument, not the product's speed: they compare CPU time a job is known to spend
per call with what the meter attributes to it, so a loaded machine changes neither side.
"""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from bench import common
from bench.common import Job, MachineMeter, PgJob, pg_params, quiet_load, run_load


class _Burn(Job):
    """Spends ~2 ms of its own CPU per call."""

    def call(self, i: int) -> None:
        end = time.process_time() + 0.002
        while time.process_time() < end:
            pass


class _HeavyQuery(PgJob):
    """Each call makes its PostgreSQL backend do ~1-10 ms of CPU and the client next to none."""

    def call(self, i: int) -> None:
        self.pg.execute("SELECT count(*) FROM generate_series(1, 200000)").fetchone()


def test_client_cpu_is_counted_per_call():
    result = run_load([_Burn(), _Burn()], duration=0.6, warmup=2, meter=MachineMeter())
    per = result.machine.per_request_ms(result.requests)
    assert result.machine.server == 0.0  # no server process given
    assert 1.5 <= per["clients"] <= 4.0, per  # the 2 ms each call burns, plus the loop's own cost
    assert result.machine.busy >= result.machine.clients * 0.9
    assert 0.5 <= result.machine.wall <= 1.0


@pytest.mark.django_db
def test_backend_cpu_of_client_connections_is_counted():
    """The work a client's queries cause in its PostgreSQL backend is the database's share, not the client's.

    (Clients also keep their connections open until the parent has read /proc: a backend that exited
    during that read could vanish from the count. That race is too narrow to provoke reliably here.)"""
    params = {**pg_params(), "dbname": "postgres"}
    result = run_load([_HeavyQuery(params), _HeavyQuery(params)], duration=0.6, warmup=2, meter=MachineMeter())
    per = result.machine.per_request_ms(result.requests)
    if per["database"] is None:
        pytest.skip("PostgreSQL does not run on this machine: its processes cannot be read")
    assert per["database"] >= 0.5, per  # the query's work is the backend's, never missing
    assert per["database"] > per["clients"], per


@pytest.mark.parametrize(
    ("steals", "windows", "kept"),
    [
        ([0.01], 1, 0.01),  # quiet at once: one window
        ([0.30, 0.02], 2, 0.02),  # measured again, the quiet window kept
        ([0.30, 0.20, 0.25], 3, 0.20),  # never quiet: three windows, the least steal kept
    ],
)
def test_a_window_with_steal_is_measured_again_and_the_quietest_kept(monkeypatch, capsys, steals, windows, kept):
    """`quiet_load` (the note and file benchmarks): steal above `STEAL_LIMIT` means another window with
    fresh jobs, at most three, and every window set aside is printed."""
    given = iter(steals)
    monkeypatch.setattr(common.MachineMeter, "stop", _stop_with(common.MachineMeter.stop, given))
    made = []

    def make_jobs():
        made.append(1)
        return [_Burn()]

    result = quiet_load(make_jobs, duration=0.2, warmup=1, server_pid=None, label="burn")
    assert len(made) == windows
    assert result.machine.steal == pytest.approx(kept * result.machine.wall * (os.cpu_count() or 1))
    assert capsys.readouterr().out.count("set aside: burn") == windows - 1


def _stop_with(stop, steals):
    """`MachineMeter.stop`, with the window's steal replaced by the next of `steals` (a share of capacity)."""

    def fake(self):
        machine = stop(self)
        share = next(steals)
        return dataclasses.replace(machine, steal=share * machine.wall * (os.cpu_count() or 1))

    return fake


@pytest.mark.django_db
def test_a_benchmark_never_recreates_a_database_that_exists(capsys):
    """`bench_database` dropped and re-created `bench_<name>` unasked: a second run, or one kept with --keep,
    lost its database under it (a tester). It now exits 75 naming it and touches nothing."""
    from django.db import connection

    existing = connection.settings_dict["NAME"]  # the test database: it certainly exists
    with pytest.raises(SystemExit) as stopped:
        common.refuse_existing(existing)
    assert stopped.value.code == 75 and f"database {existing} already exists" in capsys.readouterr().err
    assert common.refuse_existing(f"bench_absent_{os.getpid()}") is None
