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
