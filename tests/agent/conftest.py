"""Fixtures for agent access (SPEC §5): the cast — an owner with an environment, its key, stores, sessions —
and official-SDK clients against a live server, each holding the credential its docstring names."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pytest
from anthropic import Anthropic

from accounts import services as account_services
from sessions import selectors
from sessions.models import Work
from sessions.services import environments as environment_services
from sessions.services import sessions as session_services
from sessions.validation import clean_resources
from tests.factories import StoreFactory
from tests.files.conftest import sdk_for  # noqa: F401  (the live-server SDK fixture of the file tests)


@pytest.fixture
def api_url(live_server) -> str:
    """The SDK's `base_url` for the live server."""
    return f"{live_server.url}/api"


@pytest.fixture
def client_for(api_url):
    """``make(secret) -> Anthropic`` with strict response validation (every required key, every type) and
    no retries. Closed afterwards: an open keep-alive connection pins a server thread."""
    made: list[Anthropic] = []

    def make(secret: str) -> Anthropic:
        client = Anthropic(base_url=api_url, auth_token=secret, max_retries=0, _strict_response_validation=True)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def owner_token(owner):
    return account_services.issue_token(user=owner)


@pytest.fixture
def owner_sdk(client_for, owner_token) -> Anthropic:
    """The owner's API token: environments, sessions, work retrieve/update."""
    client = client_for(owner_token.secret)
    client.token = owner_token.token
    return client


@pytest.fixture
def environment(owner):
    return environment_services.create_environment(owner=owner, name="Build farm")


@pytest.fixture
def env_key(environment):
    """An issued key of `environment` (`.secret`, `.key`)."""
    return environment_services.issue_environment_key(environment=environment, name="worker")


@pytest.fixture
def key_sdk(client_for, env_key) -> Anthropic:
    """The environment key: poll, ack, list, stop, heartbeat, stats."""
    return client_for(env_key.secret)


@pytest.fixture
def notes_store(owner):
    return StoreFactory(owner=owner, canonical=False, name="Team Notes", description="What we decided.")


@pytest.fixture
def make_session(owner, environment):
    """``make(*stores_or_(store, access), owner=owner, environment=environment, **fields) -> Session``
    through the same selector and service the API uses."""

    def make(*attach, owner=owner, environment=environment, instructions=None, **fields):
        resources = []
        for item in attach:
            store, access = item if isinstance(item, tuple) else (item, "read_write")
            resources.append(
                {
                    "type": "memory_store",
                    "memory_store_id": str(store.pk),
                    "access": access,
                    "instructions": instructions,
                }
            )
        return session_services.create_session(
            owner=owner,
            environment_id=environment.pk,
            agent={"id": "agent_test", "version": 1},
            attach=selectors.stores_to_attach(owner, clean_resources(resources)),
            metadata=fields.get("metadata", {}),
            title=fields.get("title"),
        )

    return make


def sessions_token(secret: str) -> str:
    """The per-work credential inside a work item's `secret` (URL-safe base64 JSON, maybe unpadded)."""
    return json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))["sessions_token"]


@dataclass
class Claimed:
    """A work item claimed through the SDK: its id, the session's id and the per-work credential."""

    work_id: str
    session_id: str
    token: str

    @property
    def row(self) -> Work:
        return Work.objects.get(pk=self.work_id)


@pytest.fixture
def claim(key_sdk, environment):
    """``claim(ack=True, heartbeat=True) -> Claimed``: poll (environment key), then ack and a first
    heartbeat with the item's own credential, as the SDK's worker does."""

    def run(*, ack: bool = True, heartbeat: bool = True, client=None) -> Claimed:
        work = key_sdk.beta.environments.work.poll(str(environment.pk))
        assert work is not None, "nothing to claim"
        claimed = Claimed(work_id=work.id, session_id=work.data.id, token=sessions_token(work.secret))
        if ack:
            key_sdk.beta.environments.work.ack(work.id, environment_id=str(environment.pk))
        if heartbeat:
            (client or key_sdk).beta.environments.work.heartbeat(
                work.id, environment_id=str(environment.pk), expected_last_heartbeat="NO_HEARTBEAT"
            )
        return claimed

    return run


# --- API-client fixtures (no live server): fast tests of reach and hostile input ---------------------


def bearer(secret: str):
    """A DRF APIClient sending `Authorization: Bearer <secret>`."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def owner_api(owner_token):
    return bearer(owner_token.secret)


@pytest.fixture
def key_api(env_key):
    return bearer(env_key.secret)


@dataclass
class Running:
    """A work item claimed, acknowledged and heartbeaten through the services, with its credential."""

    work: Work
    token: str
    session: object

    @property
    def api(self):
        return bearer(self.token)

    def refresh(self) -> Work:
        self.work.refresh_from_db()
        return self.work


@pytest.fixture
def run_session(environment, make_session):
    """``run(*attach) -> Running``: a session whose work item a worker holds with a live lease."""
    from sessions.services import work as work_services

    def run(*attach) -> Running:
        session = make_session(*attach)
        claimed = work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
        assert claimed.work.session_id == session.pk
        work = work_services.acknowledge_work(work=claimed.work)
        work_services.heartbeat_work(work=work, expected_last_heartbeat=None)
        work.refresh_from_db()
        return Running(work=work, token=sessions_token(claimed.secret), session=session)

    return run
