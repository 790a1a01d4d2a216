"""Retired flat-record endpoints answer 410 for every method, before any auth check (SPEC §7)."""

from __future__ import annotations

import pytest
import yaml

from tests.documented import responses_of

RETIRED_PATHS = [
    "/api/v1/records",
    "/api/v1/records/",
    "/api/v1/records/42",
    "/api/v1/records/42/assessments",
    "/api/v1/records/42/revisions/7",
    "/api/v1/records.json",
    "/api/v1/assessments",
    "/api/v1/assessments/9",
    "/api/v1/assessments/9/",
    "/api/v1/r/rec-000123",
    "/api/v1/r/rec-000123/assessments",
    "/api/v1/r",
]
METHODS = ["get", "post", "put", "patch", "delete", "head", "options", "trace"]


def request(client, method: str, path: str, **extra):
    if method == "trace":
        return client.generic("TRACE", path, **extra)
    return getattr(client, method)(path, **extra)


@pytest.mark.django_db
@pytest.mark.parametrize("path", RETIRED_PATHS)
@pytest.mark.parametrize("method", METHODS)
def test_retired_path_answers_410_with_guide_url_and_link_header_without_a_token(anon_client, path, method):
    response = request(anon_client, method, path)
    assert response.status_code == 410
    assert response["Link"] == '<http://testserver/docs/memories>; rel="help"'
    assert response["Request-Id"].startswith("req_")
    if method != "head":
        body = response.json()
        assert body["type"] == "error"
        assert body["error"]["type"] == "gone_error"
        assert body["error"]["details"]["guide_url"] == "http://testserver/docs/memories"


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_retired_path_answers_410_even_with_an_invalid_or_a_valid_token(make_client, owner, method):
    bogus = make_client(None)
    bogus.credentials(HTTP_AUTHORIZATION="Bearer mem_not-a-real-token")
    for client in (bogus, make_client(owner)):
        response = request(client, method, "/api/v1/records/1", data={"label": "x"}, format="json")
        assert response.status_code == 410
        assert response.json()["error"]["type"] == "gone_error"


@pytest.mark.django_db
def test_retired_path_ignores_a_malformed_body(anon_client):
    response = anon_client.post("/api/v1/records", data=b"{not json", content_type="application/json")
    assert response.status_code == 410


@pytest.mark.django_db
def test_guide_url_honours_public_base_url(anon_client, settings):
    settings.PUBLIC_BASE_URL = "https://memories.example.org/"
    response = anon_client.delete("/api/v1/assessments/3")
    assert response.json()["error"]["details"]["guide_url"] == "https://memories.example.org/docs/memories"
    assert response["Link"] == '<https://memories.example.org/docs/memories>; rel="help"'


@pytest.mark.django_db
def test_routes_that_only_look_alike_are_not_retired(anon_client):
    for path in ["/api/v1/recordsets", "/api/v1/rx/1", "/api/v1/assessment"]:
        assert anon_client.get(path).status_code == 404


@pytest.mark.django_db
def test_the_guide_is_served_as_markdown_without_a_token(anon_client):
    response = anon_client.get("/docs/memories")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    text = response.content.decode("utf-8")
    for topic in ["wake", "recall", "zoom", "compact", "memories:write", "Migration 0041", "/api/v1/memory_stores"]:
        assert topic in text


@pytest.mark.django_db
def test_the_guide_rejects_writes_with_the_error_shape(anon_client):
    response = anon_client.post("/docs/memories")
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.django_db
def test_openapi_lists_retired_paths_as_deprecated_operations_answering_410(client):
    doc = yaml.safe_load(client.get("/openapi.yaml").content)
    for path in ["/api/v1/records", "/api/v1/records/{record_ref}", "/api/v1/assessments", "/api/v1/r/{key}"]:
        operations = doc["paths"][path]
        assert set(operations) >= {"get", "post", "put", "patch", "delete"}
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            assert operation["deprecated"] is True
            assert "410" in operation["responses"]
            assert "401" not in operation["responses"]
            assert {"408", "414", "431"} <= set(operation["responses"])  # the HTTP layer's, on any path (a tester)
            assert "Link" in responses_of(doc, operation)["410"]["headers"]
