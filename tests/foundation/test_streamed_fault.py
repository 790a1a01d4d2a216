"""Streamed answers (the export) through the ASGI front (config/asgi.py `_Stream`).

A database fault after the view returned and before anything was sent is SPEC §2's 503, not a 500 (found
by a breaker: 6 of 8 parallel exports of a 200,000-entry store answered 500 after 8.4 s, when the front
still joined streamed bodies under one request deadline). A `StreamingHttpResponse` goes out block by
block: each block's database work under its own deadline, cut (no end) by a fault, a client that stops
reading, `STREAM_SECONDS`; a client that leaves stops the reading; `STREAM_THREADS` bounds the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import pytest
from django.db import OperationalError, connection
from django.http import StreamingHttpResponse

from config import asgi
from tests.foundation.test_api_stack import one_thread  # noqa: F401 (autouse: the front on one thread of ours)
from tests.foundation.test_faults import http_scope


def streaming_app(failure: Exception | None):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/x-ndjson")])

        def body():
            yield b'{"type": "header"}\n'
            if failure is not None:
                raise failure
            yield b'{"type": "end"}\n'

        return body()

    return app


def environ() -> dict:
    return {"REQUEST_METHOD": "GET", "PATH_INFO": "/api/v1/memories/x/export", "QUERY_STRING": ""}


def test_a_database_fault_in_a_streamed_body_is_a_503_with_retry_after(monkeypatch, caplog):
    monkeypatch.setattr(asgi, "django_application", streaming_app(OperationalError("server closed the connection")))
    status, head, body = asgi._call_django(environ())
    headers = {name.decode(): value.decode() for name, value in head}
    payload = json.loads(body)
    assert status == 503
    assert payload["error"]["type"] == "overloaded_error"
    assert headers["retry-after"] and headers["request-id"] == payload["request_id"]
    assert headers["content-type"].startswith("application/json")
    assert any("streamed answer failed" in record.getMessage() for record in caplog.records)
    assert all(record.exc_info is None for record in caplog.records)  # one WARNING line, no traceback


def test_a_complete_streamed_body_is_answered_whole(monkeypatch):
    monkeypatch.setattr(asgi, "django_application", streaming_app(None))
    status, head, body = asgi._call_django(environ())
    assert status == 200 and body == b'{"type": "header"}\n{"type": "end"}\n'
    assert (b"content-length", str(len(body)).encode()) in head


# --- a StreamingHttpResponse is sent block by block (config.asgi._Stream) --------------------------------


class Blocks:
    """A streamed body: `count` blocks, each after `pause` seconds; the block numbered `fail_at` raises a
    database fault instead. Records the blocks read and whether the response was closed."""

    def __init__(self, count: int, *, pause: float = 0.0, fail_at: int | None = None, query: bool = False):
        self.count, self.pause, self.fail_at, self.query = count, pause, fail_at, query
        self.read = 0
        self.closed = threading.Event()

    def __iter__(self):
        try:
            for number in range(self.count):
                time.sleep(self.pause)
                if number == self.fail_at:
                    raise OperationalError("server closed the connection unexpectedly")
                if self.query:  # each block reads the database, as the export's do
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT 1")
                self.read += 1
                yield b'{"block": %d}\n' % number
        finally:
            self.closed.set()


def streaming_response_app(blocks: Blocks):
    def app(environ, start_response):
        response = StreamingHttpResponse(iter(blocks), content_type="application/jsonl")
        start_response("200 OK", list(response.items()))
        response._resource_closers.append(blocks.closed.set)
        return response

    return app


def run(
    scope_path: str | dict = "/api/v1/memories/x/export",
    *,
    stalled_after: int | None = None,
    leave_after: int | None = None,
    linger: float = 0,
    slow: float = 0,
    disconnect_after: int | None = None,
) -> list[dict]:
    """The front's answer as the ASGI messages sent, for a GET of a path (or a whole ASGI scope).
    `stalled_after`: the client stops taking blocks after that many body messages (send never returns).
    `slow`: seconds each body message takes to send (a client slower than the reading).
    `disconnect_after`: `receive` says http.disconnect once that many body messages went out (and the server
    does not cancel the task itself: the front must notice).
    `leave_after`: the task is cancelled after that many body messages, as gunicorn does when the client
    goes away. `linger`: seconds the event loop lives on after the answer, as a server's does."""
    scope = http_scope("GET", scope_path) if isinstance(scope_path, str) else scope_path
    sent: list[dict] = []

    async def receive():
        while disconnect_after is not None and sum(m["type"] == "http.response.body" for m in sent) < disconnect_after:
            await asyncio.sleep(0.005)
        if disconnect_after is not None:
            return {"type": "http.disconnect"}
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)
        bodies = sum(1 for m in sent if m["type"] == "http.response.body")
        if stalled_after is not None and bodies > stalled_after:
            await asyncio.sleep(3600)
        if slow and message["type"] == "http.response.body":
            await asyncio.sleep(slow)

    async def main():
        task = asyncio.ensure_future(asgi.application(scope, receive, send))
        if leave_after is None:
            await task
            await asyncio.sleep(linger)
            return
        while sum(1 for m in sent if m["type"] == "http.response.body") < leave_after:
            await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return sent


