"""`config.server.UnfinishedOnPurpose`: gunicorn's ERROR about an unfinished response is dropped only for
a streamed answer config/asgi.py cut on purpose (and logged itself); tests/chaos/test_stream_ends.py checks
the same through a real server."""

from __future__ import annotations

import asyncio
import logging

from config.server import UnfinishedOnPurpose, stream_cut

GUNICORN_LINE = "ASGI application returned without completing the response; closing the connection"


def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("gunicorn.error", level, __file__, 1, msg, (), None)


async def app_then_log(cut: bool, msg: str) -> bool:
    """As gunicorn does: await the application in the request's task, then log in that same task."""

    async def app() -> None:
        if cut:
            stream_cut.set(True)

    await app()
    return UnfinishedOnPurpose().filter(record(msg))


def test_the_line_is_dropped_after_a_cut_made_in_the_same_task():
    assert asyncio.run(app_then_log(True, GUNICORN_LINE)) is False


def test_the_line_passes_when_the_application_forgot_to_finish():
    assert asyncio.run(app_then_log(False, GUNICORN_LINE)) is True


def test_other_errors_pass_after_a_cut():
    assert asyncio.run(app_then_log(True, "Error in ASGI application")) is True


def test_a_cut_in_one_request_does_not_hide_the_next_requests_line():
    """Each request is its own task: a cut in one leaves the flag unset in the next."""

    async def two_requests() -> list[bool]:
        first = await asyncio.create_task(app_then_log(True, GUNICORN_LINE))
        second = await asyncio.create_task(app_then_log(False, GUNICORN_LINE))
        return [first, second]

    assert asyncio.run(two_requests()) == [False, True]
