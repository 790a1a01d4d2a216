"""Shared fixtures: users, tokens and authenticated API clients."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts import services as account_services
from tests.factories import StoreFactory, UserFactory
from tests.serial import pytest_configure, pytest_runtest_protocol  # noqa: F401  (serial tests; the run's lock)


@pytest.fixture
def make_client(db):
    """Return ``make(user=None, scopes=ALL) -> APIClient``; `user=None` gives an anonymous client.

    The client carries `.user`, `.token` (the ApiToken row) and `.secret`.
    """

    def make(user=None, scopes=account_services.ALL_SCOPES, **token_kwargs) -> APIClient:
        client = APIClient()
        client.user = user
        client.token = client.secret = None
        if user is not None:
            issued = account_services.issue_token(user=user, scopes=scopes, **token_kwargs)
            client.token, client.secret = issued.token, issued.secret
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
        return client

    return make


@pytest.fixture
def owner(db):
    return UserFactory(handle="owner")


@pytest.fixture
def reader(db):
    return UserFactory(handle="reader")


@pytest.fixture
def stranger(db):
    return UserFactory(handle="stranger")


@pytest.fixture
def staff(db):
    return UserFactory(handle="staffer", is_staff=True, is_superuser=True)


@pytest.fixture
def owner_client(make_client, owner):
    return make_client(owner)


@pytest.fixture
def stranger_client(make_client, stranger):
    return make_client(stranger)


@pytest.fixture
def anon_client(make_client):
    return make_client(None)


@pytest.fixture
def private_store(owner):
    return StoreFactory(owner=owner, name="Owner notes")


@pytest.fixture
def public_store(owner):
    return StoreFactory(owner=owner, canonical=False, name="Owner public notes", visibility="public")


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Hash passwords with MD5 in tests: PBKDF2's deliberate slowness costs seconds and proves nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
