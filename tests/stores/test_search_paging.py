"""Following search cursors visits every hit exactly once and ends (regression: a cursor that repeated)."""

from __future__ import annotations

import pytest

from tests.factories import StoreFactory, UserFactory

pytestmark = pytest.mark.django_db


def walk(client, q: str) -> list[str]:
    seen: list[str] = []
    params = {"q": q, "limit": 1}
    for _ in range(20):
        body = client.get("/api/v1/search", params).json()
        seen += [hit["store"]["id"] for hit in body["data"]]
        if not body["meta"]["next_cursor"]:
            return seen
        params = {"q": q, "limit": 1, "cursor": body["meta"]["next_cursor"]}
    raise AssertionError(f"search paging did not end: {seen}")


def test_paging_through_equal_ranks_ends_and_repeats_nothing(owner_client, owner):
    for i in range(3):
        StoreFactory(owner=owner, canonical=False, name=f"memories number {i}", description="memories about memories")
    seen = walk(owner_client, "memories")
    assert len(seen) == len(set(seen)) == 3


def test_paging_through_distinct_ranks_of_public_stores_ends(stranger_client):
    names = ["demo memories", "File Memory Stores test", "memories of memories and more memories", "x"]
    for i, name in enumerate(names):
        StoreFactory(owner=UserFactory(), name=name, description="Notes about memories " * i, visibility="public")
    seen = walk(stranger_client, "memories")
    assert len(seen) == len(set(seen)) == 4
