"""`/openapi.yaml` is a valid OpenAPI document (issue 15 #2) that says what the server really does (#4, #5, #10)."""

from __future__ import annotations

import re

import pytest
import yaml
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def document(django_db_blocker) -> dict:
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/openapi.yaml")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield path, method, operation


def test_the_document_passes_openapi_spec_validator(document):
    validate(document)  # raises on the first violation


def test_every_path_parameter_is_in_its_path_and_every_placeholder_is_a_parameter(document):
    for path, method, operation in operations(document):
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", path)), (method, path, declared)


def test_anonymous_reads_are_expressed_in_security(document):
    wake = document["paths"]["/api/v1/memories/{id}/wake"]["get"]
    note = document["paths"]["/api/v1/memories/{id}/note"]["post"]
    assert {} in wake["security"] and {"bearerAuth": []} in wake["security"]
    assert {} not in note["security"]
    assert "not readable by the caller" in wake["responses"]["404"]["description"]


def test_statuses_and_headers_the_server_sends_are_documented(document):
    for path, method, operation in operations(document):
        if "retired" in operation.get("tags", ()):
            continue
        responses = operation["responses"]
        for status in ("400", "401", "404", "406", "414", "503"):
            assert status in responses, (method, path, status)
        if method != "get":
            assert "415" in responses and "409" in responses, (method, path)
        for status, response in responses.items():
            assert "Request-Id" in response["headers"], (method, path, status)
        assert "Retry-After" in responses["503"]["headers"]
        if "409" in responses:
            assert "x-should-retry" in responses["409"]["headers"]


def component(document: dict, name: str) -> dict:
    return document["components"]["schemas"][name]


def test_the_schema_is_as_strict_as_the_server(document):
    ensure = component(document, "StoreEnsureRequest")
    assert ensure["additionalProperties"] is False
    assert ensure["properties"]["name"]["minLength"] == 1
    create = component(document, "MemoryCreateRequestRequest")
    assert not create["properties"]["content"].get("nullable")
    assert create["additionalProperties"] is False
    precondition = component(document, "PreconditionRequestRequest")
    assert precondition["properties"]["content_sha256"]["pattern"] == "^[0-9a-f]{64}$"
    compact = component(document, "CompactRequestRequest")
    assert compact["properties"]["source_digest"]["pattern"] == "^[0-9a-f]{64}$"
    recall = document["paths"]["/api/v1/memories/{id}/recall"]["get"]
    params = {p["name"]: p["schema"] for p in recall["parameters"]}
    assert params["pattern"]["maxLength"] == 200
    assert params["cursor"]["pattern"].startswith("^")
    listing = document["paths"]["/api/v1/memory_stores/{store_id}/memories"]["get"]
    params = {p["name"]: p["schema"] for p in listing["parameters"]}
    assert params["path_prefix"]["pattern"].startswith("^/")
    # A page token, the longest query value, leaves room for the rest of an 8 KiB request line.
    assert params["page"]["maxLength"] <= 4400
    resolve = document["paths"]["/api/v1/memories/resolve"]["get"]
    assert {p["name"]: p["schema"] for p in resolve["parameters"]}["ref"]["pattern"].startswith("^\\^")
