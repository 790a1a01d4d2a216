"""Breaker round 3: the fast lanes' own error path (config/fastlane.py `_run`) against DRF's dispatch.

Each test sends the same request with the lanes on and off (`API_FAST_LANES = []`) and compares what the
client gets and what is logged. What held (and is not repeated here): the order of checks for two faults at
once (bad body + bad/malformed/revoked token, bad body + read-only token, bad body + stranger's or archived
store, read-only + archived, bad query + stranger, ...), the exact header lists (Request-Id position
included) of 201/400/401/404/409, the log lines of 4xx refusals and of a method's 500 and 503, a real
lock_timeout (503, same logs, the thread's next request works) and a connection cut by the request deadline.
"""

from __future__ import annotations

import logging
import re

import pytest
from django.db import OperationalError
from rest_framework.exceptions import ParseError

from config import errors, fastlane
from tests.foundation import test_fastlane as harness
from tests.foundation.test_api_stack import one_thread  # noqa: F401 (autouse: the front on one thread of ours)
from tests.foundation.test_fastlane import bearer, note_path, send, without_request_id

world, django_calls = harness.world, harness.django_calls  # the harness's fixtures

pytestmark = pytest.mark.django_db(transaction=True)

RID = re.compile(r"req_[0-9a-f]{24}")


def _records(caplog) -> list[tuple[str, str, str, bool]]:
    """(logger, level, message without request ids, has a traceback) of every record."""
    return [(r.name, r.levelname, RID.sub("req_X", r.getMessage()), r.exc_info is not None) for r in caplog.records]


def answered(settings, caplog, *args, **kwargs):
    """`send` with the lanes on, then off: for each (status, header names and values in order, body without
    the request id, log records)."""
    out = []
    lanes = settings.API_FAST_LANES
    with caplog.at_level(logging.DEBUG, logger="django.request"), caplog.at_level(logging.DEBUG, logger="memories"):
        for on in (True, False):
            caplog.clear()
            settings.API_FAST_LANES = lanes if on else []
            try:
                status, headers, body, request_id = send(*args, **kwargs)
            finally:
                settings.API_FAST_LANES = lanes
            out.append((status, list(headers.items()), without_request_id(body, request_id), _records(caplog)))
    return out


def _handler_breaks_on(monkeypatch, kind, make):
    """The project's exception handler fails (a bug in it, or the database under it) for an exception of `kind`."""
    describe = errors.describe

    def broken(exc):
        if isinstance(exc, kind):
            raise make()
        return describe(exc)

    monkeypatch.setattr(errors, "describe", broken)


# --- an exception the view's handle_exception does not turn into a response ---------------------------
# Lanes off, it leaves DRF's dispatch and Django answers it inside the API middleware: RequestIdMiddleware's
# process_exception (a database fault: 503 + Retry-After, one WARNING line) or handler500 (500, the API
# middleware's headers, django.request's "Internal Server Error" with the traceback). The lane lets it out
# of `answer`, and the ASGI front answers a bare 500 (Content-Type and Content-Length only) logged as
# "the WSGI application failed".


def test_an_exception_raised_by_the_exception_handler_is_answered_as_django_answers_it(
    settings, world, django_calls, monkeypatch, caplog
):
    _handler_breaks_on(monkeypatch, ParseError, lambda: RuntimeError("handler bug"))
    on, off = answered(settings, caplog, note_path(world["store"]), b'{"body_md": ', bearer(world["secret"]))
    assert off[0] == 500
    assert on == off


def test_a_database_fault_raised_by_the_exception_handler_is_a_503_as_with_the_lanes_off(
    settings, world, django_calls, monkeypatch, caplog
):
    _handler_breaks_on(monkeypatch, ParseError, lambda: OperationalError("server closed the connection unexpectedly"))
    on, off = answered(settings, caplog, note_path(world["store"]), b'{"body_md": ', bearer(world["secret"]))
    assert off[0] == 503  # RequestIdMiddleware.process_exception: fault_response
    assert on == off


# --- rendering the method's success fails (after its write) ---------------------------------------------
# Django's handler passes an exception of `response.render()` to process_exception, then to handler500.


def test_a_success_that_fails_to_render_is_answered_as_django_answers_it(
    settings, world, django_calls, monkeypatch, caplog
):
    def broken(self, *args, **kwargs):
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(fastlane.JSONRenderer, "render", broken)
    on, off = answered(settings, caplog, note_path(world["store"]), {"body_md": "once"}, bearer(world["secret"]))
    assert off[0] == 500
    assert on == off


def test_a_database_fault_while_rendering_a_success_is_a_503_as_with_the_lanes_off(
    settings, world, django_calls, monkeypatch, caplog
):
    def broken(self, *args, **kwargs):
        raise OperationalError("the connection was cut while rendering")

    monkeypatch.setattr(fastlane.JSONRenderer, "render", broken)
    on, off = answered(settings, caplog, note_path(world["store"]), {"body_md": "once"}, bearer(world["secret"]))
    assert off[0] == 503
    assert on == off


# --- the Django request after authentication ------------------------------------------------------------


@pytest.mark.parametrize("who", ["secret", "revoked"])
def test_the_django_request_carries_user_and_auth_as_drf_sets_them(settings, world, django_calls, caplog, who):
    """DRF's Request sets `user` and `auth` on the Django request too (its setters; `_not_authenticated` after a
    failed authentication: AnonymousUser, None). Django's request log hands that request to every handler
    (`record.request`: Sentry, AdminEmailHandler's report). The lane's LaneRequest keeps them to itself."""
    path = note_path(world["stranger_store"]) if who == "secret" else note_path(world["store"])  # 404 / 401
    seen = {}
    lanes = settings.API_FAST_LANES
    with caplog.at_level(logging.DEBUG, logger="django.request"):
        for on in (True, False):
            caplog.clear()
            settings.API_FAST_LANES = lanes if on else []
            try:
                status = send(path, {"body_md": "a"}, bearer(world[who]))[0]
            finally:
                settings.API_FAST_LANES = lanes
            (record,) = [r for r in caplog.records if r.name == "django.request"]
            user, auth = getattr(record.request, "user", "<unset>"), getattr(record.request, "auth", "<unset>")
            seen[on] = (status, type(user).__name__, str(user), type(auth).__name__)
    assert seen[True] == seen[False]
