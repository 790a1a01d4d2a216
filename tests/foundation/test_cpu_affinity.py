"""Choosing each gunicorn worker's CPU (`config.server.worker_cpu`, `cpu_affinity_mode`; the hooks in
config/gunicorn.conf.py are driven through a real server in tests/chaos/test_cpu_affinity.py)."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from config.server import cpu_affinity_mode, worker_cpu


def test_workers_spread_one_per_cpu_lowest_first():
    assert worker_cpu({0, 1}, [], 2) == 0
    assert worker_cpu({0, 1}, [0], 2) == 1
    assert worker_cpu([3, 1, 2], [1], 3) == 2  # the allowed set, not 0…n-1
    assert worker_cpu({0, 1}, [0, 1], 3) == 0  # more workers than CPUs: round robin


def test_a_replacement_takes_the_cpu_its_predecessor_left():
    assert worker_cpu({0, 1, 2, 3}, [0, 2, 3], 4) == 1
    assert worker_cpu({0, 1}, [0, 0, 1], 4) == 1
    assert worker_cpu({0, 1}, [None, 1], 2) == 0  # an unpinned live worker holds no CPU
    assert worker_cpu({0, 1}, [7, 1], 2) == 0  # a CPU no longer allowed holds nothing


def test_one_cpu_or_none_pins_nothing():
    assert worker_cpu({4}, [], 2) is None
    assert worker_cpu(set(), [0], 2) is None


def test_fewer_workers_than_cpus_are_not_pinned():
    """A worker's work outside the GIL then uses the spare CPUs (one worker pinned to one of two CPUs lost
    a quarter of its rate at 4 clients)."""
    assert worker_cpu({0, 1}, [], 1) is None
    assert worker_cpu({0, 1, 2, 3}, [], 2) is None
    assert worker_cpu({0, 1, 2, 3}, [0, 1, 2], 4) == 3


@pytest.mark.parametrize(
    ("value", "mode"), [(None, "off"), ("", "off"), ("pin", "pin"), (" PIN ", "pin"), (" OFF ", "off"), ("off", "off")]
)
def test_the_mode_comes_from_web_cpu_affinity(value, mode):
    environ = {} if value is None else {"WEB_CPU_AFFINITY": value}
    assert cpu_affinity_mode(environ) == mode


@pytest.mark.parametrize("value", ["on", "1", "auto", "pinned", "0"])
def test_anything_else_is_refused_with_the_accepted_values(value):
    with pytest.raises(ValueError, match=rf"WEB_CPU_AFFINITY must be one of pin, off \(any case\); got {value!r}"):
        cpu_affinity_mode({"WEB_CPU_AFFINITY": value})


def _gunicorn_conf():
    """config/gunicorn.conf.py as gunicorn loads it (a file, not a module)."""
    return runpy.run_path(str(Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"))


def test_a_cpu_that_cannot_be_taken_leaves_the_worker_unpinned_and_serving():
    """post_fork must never fail a worker's boot (gunicorn would replace it in a loop): a CPU that went
    offline since the master chose it is logged and the worker runs unpinned."""
    conf = _gunicorn_conf()
    before = os.sched_getaffinity(0)
    log = mock.Mock()
    worker = SimpleNamespace(pid=os.getpid(), memories_cpu=100_000)  # no such CPU: EINVAL
    conf["post_fork"](SimpleNamespace(log=log), worker)
    assert os.sched_getaffinity(0) == before
    log.warning.assert_called_once()
    assert "not pinned to CPU" in log.warning.call_args.args[0]
    log.info.assert_not_called()


def test_pre_fork_gives_each_new_worker_the_least_held_cpu(monkeypatch):
    conf = _gunicorn_conf()
    monkeypatch.setattr(conf["gc"], "freeze", lambda: None)  # not this test process's business
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("WEB_CPU_AFFINITY", "pin")
    live = {11: SimpleNamespace(memories_cpu=1)}
    new = SimpleNamespace()
    conf["pre_fork"](SimpleNamespace(WORKERS=live, num_workers=2), new)
    assert new.memories_cpu == 0
    conf["pre_fork"](SimpleNamespace(WORKERS=live, num_workers=1), new)
    assert new.memories_cpu is None  # fewer workers than CPUs
    for off in ("off", ""):  # "" or unset: the default, off
        monkeypatch.setenv("WEB_CPU_AFFINITY", off)
        conf["pre_fork"](SimpleNamespace(WORKERS=live, num_workers=2), new)
        assert new.memories_cpu is None