def bodies(sent: list[dict]) -> list[dict]:
    return [message for message in sent if message["type"] == "http.response.body"]


def test_a_streamed_answer_goes_out_block_by_block_and_ends(monkeypatch):
    blocks = Blocks(5)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run()
    assert sent[0]["status"] == 200
    assert b"content-length" not in dict(sent[0]["headers"])  # not joined: sent as it is read (chunked)
    parts = bodies(sent)
    assert [part["body"] for part in parts[:-1]] == [b'{"block": %d}\n' % n for n in range(5)]
    assert all(part["more_body"] for part in parts[:-1]) and parts[-1] == {
        "type": "http.response.body",
        "body": b"",
        "more_body": False,
    }
    assert blocks.closed.wait(2)


@pytest.mark.django_db(transaction=True)
def test_each_block_has_its_own_database_deadline_not_the_whole_answer(monkeypatch, settings):
    """Ten blocks 0.15 s apart (1.5 s), each reading the database, under a 0.5 s request deadline: the
    deadline is armed per block, so the answer completes (the watchdog used to cut the connection 0.5 s
    into the answer, which was a 503: an export longer than the deadline never finished)."""
    settings.DB_REQUEST_DEADLINE = 0.5
    blocks = Blocks(10, pause=0.15, query=True)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    parts = bodies(run())
    assert len(parts) == 11 and parts[-1]["more_body"] is False and blocks.read == 10


def test_a_database_fault_after_the_first_block_cuts_the_answer(monkeypatch, caplog):
    blocks = Blocks(5, fail_at=2)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run()
    assert sent[0]["status"] == 200
    parts = bodies(sent)
    assert [part["body"] for part in parts] == [b'{"block": 0}\n', b'{"block": 1}\n']
    assert all(part["more_body"] for part in parts)  # never ended: the server closes the connection
    assert blocks.closed.wait(2)
    assert any("cut: the database failed" in record.getMessage() for record in caplog.records)


def test_a_database_fault_before_the_first_block_is_a_503(monkeypatch):
    blocks = Blocks(5, fail_at=0)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run()
    assert sent[0]["status"] == 503 and dict(sent[0]["headers"])[b"retry-after"]
    assert json.loads(bodies(sent)[0]["body"])["error"]["type"] == "overloaded_error"
    assert blocks.closed.wait(2)


def test_a_client_that_stops_reading_is_cut_and_the_answer_closed(monkeypatch, settings, caplog):
    """Without read-ahead (STREAM_SPOOL_BYTES 0) the reading waits for the client: a few blocks read."""
    settings.STREAM_SEND_TIMEOUT = 0.3
    settings.STREAM_SPOOL_BYTES = 0
    blocks = Blocks(1000)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run(stalled_after=2)
    assert blocks.closed.wait(2) and blocks.read < 10
    assert all(part["more_body"] for part in bodies(sent))
    assert any("did not take a block within 0.3 s" in record.getMessage() for record in caplog.records)


