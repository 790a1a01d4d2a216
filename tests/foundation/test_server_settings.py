"""How many gunicorn workers start and what stops the server at start (`config.server.web_concurrency`,
`workers_from_command_line`, config/gunicorn.conf.py `on_starting`); the same through a real gunicorn and
bin/serve: tests/chaos/test_server_settings.py."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
from gunicorn.config import Config

from config.server import web_concurrency, workers_from_command_line


@pytest.mark.parametrize(
    ("value", "count"),
    [(None, 7), ("", 7), ("  ", 7), ("\t", 7), ("1", 1), (" 3 ", 3), ("16", 16), ("03", 3), ("256", 256)],
)
def test_web_concurrency_or_the_default(value, count):
    environ = {} if value is None else {"WEB_CONCURRENCY": value}
    assert web_concurrency(environ, 7) == count


@pytest.mark.parametrize(
    "value",
    [
        "0",
        "-1",
        "abc",
        "2.5",
        "1e3",
        "two",
        "0x10",
        "3 4",
        "+2",
        "1_0",
        "\u0663",
        "\uff11",
        "\xa0",
        "257",
        "1000000000",
    ],
)
def test_anything_but_ascii_digits_from_1_to_256_is_refused(value):
    """Other scripts' digits, `1_0` and `+2` are what int() takes but nobody means; a huge count kept the
    master forking so long that it did not stop on TERM; a no-break space is not blank."""
    with pytest.raises(
        ValueError,
        match=re.escape(f"WEB_CONCURRENCY must be a whole number of worker processes, 1 to 256; got {value!r}"),
    ):
        web_concurrency({"WEB_CONCURRENCY": value}, 2)


@pytest.mark.parametrize(
    ("argv", "workers"),
    [
        (["config.asgi:application", "--bind", "127.0.0.1:1"], None),
        (["--workers", "3", "config.asgi:application"], 3),
        (["-w", "2", "--env", "WEB_CONCURRENCY=5"], 2),
        (["--env", "WEB_CONCURRENCY=5"], None),
        (["--workers=4", "--no-such-option"], 4),  # unknown options are gunicorn's business, not ours
    ],
)
def test_workers_from_the_command_line(argv, workers):
    assert workers_from_command_line(Config().parser(), argv) == workers


def _on_starting(monkeypatch, *, argv, environ, num_workers, hook="on_starting"):
    """Run the config's on_starting with `argv` as gunicorn's command line; return the server it set."""
    conf = runpy.run_path(str(Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"))
    for name in ("WEB_CONCURRENCY", "WEB_CPU_AFFINITY", "GUNICORN_CMD_ARGS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(conf["sys"], "argv", ["gunicorn", *argv])
    cfg = Config()
    server = SimpleNamespace(cfg=cfg, num_workers=num_workers, WORKERS={}, log=mock.Mock())
    conf[hook](server)
    return server, conf


def test_on_starting_takes_web_concurrency_as_the_environment_has_it_now(monkeypatch):
    server, _ = _on_starting(monkeypatch, argv=["app"], environ={"WEB_CONCURRENCY": "5"}, num_workers=2)
    assert server.num_workers == 5


def test_on_starting_defaults_to_one_worker_per_allowed_cpu(monkeypatch):
    server, conf = _on_starting(monkeypatch, argv=["app"], environ={}, num_workers=99)
    assert server.num_workers == conf["_ALLOWED_CPUS"]


def test_on_starting_keeps_workers_given_on_the_command_line(monkeypatch):
    server, _ = _on_starting(monkeypatch, argv=["-w", "1", "app"], environ={"WEB_CONCURRENCY": "5"}, num_workers=1)
    assert server.num_workers == 1


@pytest.mark.parametrize(
    ("argv", "environ", "num_workers", "message"),
    [
        (["app"], {"WEB_CONCURRENCY": "0"}, 0, "WEB_CONCURRENCY must be"),
        (["--workers", "0", "app"], {}, 0, "--workers must be 1 to 256; got 0"),
        (["--workers", "300", "app"], {}, 300, "--workers must be 1 to 256; got 300"),
        (["app"], {"WEB_CPU_AFFINITY": "yes"}, 2, "WEB_CPU_AFFINITY must be one of pin, off"),
    ],
)
def test_on_starting_refuses_with_a_runtime_error_gunicorn_prints(monkeypatch, argv, environ, num_workers, message):
    with pytest.raises(RuntimeError, match=message):
        _on_starting(monkeypatch, argv=argv, environ=environ, num_workers=num_workers)


def test_on_reload_settles_the_workers_again_with_env_applied(monkeypatch):
    """gunicorn re-reads the config file with `--env` taken out of the environment and then applies it
    again: on_reload counts with it (a HUP kept 3 workers of `--env WEB_CONCURRENCY=3`, not 2)."""
    server, _ = _on_starting(
        monkeypatch, argv=["app"], environ={"WEB_CONCURRENCY": "3"}, num_workers=2, hook="on_reload"
    )
    assert server.num_workers == 3 and server.cfg.workers == 3


def test_on_reload_keeps_the_workers_when_the_value_went_bad(monkeypatch):
    conf = None
    server, conf = _on_starting(monkeypatch, argv=["app"], environ={}, num_workers=2, hook="on_reload")
    server.WORKERS = {11: object(), 12: object()}
    monkeypatch.setenv("WEB_CONCURRENCY", "lots")
    conf["on_reload"](server)  # never raises: a reload must not stop a serving master
    assert server.num_workers == 2 and server.cfg.workers == 2
    assert "keeping 2 workers" in server.log.error.call_args.args[0] % server.log.error.call_args.args[1:]


def test_a_bad_affinity_at_fork_time_starts_the_worker_unpinned_and_never_raises(monkeypatch):
    """A reload can bring a bad WEB_CPU_AFFINITY (`--env` from a re-read config): pre_fork runs in the
    serving master, where raising stopped it; it logs and forks the worker unpinned."""
    conf = runpy.run_path(str(Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"))
    monkeypatch.setattr(conf["gc"], "freeze", lambda: None)
    monkeypatch.setenv("WEB_CPU_AFFINITY", "bogus")
    server, worker = SimpleNamespace(WORKERS={}, num_workers=2, log=mock.Mock()), SimpleNamespace()
    conf["pre_fork"](server, worker)
    assert worker.memories_cpu is None
    assert "WEB_CPU_AFFINITY must be one of" in server.log.error.call_args.args[1].args[0]
    reloaded, _ = _on_starting(
        monkeypatch, argv=["app"], environ={"WEB_CPU_AFFINITY": "bogus"}, num_workers=2, hook="on_reload"
    )
    assert "workers start unpinned" in reloaded.log.error.call_args_list[0].args[0]


@pytest.mark.parametrize(("value", "status"), [("", 0), ("  ", 0), ("3", 0), ("abc", 1), ("0", 1)])
def test_the_docker_command_checks_the_server_variables_before_anything_starts(value, status):
    """The Dockerfile's CMD (run with `sh` as Docker does, its migrate and gunicorn replaced by a marker):
    a blank WEB_CONCURRENCY is the default, a bad one one line and exit 1 before migrating."""
    root = Path(__file__).resolve().parents[2]
    line = next(line for line in (root / "Dockerfile").read_text().splitlines() if line.startswith("CMD "))
    argv = json.loads(line[4:])
    assert argv[:2] == ["sh", "-c"] and "python manage.py migrate" in argv[2]
    script = argv[2].replace("python manage.py migrate", "echo STARTED && exit 0 && python manage.py migrate")
    env = {**os.environ, "WEB_CONCURRENCY": value, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("WEB_CPU_AFFINITY", None)
    done = subprocess.run(["sh", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == status, done.stderr
    assert ("STARTED" in done.stdout) is (status == 0)
    if status:
        assert done.stderr.startswith("==> WEB_CONCURRENCY must be") and "Traceback" not in done.stderr


@pytest.mark.parametrize(("threads", "stream", "poll"), [(1, 1, 0), (2, 1, 1), (3, 1, 1), (8, 4, 2), (16, 8, 4)])
def test_waiting_polls_never_take_every_thread_by_default(threads, stream, poll):
    """POLL_WAITERS defaults to a quarter of WEB_THREADS, at least one, but never all of them: with one
    thread a waiting poll held it for `block_ms` and every other request of the process queued behind it."""
    code = "from django.conf import settings; print(settings.STREAM_THREADS, settings.POLL_WAITERS)"
    environ = {k: v for k, v in os.environ.items() if k not in ("STREAM_THREADS", "POLL_WAITERS")}
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env={**environ, "WEB_THREADS": str(threads), "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out == [str(stream), str(poll)]


@pytest.mark.parametrize(
    ("value", "problem"),
    [("", None), (" 4 ", None), ("1", None), ("256", None), ("0", "WEB_THREADS must be"), ("-1", "WEB_THREADS must")]
    + [(bad, "WEB_THREADS must be") for bad in ("abc", "2.5", "257", "٣")],
)
def test_web_threads_are_checked_before_the_server_starts(value, problem):
    """`WEB_THREADS=0` passed `python -m config.server` and then failed every worker's import with a traceback
    (ThreadPoolExecutor: max_workers must be at least 1); now it is the start check's one line, exit 1."""
    from config.server import startup_problem

    found = startup_problem({"WEB_THREADS": value})
    assert (found is None) if problem is None else found.startswith(problem)
    done = subprocess.run(
        [sys.executable, "-m", "config.server"],
        env={**os.environ, "WEB_THREADS": value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == (0 if problem is None else 1), done.stderr
    assert "Traceback" not in done.stderr


STREAMS = "whole number of streamed answers"


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("STREAM_SECONDS", "-1", "STREAM_SECONDS must be a number of seconds from 1 to"),  # every export cut
        ("STREAM_SECONDS", "abc", "STREAM_SECONDS must be a number of seconds from 1 to"),  # was a traceback
        ("STREAM_SEND_TIMEOUT", "0", "STREAM_SEND_TIMEOUT must be a number of seconds from 1 to 3600"),
        ("STREAM_SEND_TIMEOUT", "0.000001", "STREAM_SEND_TIMEOUT must be a number of seconds from 1 to 3600"),
        ("STREAM_SEND_TIMEOUT", "nan", "STREAM_SEND_TIMEOUT must be a number of seconds from 1 to 3600"),
        ("STREAM_SEND_TIMEOUT", "1_0", "STREAM_SEND_TIMEOUT must be a number of seconds from 1 to 3600"),
        ("STREAM_THREADS", "0", f"STREAM_THREADS must be a {STREAMS}, 1 to 8"),  # every export refused
        ("STREAM_THREADS", "9", f"STREAM_THREADS must be a {STREAMS}, 1 to 8"),  # more than the threads
        ("STREAM_THREADS_PER_USER", "-1", f"STREAM_THREADS_PER_USER must be a {STREAMS}, 1 to 256"),
        ("STREAM_SPOOL_BYTES", "-5", "STREAM_SPOOL_BYTES must be a whole number of bytes, 0 to"),  # taken silently
        ("STREAM_SPOOL_BYTES", "0", None),  # no read-ahead: allowed
        ("STREAM_SEND_TIMEOUT", " 2.5 ", None),
    ],
)
def test_stream_settings_are_checked_before_the_server_starts(name, value, problem):
    """A breaker's STREAM_* values were taken silently or failed with a traceback: one line naming the
    variable, its range and the value, exit 1 — and the same check in the settings (`config.envcheck`)."""
    from config.server import startup_problem

    found = startup_problem({name: value})
    assert (found is None) if problem is None else found.startswith(problem), found
    done = subprocess.run(
        [sys.executable, "-m", "config.server"],
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == (0 if problem is None else 1), done.stderr
    assert "Traceback" not in done.stderr and (problem is None or problem in done.stderr)
