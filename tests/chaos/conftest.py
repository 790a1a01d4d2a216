"""Fixtures of the chaos suite: a migrated template cluster (once), then per test its own copy and server.

Every test here is marked `chaos` (and runs in `bin/test`). Each starts what it breaks: a copy of the
template cluster and a server of its own, both torn down (process groups killed, folders deleted) even
when the test fails. Tests that need no PostgreSQL binaries are not here; without them these tests skip
with the reason (`.ci/prepare` installs them on CI).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.harness import Cluster, Server, manage, migrate, pg_bin_dir

SETUP = """
import json
from accounts.models import User
from accounts.services import issue_token
from stores.services import ensure_canonical_store
out = []
for k in range(4):
    user = User.objects.create_user(f"chaos-{k}", password=None)
    store, _ = ensure_canonical_store(scope="user", user=user, created_by=user)
    out.append({"store": str(store.pk), "secret": issue_token(user=user, name="chaos").secret})
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Owner:
    store: str
    secret: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.chaos)


@pytest.fixture(scope="session")
def template(tmp_path_factory):
    """A stopped, migrated cluster with four users, each owning a store: (data folder, owners)."""
    if pg_bin_dir() is None:
        pytest.skip("PostgreSQL server binaries are not installed (/usr/lib/postgresql/*/bin)")
    cluster = Cluster()
    try:
        cluster.start()
        migrate(cluster)
        out = manage(cluster, "shell", "-c", SETUP)
        owners = [Owner(**row) for row in json.loads(out.strip().splitlines()[-1])]
        cluster.stop("fast")
        keep = tmp_path_factory.mktemp("chaos-template") / "data"
        shutil.copytree(cluster.data, keep, symlinks=True)
    finally:
        cluster.destroy()
    return keep, owners


@pytest.fixture
def cluster(template):
    """This test's own running copy of the template cluster."""
    with Cluster(template=template[0]) as running:
        yield running


@pytest.fixture
def owners(template) -> list[Owner]:
    return template[1]


@pytest.fixture
def server(cluster):
    """The server as `bin/serve` runs it (2 workers) against this test's cluster."""
    with Server(cluster) as running:
        yield running
