"""How many gunicorn workers start and what stops the server at start (`config.server.web_concurrency`,
`workers_from_command_line`, config/gunicorn.conf.py `on_starting`); the same through a real gunicorn and
bin/serve: tests/chaos/test_server_settings.py."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from gunicorn.config import Config

from config.server import web_concurrency, workers_from_command_line


@pytest.mark.parametrize(
    ("value", "count"), [(None, 7), ("", 7), ("  ", 7), ("1", 1), (" 3 ", 3), ("16", 16), ("+2", 2)]
)
def test_web_concurrency_or_the_default(value, count):
    environ = {} if value is None else {"WEB_CONCURRENCY": value}
    assert web_concurrency(environ, 7) == count


@pytest.mark.parametrize("value", ["0", "-1", "abc", "2.5", "1e3", "two", "0x10", "3 4"])
def test_anything_but_a_whole_number_from_one_is_refused(value):
    with pytest.raises(ValueError, match=rf"WEB_CONCURRENCY must be a whole number .*; got {value!r}"):
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


def _on_starting(monkeypatch, *, argv, environ, num_workers):
    """Run the config's on_starting with `argv` as gunicorn's command line; return the server it set."""
    conf = runpy.run_path(str(Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"))
    for name in ("WEB_CONCURRENCY", "WEB_CPU_AFFINITY", "GUNICORN_CMD_ARGS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(conf["sys"], "argv", ["gunicorn", *argv])
    cfg = Config()
    server = SimpleNamespace(cfg=cfg, num_workers=num_workers)
    conf["on_starting"](server)
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
        (["--workers", "0", "app"], {}, 0, "--workers must be 1 or more; got 0"),
        (["app"], {"WEB_CPU_AFFINITY": "yes"}, 2, "WEB_CPU_AFFINITY must be one of pin, off"),
    ],
)
def test_on_starting_refuses_with_a_runtime_error_gunicorn_prints(monkeypatch, argv, environ, num_workers, message):
    with pytest.raises(RuntimeError, match=message):
        _on_starting(monkeypatch, argv=argv, environ=environ, num_workers=num_workers)
