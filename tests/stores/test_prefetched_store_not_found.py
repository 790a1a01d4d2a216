"""A store fetched with the token (`store_kwarg`, issue 17) answers 404 exactly as a missing store does, for
every spelling of its id that is not canonical and for a caller who cannot read it (SPEC §2, §3)."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.django_db

STORE_URLS = [
    "/api/v1/memories/{}",
    "/api/v1/memories/{}/wake",
    "/api/v1/memories/{}/readers",
    "/api/v1/memories/{}/export",
    "/api/v1/memories/{}/recall?pattern=x",
    "/api/v1/memory_stores/{}",
    "/api/v1/memory_stores/{}/memories",
    "/api/v1/memory_stores/{}/memory_versions",
]


def _answer(response):
    body = response.json()
    body.pop("request_id", None)
    return response.status_code, body


@pytest.mark.parametrize("template", STORE_URLS)
def test_unreadable_and_non_canonical_ids_are_the_404_of_a_missing_store(
    template, owner_client, stranger_client, private_store
):
    canonical = str(private_store.pk)
    missing = _answer(owner_client.get(template.format(uuid.uuid4())))
    assert missing[0] == 404
    for spelling in (canonical.upper(), "{" + canonical + "}", "urn:uuid:" + canonical, canonical.replace("-", "")):
        assert _answer(owner_client.get(template.format(spelling))) == missing, spelling
    assert _answer(stranger_client.get(template.format(canonical))) == missing
