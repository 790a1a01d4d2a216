"""A client that leaves an export frees its thread, stream slot and transaction at once (config/asgi.py),
found by a breaker, each case a wait of STREAM_SEND_TIMEOUT (30 s by default) before:

- the client leaves in the loop pass in which the answer is settled: nothing resolved `stream.go`
  (`_abandon` does now);
- the connection is lost while a block waits for the socket: gunicorn 27's `send()` waits in its drain
  forever, and `_pump` waited on that send (the cancelled task now cancels the send in flight);
- the export's backend is killed while the stream waits, then the stream is cut: the thread stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from django.db import connection

from config import asgi
from tests.foundation import test_stream_ends
from tests.foundation.test_stream_ends import scope

pytestmark = pytest.mark.django_db(transaction=True)

# test_stream_ends' fixtures: the front on one thread of ours, a store of several export blocks, and the
# check that the front's safeguard never had to close the export's transaction
thread, big, no_open_transaction_left = (
    test_stream_ends.thread,
    test_stream_ends.big,
    test_stream_ends.no_open_transaction_left,
)


def test_client_gone_as_the_stream_is_settled_frees_the_thread_at_once(thread, big, settings, monkeypatch):
    settings.STREAM_SEND_TIMEOUT = 8.0
    store, secret = big
    holder = {}
    real_settle = asgi._settle

    def settle_then_client_leaves(answer, outcome, failure):
        real_settle(answer, outcome, failure)
        holder["task"].cancel()  # gunicorn: the client went away, in the same loop pass

    monkeypatch.setattr(asgi, "_settle", settle_then_client_leaves)
    sent = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    async def main():
        holder["task"] = task = asyncio.ensure_future(
            asgi.application(scope(f"/api/v1/memories/{store.pk}/export", secret), receive, send)
        )
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)

    asyncio.run(main())
    assert sent == []  # nothing was sent: the client is gone
    started = time.monotonic()
    # the one pool thread is the export's: this waits until its _pump returned
    thread.submit(lambda: connection.in_atomic_block).result(timeout=30)
    waited = time.monotonic() - started
    assert asgi._stream_slots.held == 0
    assert waited < 2.0, f"the abandoned export held its thread, slot and transaction {waited:.1f} s"


def test_client_gone_while_a_block_waits_for_the_socket_frees_the_thread_when_the_task_is_cancelled(
    thread,
    big,
    settings,
    monkeypatch,
):
    """gunicorn: the connection is lost while the transport's write buffer is full. Its send() waits in
    FlowControl.drain() forever (connection_lost never sets the writable event); after
    asgi_disconnect_grace_period (3 s) gunicorn cancels the request task, and `_send_stream` sets `abort` —
    but `_pump` is blocked in `sent.result(timeout=STREAM_SEND_TIMEOUT)` on that send, so the thread, the
    stream slot and the export's open transaction stay until STREAM_SEND_TIMEOUT (30 s by default)."""
    settings.STREAM_SEND_TIMEOUT = 8.0
    store, secret = big
    released = []
    real_release = asgi._stream_slots.release
    monkeypatch.setattr(
        asgi._stream_slots, "release", lambda key: (released.append(time.monotonic()), real_release(key))
    )
    sent = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)
        if sum(1 for m in sent if m["type"] == "http.response.body") >= 2:
            await asyncio.Event().wait()  # the dead connection's drain(): never set

    async def main():
        task = asyncio.ensure_future(
            asgi.application(scope(f"/api/v1/memories/{store.pk}/export", secret), receive, send)
        )
        while sum(1 for m in sent if m["type"] == "http.response.body") < 2:
            await asyncio.sleep(0.01)
        task.cancel()  # gunicorn, asgi_disconnect_grace_period after connection_lost
        cancelled = time.monotonic()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        while not released and time.monotonic() - cancelled < 12:
            await asyncio.sleep(0.05)  # the server's loop lives on
        return cancelled

    cancelled = asyncio.run(main())
    assert released, "the stream slot never came back"
    held = released[0] - cancelled
    assert held < 1.0, f"after the request task was cancelled the export held its thread/slot/transaction {held:.1f} s"


def test_backend_killed_while_the_stream_waits_then_cut_leaves_the_thread_usable(thread, big, settings):
    """The export's backend dies (restart, pg_terminate_backend) while its generator is suspended; the stream
    is then cut (stalled client): closing the generator fails in the database (the named cursor's CLOSE, the
    ROLLBACK). The thread's next request must be answered, with no transaction left open."""
    import psycopg
    from django.db import connection as main_connection

    from tests.foundation.test_stream_ends import me, thread_state
    from tests.foundation.test_streamed_fault import run

    settings.STREAM_SEND_TIMEOUT = 1.5
    settings.STREAM_SPOOL_BYTES = 0  # no read-ahead: the export's transaction waits for the stalled client
    store, secret = big
    db = main_connection.settings_dict
    dsn = f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} user={db['USER']} dbname={db['NAME']}"

    def killer():
        time.sleep(0.7)
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
            ).fetchall()

    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(1) as ex:
        killed = ex.submit(killer)
        sent = run(scope(f"/api/v1/memories/{store.pk}/export", secret), stalled_after=2, linger=0.5)
        assert killed.result(), "no idle-in-transaction export backend found to kill"
    assert sent[0]["status"] == 200
    assert thread_state(thread) == (False, False)
    assert me(secret) == 200
    assert asgi._stream_slots.held == 0