def test_a_stalled_client_does_not_hold_the_body_open_it_is_read_ahead_and_closed(monkeypatch, settings, caplog):
    """With read-ahead, the whole body is read and closed (the export's transaction ends) while the client
    has taken two blocks; the answer is still cut after STREAM_SEND_TIMEOUT, never ended."""
    settings.STREAM_SEND_TIMEOUT = 1.0
    blocks = Blocks(1000)
    closed_at: list[float] = []
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    watcher = threading.Thread(target=lambda: blocks.closed.wait(5) and closed_at.append(time.monotonic()))
    watcher.start()
    started = time.monotonic()
    sent = run(stalled_after=2)
    ended = time.monotonic()
    watcher.join()
    assert blocks.read == 1000 and closed_at and closed_at[0] - started < 0.8 < ended - started
    assert len(bodies(sent)) == 3 and all(part["more_body"] for part in bodies(sent))
    assert any("did not take a block within 1 s" in record.getMessage() for record in caplog.records)


def test_the_rest_is_sent_by_the_event_loop_with_the_thread_free_and_the_slot_held(monkeypatch, settings):
    """Once the body is read and closed, the thread has returned (here: the pool's only thread runs
    another job at once) while the loop still sends; the stream's slot is released when the loop is done."""
    settings.STREAM_THREADS = 1
    blocks = Blocks(60)
    seen: dict = {}

    def probe():  # runs only if the pool's one thread is free (the autouse `one_thread` fixture)
        seen["slots"] = asgi._stream_slots.held

    real_send_spooled = asgi._send_spooled

    async def watching(send, handover):
        seen["closed"] = blocks.closed.is_set()  # handed over only after the body was closed
        seen["left_to_send"] = bool(handover.spool)
        await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(asgi._pool, probe), 5)
        return await real_send_spooled(send, handover)

    monkeypatch.setattr(asgi, "_send_spooled", watching)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run(slow=0.005)
    assert seen == {"closed": True, "left_to_send": True, "slots": 1}
    assert [part["body"] for part in bodies(sent)[:-1]] == [b'{"block": %d}\n' % n for n in range(60)]
    assert bodies(sent)[-1]["more_body"] is False and asgi._stream_slots.held == 0


def test_a_client_that_leaves_while_the_loop_sends_frees_the_slot_and_the_spool(monkeypatch, settings):
    settings.STREAM_SPOOL_MEMORY_BYTES = 0  # every read-ahead block in the temporary file
    closed: list = []
    real_close = asgi._Spool.close
    monkeypatch.setattr(asgi._Spool, "close", lambda self: (closed.append(self), real_close(self)))
    blocks = Blocks(200)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    run(leave_after=20, slow=0.01)
    assert blocks.read == 200 and blocks.closed.is_set()
    assert len(closed) == 1 and closed[0]._file.closed and asgi._stream_slots.held == 0


def test_stream_seconds_also_cut_what_the_loop_sends(monkeypatch, settings, caplog):
    settings.STREAM_SECONDS = 0.5
    blocks = Blocks(100)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    parts = bodies(run(slow=0.05))
    assert blocks.read == 100 and len(parts) < 30 and all(part["more_body"] for part in parts)
    assert any("still streaming after STREAM_SECONDS" in record.getMessage() for record in caplog.records)
    assert asgi._stream_slots.held == 0


def test_a_handover_nobody_waits_for_is_discarded(settings):
    """The request's task was cancelled in the pass the thread handed the answer over: nobody will send
    it, so the spool is closed and the slot freed at once."""
    assert asgi._stream_slots.take(None) is None
    spool = asgi._Spool(memory=0, limit=100)
    spool.push(b"x" * 10)
    handover = asgi._Handover(spool, None, 0.0, time.monotonic() + 60, environ())

    async def settle_after_cancel():
        done = asyncio.get_running_loop().create_future()
        done.cancel()
        asgi._finish_stream(done, handover)

    asyncio.run(settle_after_cancel())
    assert spool._file.closed and asgi._stream_slots.held == 0


@pytest.mark.parametrize("pause", [0.001, 0.0], ids=["while-reading", "while-the-loop-sends"])
@pytest.mark.serial  # timed
def test_a_client_that_leaves_ends_the_answer_at_once_without_the_servers_grace(monkeypatch, settings, pause):
    """gunicorn cancels a vanished client's task only after its 3 s grace period, during which the export
    kept its slot (a breaker's back-to-back exports all got 503): the front watches for http.disconnect."""
    settings.STREAM_THREADS = 1
    blocks = Blocks(10_000, pause=pause)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        run(disconnect_after=3, slow=0.01)
    assert time.monotonic() - started < 2 and blocks.closed.wait(2)
    assert asgi._stream_slots.held == 0


