"""Our gunicorn protocol parses with gunicorn's C parser, as requirements.txt intends (issue 17).

gunicorn 27.0.1 decides between gunicorn_h1c and its pure-Python parser with flags it reads on the base
`ASGIProtocol`; `config.server` makes them visible there (see its comment). tests/chaos drives the
limits and protocol errors through a real server with this parser.
"""

from __future__ import annotations

import types

import gunicorn_h1c
from gunicorn.config import Config

from config.server import Protocol


def test_the_protocol_uses_the_c_parser():
    cfg = Config()
    worker = types.SimpleNamespace(cfg=cfg, log=None, asgi=None)
    protocol = Protocol(worker)
    protocol.transport = types.SimpleNamespace(get_extra_info=lambda name, default=None: ("127.0.0.1", 1))
    protocol._setup_callback_parser()
    assert isinstance(protocol._callback_parser, gunicorn_h1c.H1CProtocol)


def test_the_master_freezes_the_preloaded_application_before_each_fork():
    """config/gunicorn.conf.py's pre_fork moves what the master made into the permanent generation, so a
    worker's full collections never walk Django, the URLconf and every view again (issue 17)."""
    import gc
    import runpy
    from pathlib import Path
    from types import SimpleNamespace

    import config.asgi  # noqa: F401 - what preload_app loads in the master: Django, the URLconf, the lanes

    settings = runpy.run_path(str(Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"))
    cfg = Config()
    cfg.set("pre_fork", settings["pre_fork"])  # gunicorn checks it is a hook of (server, worker)
    assert settings["preload_app"] is True
    before = gc.get_freeze_count()
    try:
        cfg.pre_fork(SimpleNamespace(WORKERS={}, num_workers=1), SimpleNamespace())  # master, new worker
        assert gc.get_freeze_count() > before + 50_000
        assert not any(type(o).__name__ == "URLResolver" for o in gc.get_objects())  # frozen, not tracked
    finally:
        gc.unfreeze()


def test_every_standard_status_has_its_reason_phrase_in_gunicorns_status_lines():
    """gunicorn 27.0.1 wrote "HTTP/1.1 406 Unknown" (and 412, 416, …): config.server fills its table."""
    from http import HTTPStatus

    from gunicorn.asgi.protocol import _get_cached_status_line

    import config.server  # noqa: F401 - fills the table at import, as the server's workers do

    for status in (406, 412, 416, 423, 451):
        assert _get_cached_status_line((1, 1), status) == f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode()
    assert _get_cached_status_line((1, 1), 413) == b"HTTP/1.1 413 Payload Too Large\r\n"  # its own, kept
