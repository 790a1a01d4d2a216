"""A column changing type under a running server (`ALTER TABLE … ALTER COLUMN … TYPE`, as a migration run
while servers serve does): every connection that prepared a statement reading that table gets "cached plan
must not change result type" once. That is answered as a 503 with Retry-After (a database fault), the
connection is replaced, and the retry is served (config/compiled.py `_AlwaysPreparedCursor`). Before, it
was a 500 on every request of that connection until `DB_CONN_MAX_AGE` replaced it (a minute)."""

from __future__ import annotations

import concurrent.futures

import httpx


def test_a_column_type_change_is_a_503_once_per_connection_then_served(server, cluster, owners):
    owner = owners[0]
    path = f"/api/v1/memories/{owner.store}/wake"

    def burst(n: int) -> list[httpx.Response]:
        def one(_):
            with httpx.Client(base_url=server.url, headers=owner.auth, timeout=30) as client:
                return client.get(path)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            return list(pool.map(one, range(n)))

    assert {r.status_code for r in burst(64)} == {200}  # many threads' connections have prepared the statements
    with cluster.connect() as conn:
        conn.execute("ALTER TABLE accounts_user ALTER COLUMN handle TYPE varchar(65)")
    # Each of the server's database connections (2 workers × WEB_THREADS 8) answers one 503 and is replaced;
    # which threads a burst reaches is up to the executors, so burst until one of 32 is all served.
    after: list[httpx.Response] = []
    for _ in range(10):
        batch = burst(32)
        after += batch
        if {r.status_code for r in batch} == {200} and len(after) > 32:
            break
    statuses = [r.status_code for r in after]
    assert 500 not in statuses, [r.text for r in after if r.status_code == 500][:2]
    assert set(statuses) <= {200, 503}
    refused = [r for r in after if r.status_code == 503]
    assert refused, "the stale statements were never hit: the test proves nothing"
    assert len(refused) <= 2 * 8, f"{len(refused)} refusals: more than once per connection"
    assert all(r.headers.get("Retry-After") and r.json()["error"]["type"] == "overloaded_error" for r in refused)
    assert {r.status_code for r in after[-32:]} == {200}, statuses  # every connection replaced and served
    assert "a prepared statement went stale" in server.log()
