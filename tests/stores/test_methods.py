"""Unusual methods on the store routes end in a 2xx or a 4xx, never a 500."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

PATHS = [
    "/api/v1/memories",
    "/api/v1/memories/resolve",
    "/api/v1/memories/{id}",
    "/api/v1/memories/{id}/readers",
    "/api/v1/memories/{id}/share",
    "/api/v1/search?q=x",
    "/memories",
    "/memories.yaml",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["OPTIONS", "HEAD", "PUT", "DELETE", "POST", "TRACE"])
def test_every_method_is_handled(owner_client, private_store, path, method):
    response = owner_client.generic(method, path.format(id=private_store.pk), b"{}", content_type="application/json")
    assert response.status_code < 500, (method, path, response.content)
