"""One CPU per worker process (`WEB_CPU_AFFINITY`, config/gunicorn.conf.py; docs/decisions.md "One CPU per
worker"), checked on the server as `bin/serve` runs it: every thread of a worker — the event loop's, the
Django threads — runs on the worker's CPU, the workers are on different CPUs, a worker that replaces a
killed one takes its CPU, and `off` (the default) leaves the kernel free. A bad value stops the server at
start: tests/chaos/test_server_settings.py."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from .harness import Server, wait_until

ALLOWED = sorted(os.sched_getaffinity(0))


def _threads_affinity(pid: int) -> dict[int, frozenset[int]]:
    """Each thread id of process `pid` → the CPUs it may run on."""
    return {int(tid): frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}


def _worker_cpu(pid: int) -> int:
    """The one CPU every thread of worker `pid` is pinned to (asserts there is exactly one)."""
    sets = set(_threads_affinity(pid).values())
    assert len(sets) == 1, f"worker {pid}'s threads differ: {sets}"
    (cpus,) = sets
    assert len(cpus) == 1, f"worker {pid} is not pinned: {sorted(cpus)}"
    return next(iter(cpus))


def _busy(server: Server, owners) -> None:
    """Requests through Django on new connections (so on either worker), so Django threads exist and their
    affinity is checked with the event loop's; asserts some worker started one."""
    owner = owners[0]
    for _ in range(30):
        with httpx.Client(base_url=server.url, headers=owner.auth, timeout=10) as fresh:
            assert fresh.get(f"/api/v1/memories/{owner.store}").status_code == 200
    threads = sum(len(_threads_affinity(pid)) for pid in server.worker_pids())
    assert threads > len(server.worker_pids())


@pytest.mark.skipif(not 2 <= len(ALLOWED) <= 8, reason="one worker per CPU: 2 to 8 CPUs")
def test_each_worker_runs_on_a_cpu_of_its_own_and_a_replacement_takes_it(cluster, owners):
    # as many workers as CPUs (bin/serve's default), pinning asked for
    with Server(cluster, workers=len(ALLOWED), env={"WEB_CPU_AFFINITY": "pin"}) as server:
        _busy(server, owners)
        cpus = {pid: _worker_cpu(pid) for pid in server.worker_pids()}
        assert sorted(cpus.values()) == ALLOWED  # one each
        for pid in cpus:
            assert f"Worker {pid} pinned to CPU {cpus[pid]}" in server.log()

        victim = max(cpus, key=lambda pid: cpus[pid])  # a chooser that ignored the live workers would pick the lowest
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: victim not in server.worker_pids() and server._all_workers_serving(), 60, 0.2, "a replacement"
        )
        _busy(server, owners)
        after = {pid: _worker_cpu(pid) for pid in server.worker_pids()}
        (replacement,) = set(after) - set(cpus)
        assert after[replacement] == cpus[victim]
        assert sorted(after.values()) == ALLOWED


@pytest.mark.parametrize(
    ("workers", "env"),
    [
        (2, {}),  # the default
        (2, {"WEB_CPU_AFFINITY": "off"}),
        # gunicorn's --env wins over the environment, and only the value it applies is checked
        (2, {"WEB_CPU_AFFINITY": "sometimes", "GUNICORN_CMD_ARGS": "--env WEB_CPU_AFFINITY=off"}),
        pytest.param(1, {"WEB_CPU_AFFINITY": "pin"}, marks=pytest.mark.skipif(len(ALLOWED) < 2, reason="1 CPU")),
    ],
    ids=["default", "off", "--env-off-over-a-bad-environment", "fewer-workers-than-cpus"],
)
def test_unpinned_workers_run_on_every_cpu_the_master_has(cluster, owners, workers, env):
    with Server(cluster, workers=workers, env=env) as server:
        _busy(server, owners)
        master = frozenset(os.sched_getaffinity(server.proc.pid))
        for pid in server.worker_pids():
            assert set(_threads_affinity(pid).values()) == {master}
        assert "pinned to CPU" not in server.log()
