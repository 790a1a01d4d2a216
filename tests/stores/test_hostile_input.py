"""Hostile input on every store endpoint ends in a 4xx and changes nothing (SPEC §2)."""

from __future__ import annotations

import json

import pytest

from stores.models import ReaderGrant, Store
from tests.factories import ReaderGrantFactory

pytestmark = pytest.mark.django_db

STORE = "{store}"
GET_ENDPOINTS = [
    "/api/v1/memories",
    "/api/v1/memories/resolve",
    f"/api/v1/memories/{STORE}",
    f"/api/v1/memories/{STORE}/readers",
    "/api/v1/search?q=x",
    "/memories",
    "/memories.json",
]
BODY_ENDPOINTS = [
    ("POST", "/api/v1/memories"),
    ("PATCH", f"/api/v1/memories/{STORE}"),
    ("POST", f"/api/v1/memories/{STORE}/share"),
]
HOSTILE_QUERIES = ["%00", "%ED%A0%80", "%FF", "x%00y"]
HOSTILE_BODIES = [
    b'{"name": "a\\u0000b"}',
    b'{"name": "\\ud800"}',
    b'{"description_md": "\\udfff"}',
    b'{"handle": "a\\u0000"}',
    b'{"subject": "\\ud83d"}',
    b'{"a\\u0000": 1}',
    b'{"name": NaN}',
    b'{"name": "x", }',
    b"[]",
    b'"just a string"',
    b"42",
    b"null",
    b'{"name": {"nested": ["deep"]}}',
    b"\xff\xfe",
    b'{"name": "\xed\xa0\x80"}',
    b"[" * 5000 + b"]" * 5000,
]


@pytest.fixture
def snapshot(owner, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)

    def take():
        return (
            list(Store.objects.order_by("pk").values()),
            list(ReaderGrant.objects.order_by("pk").values()),
        )

    return take


def url_for(template: str, store) -> str:
    return template.replace(STORE, str(store.pk))


@pytest.mark.parametrize("endpoint", GET_ENDPOINTS)
@pytest.mark.parametrize("bad", HOSTILE_QUERIES)
def test_nul_surrogates_and_bad_utf8_in_queries_are_400(owner_client, private_store, endpoint, bad):
    joiner = "&" if "?" in endpoint else "?"
    response = owner_client.get(f"{url_for(endpoint, private_store)}{joiner}cursor={bad}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(("method", "endpoint"), BODY_ENDPOINTS)
@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=lambda body: body[:24].decode("latin-1"))
def test_hostile_bodies_are_400_and_change_nothing(owner_client, private_store, snapshot, method, endpoint, body):
    before = snapshot()
    response = owner_client.generic(method, url_for(endpoint, private_store), body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert snapshot() == before


@pytest.mark.parametrize(("method", "endpoint"), BODY_ENDPOINTS)
def test_oversized_bodies_are_413_and_change_nothing(owner_client, private_store, snapshot, method, endpoint, settings):
    before = snapshot()
    body = json.dumps({"name": "x" * (settings.MAX_REQUEST_BYTES + 1)}).encode()
    response = owner_client.generic(method, url_for(endpoint, private_store), body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"
    assert snapshot() == before


@pytest.mark.parametrize(("method", "endpoint"), BODY_ENDPOINTS)
def test_form_bodies_are_415_and_change_nothing(owner_client, private_store, snapshot, method, endpoint):
    before = snapshot()
    response = owner_client.generic(
        method, url_for(endpoint, private_store), b"name=x", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415
    assert snapshot() == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/memories/not-a-uuid",
        "/api/v1/memories/not-a-uuid/readers",
        "/api/v1/memories/%00/readers",
        "/api/v1/memories/%ED%A0%80",
        "/api/v1/memories/" + "1" * 5000,
        "/api/v1/memories/00000000-0000-0000-0000-000000000000/readers",
    ],
)
def test_bad_store_ids_are_4xx_never_500(owner_client, snapshot, path):
    before = snapshot()
    for method in ["GET", "PATCH", "DELETE"]:
        response = owner_client.generic(method, path, b"{}", content_type="application/json")
        assert 400 <= response.status_code < 500, (method, path, response.status_code)
    assert 400 <= owner_client.post(path.removesuffix("/readers") + "/share", {"handle": "x"}).status_code < 500
    assert snapshot() == before


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "1e3"},
        {"limit": ""},
        {"limit": " 5"},
        {"limit": "0x10"},
        {"cursor": ""},
        {"cursor": "a" * 5000},
        {"cursor": "eyJrIjpbIjIwMjYiLCJ4Il0sImIiOm51bGx9:1tAAAA:bad"},
        {"scope": ""},
        {"scope": "USER"},
    ],
)
def test_hostile_list_parameters_are_400(owner_client, params):
    assert owner_client.get("/api/v1/memories", params).status_code == 400
    assert owner_client.get("/memories.json", params).status_code == 400


def test_a_cursor_signed_for_one_list_is_rejected_by_another(owner_client, owner):
    from tests.factories import StoreFactory

    for _ in range(3):
        StoreFactory(owner=owner, canonical=False, name="alpha", visibility="public")
    list_cursor = owner_client.get("/api/v1/memories", {"limit": 1}).json()["meta"]["next_cursor"]
    directory_cursor = owner_client.get("/memories.json", {"limit": 1}).json()["meta"]["next_cursor"]
    assert owner_client.get("/memories.json", {"cursor": list_cursor}).status_code == 400
    assert owner_client.get("/api/v1/memories", {"cursor": directory_cursor}).status_code == 400
    assert owner_client.get("/api/v1/search", {"q": "alpha", "cursor": list_cursor}).status_code == 400
