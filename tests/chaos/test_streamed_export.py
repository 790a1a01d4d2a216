"""An export longer than the request deadline completes through the real server (config/asgi.py `_Stream`).

The export is a streamed answer: the front used to join it on the request's thread under one request
deadline (`DB_REQUEST_DEADLINE`, 7 s by default), so a store whose export took longer — about 50,000
entries and their summaries here — was always cut and answered 503. Now each block's database work has
its own deadline and blocks go out as they are read. Here the deadline is 0.2 s and the export of 80,000
entries takes several times that.
"""

from __future__ import annotations

import json
import time

import httpx

from tests.chaos.harness import Server, manage

ENTRIES = 80_000

FILL = """
from stores.models import Store
from tests.log.conftest import fill
fill(Store.objects.get(pk="{store}"), {entries})
"""


def test_an_export_longer_than_the_request_deadline_completes(cluster, owners):
    owner = owners[0]
    manage(cluster, "shell", "-c", FILL.format(store=owner.store, entries=ENTRIES))
    with Server(cluster, workers=1, env={"DB_REQUEST_DEADLINE": "0.2"}) as server:
        started = time.monotonic()
        with httpx.stream(
            "GET", f"{server.url}/api/v1/memories/{owner.store}/export", headers=owner.auth, timeout=60
        ) as response:
            assert response.status_code == 200, response.read()[:300]
            assert "content-length" not in response.headers  # sent as it is read (chunked)
            lines = [json.loads(line) for line in response.iter_lines() if line]
        took = time.monotonic() - started
        # longer than the deadline plus one scan of its watchdog (0.25 s), or the test proves nothing
        assert took > 0.45, f"the export took {took:.2f} s"
        assert lines[0]["type"] == "memories-export" and lines[-1]["type"] == "end"
        assert sum(1 for line in lines if line["type"] == "entry") == ENTRIES
        assert lines[-1]["lines"] == len(lines) - 1  # the lines before the end line
        # the server still answers on the same worker afterwards: the stream freed its thread and slot
        assert httpx.get(f"{server.url}/api/v1/me", headers=owner.auth, timeout=10).status_code == 200
