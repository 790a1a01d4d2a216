"""Three app replicas behind a real HAProxy on loopback, one database (issue 21, docs/scaling.md).

The app is stateless: every replica serves every store, and anything a client carries from one request to
the next (a recall cursor) is valid on any replica, because it is signed with the shared SECRET_KEY and
holds no process state. 16 clients note through the load balancer with nonces (and replay every nonce):
seqs are contiguous, replays return the original, nothing is a 5xx; then a recall cursor is followed
page by page across the replicas, directly and through HAProxy.

Needs HAProxy (Debian's `haproxy`, which .ci/prepare installs as root) and PostgreSQL's server binaries;
without them it skips with the reason.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.chaos.harness import Cluster, Server, free_port, manage, migrate, pg_bin_dir, wait_until

HAPROXY = shutil.which("haproxy")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(HAPROXY is None, reason="HAProxy is not installed (Debian: apt-get install haproxy)"),
    pytest.mark.skipif(pg_bin_dir() is None, reason="PostgreSQL server binaries are not installed"),
]

REPLICAS = 3
CLIENTS = 16
NOTES_EACH = 20
SECRET = "replica-test-shared-secret-key-0123456789abcdef0123456789"

SETUP = """
import json
from accounts.models import User
from accounts.services import issue_token
from stores.services import ensure_canonical_store
user = User.objects.create_user("replicas", password=None)
store, _ = ensure_canonical_store(scope="user", user=user, created_by=user)
print(json.dumps({"store": str(store.pk), "secret": issue_token(user=user, name="replicas").secret}))
"""

HAPROXY_CFG = """
global
    maxconn 512
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    option http-server-close
frontend memories
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    http-response set-header X-Replica %[srv_name]
{servers}
"""


class HAProxy:
    """HAProxy in the foreground (-db), round robin over `ports`, health-checked on /readyz."""

    def __init__(self, root, ports: list[int]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        servers = "\n".join(f"    server app{i} 127.0.0.1:{p} check inter 500ms" for i, p in enumerate(ports))
        self.config = root / "haproxy.cfg"
        self.config.write_text(HAPROXY_CFG.format(port=self.port, servers=servers))
        self.log = root / "haproxy.log"
        self.proc = None

    def __enter__(self) -> HAProxy:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(self.config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(self._all_up, 30, 0.2, "HAProxy and its three replicas")
        return self

    def _all_up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"haproxy exited: {self.log.read_text()[-2000:]}")
        try:
            served = {httpx.get(self.url + "/readyz", timeout=2).headers.get("x-replica") for _ in range(6)}
        except httpx.HTTPError:
            return False
        return len(served) == REPLICAS

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


@pytest.fixture(scope="module")
def stack():
    """One cluster, three replicas (one worker each, the same SECRET_KEY), HAProxy in front."""
    with Cluster() as cluster:
        migrate(cluster)
        owner = json.loads(manage(cluster, "shell", "-c", SETUP).strip().splitlines()[-1])
        with contextlib.ExitStack() as stack:
            replicas = [
                stack.enter_context(Server(cluster, workers=1, env={"SECRET_KEY": SECRET})) for _ in range(REPLICAS)
            ]
            balancer = stack.enter_context(HAProxy(cluster.root, [r.port for r in replicas]))
            yield owner, replicas, balancer


def test_sixteen_clients_note_through_the_balancer_with_nonces(stack):
    owner, _, balancer = stack
    headers = {"Authorization": f"Bearer {owner['secret']}"}
    note_url = f"{balancer.url}/api/v1/memories/{owner['store']}/note"
    start = threading.Barrier(CLIENTS)

    def client(number: int) -> list[tuple[int, int, int, str]]:
        seen = []
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for i in range(NOTES_EACH):
                body = {"body_md": f"client {number} note {i}", "client_nonce": f"c{number}-n{i}"}
                first = http.post(note_url, json=body)
                again = http.post(note_url, json=body)  # a retry, maybe on another replica
                for response in (first, again):
                    assert response.status_code < 500, response.text
                seen.append(
                    (first.status_code, again.status_code, first.json()["data"]["seq"], again.json()["data"]["seq"])
                )
                seen[-1] += (first.headers["x-replica"], again.headers["x-replica"])
        return seen

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = [row for rows in pool.map(client, range(CLIENTS)) for row in rows]

    total = CLIENTS * NOTES_EACH
    assert Counter(first for first, *_ in results) == {201: total}
    assert Counter(again for _, again, *_ in results) == {200: total}  # the replays: the original entry
    assert all(seq == replayed for _, _, seq, replayed, *_ in results)
    assert sorted(seq for _, _, seq, *_ in results) == list(range(total))  # contiguous, no duplicate
    served = Counter(replica for row in results for replica in row[4:])
    assert set(served) == {f"app{i}" for i in range(REPLICAS)}, served


def test_a_recall_cursor_is_valid_on_every_replica(stack):
    owner, replicas, balancer = stack
    headers = {"Authorization": f"Bearer {owner['secret']}"}
    with httpx.Client(headers=headers, timeout=60) as http:  # alone (-k), the store may still be empty
        for i in range(100):
            http.post(f"{balancer.url}/api/v1/memories/{owner['store']}/note", json={"body_md": f"client x {i}"})
        total = http.get(f"{balancer.url}/api/v1/memories/{owner['store']}/wake").json()["data"]["entry_count"]
    for hops in (replicas, [balancer] * REPLICAS):  # directly, one page per replica in turn; then through HAProxy
        found, cursor, page = [], None, 0
        while True:
            base = hops[page % REPLICAS].url
            params = {"pattern": "client", "limit": 37, **({"cursor": cursor} if cursor else {})}
            response = httpx.get(f"{base}/api/v1/memories/{owner['store']}/recall", params=params, headers=headers)
            assert response.status_code == 200, response.text
            found += [match["seq"] for match in response.json()["data"]]
            cursor = response.json()["meta"]["next_cursor"]
            page += 1
            if cursor is None:
                break
        assert found == list(range(total - 1, -1, -1))
        assert page >= REPLICAS
