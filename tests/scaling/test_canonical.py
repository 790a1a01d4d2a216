"""The one-canonical-store-per-subject rule in its subject-keyed table (issue 21; docs/decisions.md).

`stores_canonicalstore` is written in the store's transaction and deleted with the store; `Store.canonical`
mirrors it. Every way a canonical store appears or goes keeps the two together.
"""

from __future__ import annotations

import pytest

from stores import services
from stores.models import CanonicalStore, Scope, Store

pytestmark = pytest.mark.django_db


def _canonical() -> set[tuple[str, object, object]]:
    return set(CanonicalStore.objects.values_list("scope", "subject_id", "store_id"))


def test_ensure_records_the_store_and_delete_frees_the_subject(owner_client, owner):
    first = owner_client.post("/api/v1/memories", {})
    assert first.status_code == 201
    store_id = first.json()["data"]["id"]
    assert {(s, str(subject), str(store)) for s, subject, store in _canonical()} == {("user", str(owner.pk), store_id)}
    deleted = owner_client.delete(f"/api/v1/memories/{store_id}?expected_entry_count=0&generation=1")
    assert deleted.status_code == 200
    assert _canonical() == set()
    again = owner_client.post("/api/v1/memories", {})
    assert again.status_code == 201 and again.json()["data"]["id"] != store_id
    assert (
        owner_client.get("/api/v1/memories/resolve", {"scope": "user", "subject": "me"}).json()["data"]["id"]
        == (again.json()["data"]["id"])
    )


def test_a_second_canonical_create_of_one_owner_is_an_ordinary_store(owner):
    first = services.create_store(owner=owner, name="one", canonical=True)
    second = services.create_store(owner=owner, name="two", canonical=True)
    assert (first.canonical, second.canonical) == (True, False)
    assert Store.objects.get(pk=second.pk).canonical is False
    assert _canonical() == {(Scope.USER, owner.pk, first.pk)}


def test_resolve_finds_the_store_through_the_subject_table_only(owner_client, owner, private_store):
    # Store.canonical alone does not make a store canonical: the subject table decides.
    CanonicalStore.objects.all().delete()
    response = owner_client.get("/api/v1/memories/resolve", {"scope": "user", "subject": "me"})
    assert response.status_code == 404