def test_a_full_spool_makes_the_reading_wait_for_the_client(monkeypatch, settings):
    """STREAM_SPOOL_BYTES bounds what is read ahead of a stalled client (here two ~13-byte blocks)."""
    settings.STREAM_SEND_TIMEOUT = 0.3
    settings.STREAM_SPOOL_BYTES = 20
    blocks = Blocks(1000)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    run(stalled_after=2)
    assert blocks.closed.wait(2) and blocks.read < 10


@pytest.mark.parametrize("memory", [0, 40, 10**6])
def test_blocks_spooled_in_memory_and_on_disk_go_out_whole_and_in_order(monkeypatch, settings, memory):
    """Past STREAM_SPOOL_MEMORY_BYTES the read-ahead goes to a temporary file: the client gets every block,
    in order, whichever mix of memory and file held them (a slow client lets the spool fill)."""
    settings.STREAM_SPOOL_MEMORY_BYTES = memory
    blocks = Blocks(300)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    parts = bodies(run(slow=0.001))
    assert [part["body"] for part in parts[:-1]] == [b'{"block": %d}\n' % n for n in range(300)]
    assert parts[-1]["more_body"] is False


def test_a_spool_whose_file_cannot_be_written_keeps_every_block(monkeypatch, settings, caplog):
    """A full disk: the spool stops reading ahead (one WARNING) and the answer still goes out whole."""
    settings.STREAM_SPOOL_MEMORY_BYTES = 0

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(asgi.tempfile, "TemporaryFile", no_space)
    blocks = Blocks(50)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    parts = bodies(run(slow=0.001))
    assert [part["body"] for part in parts[:-1]] == [b'{"block": %d}\n' % n for n in range(50)]
    assert parts[-1]["more_body"] is False
    assert sum("stops reading ahead" in record.getMessage() for record in caplog.records) == 1


def test_the_spool_hands_back_blocks_first_in_first_out_and_reuses_its_file():
    spool = asgi._Spool(memory=10, limit=100)
    for block in (b"aaaa", b"bbbb", b"cccccccc", b"dd"):  # the third no longer fits in 10 bytes: file
        spool.push(block)
    assert not spool.full and spool.pop() == b"aaaa" and spool.pop() == b"bbbb"
    spool.push(b"eeeeeeee")  # memory has room again, but order is kept by the queue
    assert [spool.pop(), spool.pop(), spool.pop()] == [b"cccccccc", b"dd", b"eeeeeeee"]
    assert not spool and spool._read_at == spool._write_at == 0  # the emptied file is reused from its start
    for _ in range(13):
        spool.push(b"12345678")
    assert spool.full
    spool.close()


def test_a_stream_longer_than_stream_seconds_is_cut(monkeypatch, settings, caplog):
    settings.STREAM_SECONDS = 0.4
    blocks = Blocks(100, pause=0.1)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run()
    assert blocks.closed.wait(2) and blocks.read < 10
    assert all(part["more_body"] for part in bodies(sent))
    assert any("still streaming after STREAM_SECONDS" in record.getMessage() for record in caplog.records)


def test_a_client_that_leaves_stops_the_reading(monkeypatch):
    blocks = Blocks(10_000, pause=0.001)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    run(leave_after=3)
    assert blocks.closed.wait(2) and blocks.read < 1000


def test_streams_past_stream_threads_are_a_503_and_free_their_slot(monkeypatch, settings):
    settings.STREAM_THREADS = 0
    blocks = Blocks(3)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run()
    assert sent[0]["status"] == 503 and blocks.closed.wait(2)
    settings.STREAM_THREADS = 1
    blocks = Blocks(3)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    for _ in range(3):  # every finished stream gave its slot back
        assert run()[0]["status"] == 200


def test_a_head_request_gets_the_head_without_reading_the_stream(monkeypatch):
    blocks = Blocks(1000)
    monkeypatch.setattr(asgi, "django_application", streaming_response_app(blocks))
    sent = run_head()
    assert sent[0]["status"] == 200 and b"content-length" not in dict(sent[0]["headers"])
    assert blocks.closed.wait(2) and blocks.read == 1  # the first block only (the view reads it)


def run_head() -> list[dict]:
    sent: list[dict] = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(asgi.application(http_scope("HEAD", "/api/v1/memories/x/export"), receive, send))
    return sent
