"""The server's own settings as `bin/serve` and gunicorn read them (config/gunicorn.conf.py `on_starting`,
`config.server.web_concurrency`, `cpu_affinity_mode`): how many workers start — `--workers` over
`--env WEB_CONCURRENCY=…` over the environment over one per CPU — and a bad value stops the server with
one readable line before it listens, never a traceback or a master with no worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from .harness import ROOT, Server, free_port, wait_until

CONCURRENCY = "WEB_CONCURRENCY must be a whole number of worker processes, 1 to 256;"


def _gunicorn(environ: dict[str, str], args: list[str]) -> subprocess.CompletedProcess:
    """gunicorn with the project's config, as `bin/serve` starts it, run until it exits (at most 60 s)."""
    argv = [
        sys.executable, "-m", "gunicorn", "config.asgi:application",
        "--config", str(ROOT / "config" / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{free_port()}", *args,
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in ("WEB_CPU_AFFINITY", "WEB_CONCURRENCY")}
    env.update(environ, DJANGO_SETTINGS_MODULE="config.settings")
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("environ", "args", "message"),
    [
        ({"WEB_CPU_AFFINITY": "Sometimes"}, [], "WEB_CPU_AFFINITY must be one of pin, off (any case); got 'Sometimes'"),
        ({}, ["--env", "WEB_CPU_AFFINITY=sometimes"], "WEB_CPU_AFFINITY must be one of pin, off"),
        ({"WEB_CONCURRENCY": "0"}, [], f"{CONCURRENCY} got '0'"),
        ({}, ["--env", "WEB_CONCURRENCY=abc"], f"{CONCURRENCY} got 'abc'"),
        ({}, ["--env", "WEB_CONCURRENCY=2.5"], f"{CONCURRENCY} got '2.5'"),
        ({}, ["--env", "WEB_CONCURRENCY=-1"], f"{CONCURRENCY} got '-1'"),
        ({}, ["--workers", "0"], "--workers must be 1 to 256; got 0"),
    ],
    ids=["affinity", "affinity--env", "concurrency-0", "concurrency--env-abc", "concurrency-2.5", "concurrency--1",
         "--workers-0"],
)  # fmt: skip
def test_a_bad_value_stops_the_server_before_it_listens(environ, args, message):
    done = _gunicorn(environ, args)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"Error: {message}" in out
    assert "Listening at" not in out
    assert "Booting worker" not in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "environ",
    [{"WEB_CONCURRENCY": "abc"}, {"WEB_CONCURRENCY": "0"}, {"WEB_CPU_AFFINITY": "always"}],
    ids=["abc", "0", "affinity"],
)
def test_bin_serve_refuses_a_bad_value_before_it_starts_anything(environ):
    """gunicorn itself fails on a non-integer WEB_CONCURRENCY with a traceback when it is imported, before
    our config runs: bin/serve says what is wrong first, before migrating or starting a database (the
    DATABASE_URL here leads nowhere, so reaching `migrate` would fail differently)."""
    env = {key: value for key, value in os.environ.items() if key not in ("WEB_CPU_AFFINITY", "WEB_CONCURRENCY")}
    env.update(environ, DATABASE_URL="postgres://nobody@127.0.0.1:1/none")
    done = subprocess.run([str(ROOT / "bin" / "serve")], env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    name, value = next(iter(environ.items()))
    assert f"==> {name} must be" in out and f"got {value!r}" in out
    assert "Traceback" not in out and "migrat" not in out.lower()


def test_env_web_concurrency_is_the_number_of_workers(cluster):
    """`--env WEB_CONCURRENCY=3` (here through GUNICORN_CMD_ARGS) wins over the environment's 1: the config
    file read the environment before gunicorn applied `--env`, on_starting reads it again."""
    env = {"WEB_CONCURRENCY": "1", "GUNICORN_CMD_ARGS": "--env WEB_CONCURRENCY=3"}
    with Server(cluster, workers=3, env=env) as server:
        assert len(server.worker_pids()) == 3


def test_workers_on_the_command_line_win_over_web_concurrency(cluster):
    env = {"WEB_CONCURRENCY": "3", "GUNICORN_CMD_ARGS": "--env WEB_CONCURRENCY=3 --workers 1"}
    with Server(cluster, workers=1, env=env) as server:
        assert len(server.worker_pids()) == 1


def test_a_reload_keeps_the_env_web_concurrency(cluster):
    """SIGHUP: gunicorn re-reads the config with `--env` taken out of the environment, then applies it
    again; on_reload counts with it, so the reloaded server runs 3 workers, not one per CPU."""
    env = {"WEB_CONCURRENCY": "1", "GUNICORN_CMD_ARGS": "--env WEB_CONCURRENCY=3"}
    with Server(cluster, workers=3, env=env) as server:
        before = set(server.worker_pids())
        os.kill(server.proc.pid, signal.SIGHUP)
        wait_until(lambda: not before & set(server.worker_pids()), 60, 0.2, "the old workers to be replaced")
        wait_until(server._all_workers_serving, 60, 0.2, "3 reloaded workers to serve")
        time.sleep(1)  # a surplus worker would be stopped, a missing one spawned, within a second
        assert len(server.worker_pids()) == 3
