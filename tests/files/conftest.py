"""Fixtures for the Memory Stores surface: SDK clients against a live server, and API helpers."""

from __future__ import annotations

import pytest
from anthropic import Anthropic

from accounts import services as account_services
from versions import services
from versions.actors import Actor


@pytest.fixture
def sdk_for(live_server):
    """Return ``make(user, scopes=ALL) -> Anthropic`` pointed at the live server (no retries).

    The client carries `.token` (the ApiToken row) so tests can compare `api_key_id`s. Clients are
    closed afterwards: an open keep-alive connection pins a server thread and its database session.
    """
    clients: list[Anthropic] = []

    def make(user, scopes=account_services.ALL_SCOPES) -> Anthropic:
        issued = account_services.issue_token(user=user, scopes=scopes)
        client = Anthropic(base_url=f"{live_server.url}/api", auth_token=issued.secret, max_retries=0)
        client.token = issued.token
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def sdk(sdk_for, owner):
    """The owner's SDK client."""
    return sdk_for(owner)


@pytest.fixture
def owner_actor(owner_client) -> Actor:
    """The api_actor of `owner_client`'s token (for seeding memories through the services)."""
    return Actor.api(owner_client.token.pk)


@pytest.fixture
def seed(private_store, owner_actor):
    """Return ``seed(path, content="x", store=private_store) -> Memory`` creating through the service."""

    def make(path: str, content: str = "x", store=None):
        return services.create_memory(
            store=store or private_store, path=path, content=content, actor=owner_actor
        ).memory

    return make


def memories_url(store, *rest: str) -> str:
    """``/api/v1/memory_stores/{id}/memories[/rest…]``."""
    return "/".join([f"/api/v1/memory_stores/{store.pk}/memories", *rest])


def versions_url(store, *rest: str) -> str:
    """``/api/v1/memory_stores/{id}/memory_versions[/rest…]``."""
    return "/".join([f"/api/v1/memory_stores/{store.pk}/memory_versions", *rest])


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Factories set passwords; the production hasher costs ~0.3 s per user and proves nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
