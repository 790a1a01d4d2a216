"""Every way a streamed export ends early leaves its thread usable (config/asgi.py `_Stream`, the real
ExportView and memories/exchange/export.py).

The export holds a REPEATABLE READ `transaction.atomic()` open inside its generator. Found by a breaker:
the view handed Django an `itertools.chain`, which has no `close()`, so a stream that ended early (cut,
client gone, refused, REQUEST_TIMEOUT) left the generator suspended inside the atomic block, and every
later request on that thread was a 500 TransactionManagementError — a whole worker after one burst. The
view's body is a generator now and `export_chunks` closes `export_lines`: the transaction ends on its own
thread. The front's safeguard (`_close_streamed`) must not be what saves these (no ERROR logged); the last
test shows it catching a body that cannot be closed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging

import pytest
from django.db import connection, connections, transaction
from django.http import StreamingHttpResponse

from config import asgi
from tests.foundation.test_faults import http_scope
from tests.foundation.test_streamed_fault import run
from tests.log.conftest import fill

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread(monkeypatch):
    """The front's Django calls on ONE thread of ours (so the next request reuses the export's thread)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(asgi, "_pool", pool)
    yield pool
    pool.submit(connections.close_all).result()
    pool.shutdown()


@pytest.fixture(autouse=True)
def no_open_transaction_left(caplog):
    """The view closes its own transaction: the front's safeguard never fires for the export."""
    yield
    assert not [r for r in caplog.get_records("call") if "left a transaction open" in r.getMessage()]


@pytest.fixture
def big(private_store, owner_client):
    """~300 KiB of export: several 64 KiB blocks, so the generator is suspended after the first one."""
    fill(private_store, 3000, body=lambda seq: f"entry {seq} " + "x" * 80)
    return private_store, owner_client.secret


def scope(path: str, secret: str) -> dict:
    return http_scope("GET", path, [(b"host", b"testserver"), (b"authorization", f"Bearer {secret}".encode())])


def thread_state(pool) -> tuple[bool, bool]:
    """(in_atomic_block, needs_rollback) of the pool thread's connection, once the stream's thread is done."""
    # the pool has one thread: this runs after _pump returned
    return pool.submit(lambda: (connection.in_atomic_block, connection.needs_rollback)).result(timeout=30)


def me(secret: str) -> int:
    return run(scope("/api/v1/me", secret))[0]["status"]


def test_a_stream_cut_by_a_stalled_client_leaves_its_thread_usable(thread, big, settings):
    settings.STREAM_SEND_TIMEOUT = 0.3
    store, secret = big
    sent = run(scope(f"/api/v1/memories/{store.pk}/export", secret), stalled_after=2)
    assert sent[0]["status"] == 200
    assert thread_state(thread) == (False, False), "the export's atomic block outlived the cut stream"
    assert me(secret) == 200  # observed: 500 TransactionManagementError, on every later request of the thread


def test_a_stream_whose_client_left_leaves_its_thread_usable(thread, big):
    store, secret = big
    run(scope(f"/api/v1/memories/{store.pk}/export", secret), leave_after=1)
    assert thread_state(thread) == (False, False), "the export's atomic block outlived the abandoned stream"
    assert me(secret) == 200


def test_a_stream_cut_by_stream_seconds_leaves_its_thread_usable(thread, big, settings):
    settings.STREAM_SECONDS = 0.0
    store, secret = big
    sent = run(scope(f"/api/v1/memories/{store.pk}/export", secret))
    assert sent[0]["status"] == 200 and all(m.get("more_body") for m in sent[1:])  # cut
    assert thread_state(thread) == (False, False)
    assert me(secret) == 200


def test_an_export_refused_for_stream_threads_leaves_its_thread_usable(thread, big, settings):
    """The 503 of one stream too many (`_take_stream_slot`) calls response.close() on a body suspended in
    the export's transaction."""
    settings.STREAM_THREADS = 0
    store, secret = big
    assert run(scope(f"/api/v1/memories/{store.pk}/export", secret))[0]["status"] == 503
    assert thread_state(thread) == (False, False)
    assert me(secret) == 200


def test_an_export_answered_503_by_request_timeout_leaves_its_thread_usable(thread, big, settings):
    """REQUEST_TIMEOUT fires while the view reads the first block: the front answers 503 and `_settle` tells
    the thread (`go`) that nobody will send its stream; the thread closes the response."""
    settings.REQUEST_TIMEOUT = 0.01
    store, secret = big
    sent = run(scope(f"/api/v1/memories/{store.pk}/export", secret), linger=2.0)
    assert sent[0]["status"] == 503
    settings.REQUEST_TIMEOUT = 30
    assert asgi._stream_slots.held == 0  # the slot came back
    assert thread_state(thread) == (False, False)
    assert me(secret) == 200


def test_a_body_that_cannot_be_closed_does_not_poison_the_thread_either(thread, owner_client, monkeypatch, caplog):
    """The safeguard: a streamed body Django cannot close (an itertools.chain over a generator suspended in
    an atomic block) — the front resets and closes the thread's connection and logs an ERROR."""

    def leaky():
        with transaction.atomic():
            for n in range(1000):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                yield b"x" * 70000 + b"%d\n" % n

    made = []

    def app(environ, start_response):
        body = leaky()
        made.append(body)
        response = StreamingHttpResponse(itertools.chain([next(body)], body), content_type="application/jsonl")
        start_response("200 OK", list(response.items()))
        return response

    real = asgi.django_application
    monkeypatch.setattr(asgi, "django_application", app)
    run(scope("/api/v1/memories/x/export", owner_client.secret), leave_after=1)
    monkeypatch.setattr(asgi, "django_application", real)
    assert thread_state(thread) == (False, False)
    assert me(owner_client.secret) == 200
    errors = [r for r in caplog.records if "left a transaction open" in r.getMessage()]
    assert errors and errors[0].levelno == logging.ERROR
    caplog.get_records("call").clear()  # seen: the autouse check is for the export's own paths

    def finalize():  # the leaked generator, ended on its own thread rather than by the garbage collector
        with contextlib.suppress(Exception):
            made[0].close()

    thread.submit(finalize).result(timeout=10)
