"""`/openapi.yaml` is a valid OpenAPI document (issue 15 #2) that says what the server really does (#4, #5, #10)."""

from __future__ import annotations

import json
import random
import re

import pytest
import yaml
from openapi_spec_validator import validate

from tests.documented import check, responses_of

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


def test_component_names_are_what_a_client_generator_should_name_its_classes(document):
    """drf-spectacular names a request body after its serializer plus "Request": `CompactRequestSerializer`
    became `CompactRequestRequest`, a class name every generated client carried (a tester)."""
    names = set(document["components"]["schemas"])
    assert not [name for name in names if "RequestRequest" in name]
    renamed = {"NoteRequest", "CompactRequest", "PatchedMemoryStoreUpdateRequest", "ProjectMembershipRequest"}
    assert renamed <= names
    for name in renamed:  # still closed: the server answers 400 to a key they do not list
        assert document["components"]["schemas"][name]["additionalProperties"] is False, name


def test_every_path_parameter_is_in_its_path_and_every_placeholder_is_a_parameter(document):
    for path, method, operation in operations(document):
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", path)), (method, path, declared)


def test_every_id_in_a_path_is_declared_a_uuid(document):
    """Clients (and the MCP tool schemas built from this document) learn an id's shape from `format: uuid`;
    the store, import and token ids were plain strings while every other id was a UUID."""
    ids = 0
    for path, method, operation in operations(document):
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path" and (parameter["name"] == "id" or parameter["name"].endswith("_id")):
                assert parameter["schema"] == {"type": "string", "format": "uuid"}, (method, path, parameter)
                ids += 1
    assert ids > 50  # every store, memory, version, session, environment, import and token route


def test_anonymous_reads_are_expressed_in_security(document):
    wake = document["paths"]["/api/v1/memories/{id}/wake"]["get"]
    note = document["paths"]["/api/v1/memories/{id}/note"]["post"]
    assert {} in wake["security"] and {"bearerAuth": []} in wake["security"]
    assert {} not in note["security"]
    assert "not readable by the caller" in responses_of(document, wake)["404"]["description"]


def test_statuses_and_headers_the_server_sends_are_documented(document):
    for path, method, operation in operations(document):
        if {"retired", "probes"} & set(operation.get("tags", ())):  # probes: test_the_probes_are_described_…
            continue
        responses = responses_of(document, operation)
        for status in ("400", "401", "404", "406", "408", "414", "431", "503"):
            assert status in responses, (method, path, status)
        if method != "get":
            assert "415" in responses and "409" in responses, (method, path)
        for status, response in responses.items():
            assert "Request-Id" in response["headers"], (method, path, status)
        assert "Retry-After" in responses["503"]["headers"]
        if "409" in responses:
            assert "x-should-retry" in responses["409"]["headers"]


def test_the_probes_are_described_as_they_answer(document, client):
    """`/healthz` and `/readyz` were missing from the document (plain views the generator does not see): a
    generated client or a monitoring tool reading it found no probe."""
    for path, body in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
        operation = document["paths"][path]["get"]
        assert operation["security"] == [{}] and operation["tags"] == ["probes"]
        responses = responses_of(document, operation)
        assert {"200", "400", "414", "431"} <= set(responses)
        schema = responses["200"]["content"]["application/json"]["schema"]
        answer = client.get(path)
        assert answer.status_code == 200 and answer.json() == body
        assert (
            set(answer.json()) == set(schema["required"]) and body["status"] in schema["properties"]["status"]["enum"]
        )
        assert all("Request-Id" in response["headers"] for response in responses.values())
    assert "Retry-After" in responses_of(document, document["paths"]["/readyz"]["get"])["503"]["headers"]
    assert "503" not in document["paths"]["/healthz"]["get"]["responses"]


def test_an_error_response_many_operations_share_is_written_once(document):
    """About a thousand error responses are a few distinct ones: written out in every operation they made an
    850 KB document (a tester). Each one two operations share is a `$ref` to `components/responses`."""
    inline: dict[str, list] = {}
    for path, method, operation in operations(document):
        for status, response in operation["responses"].items():
            if status[0] in "45" and "$ref" not in response:
                inline.setdefault(json.dumps(response, sort_keys=True), []).append((method, path, status))
    assert not [places for places in inline.values() if len(places) > 1]
    shared = document["components"]["responses"]
    assert {"NotFound", "Conflict", "LeaseExpired", "ServiceUnavailable"} <= set(shared)
    assert "not readable by the caller" in shared["NotFound"]["description"]
    assert "Retry-After" in shared["ServiceUnavailable"]["headers"]


def component(document: dict, name: str) -> dict:
    return document["components"]["schemas"][name]


def test_the_schema_is_as_strict_as_the_server(document):
    ensure = component(document, "StoreEnsureRequest")
    assert ensure["additionalProperties"] is False
    assert ensure["properties"]["name"]["minLength"] == 1
    create = component(document, "MemoryCreateRequest")
    assert not create["properties"]["content"].get("nullable")
    assert create["additionalProperties"] is False
    precondition = component(document, "PreconditionRequest")
    assert precondition["properties"]["content_sha256"]["pattern"] == "^[0-9a-f]{64}$"
    compact = component(document, "CompactRequest")
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


# --- real answers fit the document, read as OpenAPI 3.0.3 reads it (tests/documented.py) ----------------


def test_no_nullable_schema_in_the_document_refuses_null(document):
    """OpenAPI 3.0.3: `nullable: true` adds null only to a `type` in the same object, so drf-spectacular's
    nullable reference `{allOf: [X], nullable: true}` refuses null; config.schema.accept_null_references
    rewrites every one (`oneOf: [X, NullEnum]`), in paths and components alike."""
    found = []

    def visit(node, where):
        if isinstance(node, dict):
            if node.get("nullable") is True and "type" not in node and "allOf" in node:
                found.append(where)
            for key, value in node.items():
                visit(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                visit(value, f"{where}/{index}")

    visit(document, "#")
    assert found == []
    assert document["components"]["schemas"]["NullEnum"] == {"enum": [None]}


def test_the_nulls_real_answers_carry_fit_the_document(document, owner_client, private_store, owner):
    """NapData.job, WakeData.compaction, Import.store and MemoryVersion.created_by/redacted_by are null in
    these real answers; each answer validates against its documented schema."""
    from versions import services as version_services
    from versions.actors import Actor

    store = f"/api/v1/memories/{private_store.pk}"
    nap = owner_client.get(f"{store}/nap")
    assert nap.json()["data"]["job"] is None
    check(document, "/api/v1/memories/{id}/nap", "get", nap)
    wake = owner_client.get(f"{store}/wake")
    assert wake.json()["data"]["compaction"] is None
    check(document, "/api/v1/memories/{id}/wake", "get", wake)

    version_services.create_memory(store=private_store, path="/a.md", content="one", actor=Actor.user(owner.pk))
    versions = owner_client.get(f"/api/v1/memory_stores/{private_store.pk}/memory_versions")
    check(document, "/api/v1/memory_stores/{store_id}/memory_versions", "get", versions)
    version = owner_client.get(
        f"/api/v1/memory_stores/{private_store.pk}/memory_versions/{versions.json()['data'][0]['id']}"
    )
    assert version.json()["redacted_by"] is None
    check(document, "/api/v1/memory_stores/{store_id}/memory_versions/{version_id}", "get", version)

    upload = start_import(owner_client, private_store)
    assert upload.json()["data"]["store"] is None
    check(document, "/api/v1/memories/imports", "post", upload)
    got = owner_client.get(f"/api/v1/memories/imports/{upload.json()['data']['id']}")
    check(document, "/api/v1/memories/imports/{import_id}", "get", got)


def start_import(client, store):
    """Start an import of `store`'s export with its header line only (the import stays open)."""
    client.post(f"/api/v1/memories/{store.pk}/note", {"body_md": "x"}, format="json")
    export = b"".join(client.get(f"/api/v1/memories/{store.pk}/export").streaming_content)
    header = export.splitlines(keepends=True)[0]
    started = client.post("/api/v1/memories/imports", header, content_type="application/jsonl")
    assert started.status_code == 201, started.content
    return started


def test_aborting_an_import_answers_the_documented_200_with_its_body(document, owner_client, private_store):
    """DELETE /memories/imports/{id} answers 200 `{data: {id, deleted: true}, meta}` (clients rely on the
    body); the document said 204 "No response body"."""
    upload = start_import(owner_client, private_store)
    aborted = owner_client.delete(f"/api/v1/memories/imports/{upload.json()['data']['id']}")
    assert aborted.status_code == 200 and aborted.json()["data"]["deleted"] is True
    check(document, "/api/v1/memories/imports/{import_id}", "delete", aborted)
    assert "204" not in document["paths"]["/api/v1/memories/imports/{import_id}"]["delete"]["responses"]


def test_readers_of_a_project_store_answer_a_documented_409(document, owner_client):
    """GET readers of a project (or board) store is 409 `membership_governed` (SPEC §3), now documented,
    with the error object's schema."""
    assert owner_client.post("/api/v1/projects", {"slug": "apollo"}, format="json").status_code == 201
    store = owner_client.post("/api/v1/memories", {"scope": "project", "subject": "apollo"}, format="json")
    readers = owner_client.get(f"/api/v1/memories/{store.json()['data']['id']}/readers")
    assert readers.status_code == 409 and readers.json()["error"]["details"]["reason"] == "membership_governed"
    check(document, "/api/v1/memories/{id}/readers", "get", readers)


def test_the_idempotency_key_is_documented_with_the_bounds_the_note_enforces(document, owner_client, private_store):
    """The note's Idempotency-Key header is validated as the client_nonce: 1 to 128 characters, as declared."""
    from memories.models import NONCE_MAX_CHARS

    note = document["paths"]["/api/v1/memories/{id}/note"]["post"]
    schema = next(p for p in note["parameters"] if p["name"] == "Idempotency-Key")["schema"]
    assert (schema["minLength"], schema["maxLength"]) == (1, NONCE_MAX_CHARS)
    url = f"/api/v1/memories/{private_store.pk}/note"
    for key, status in [("k" * NONCE_MAX_CHARS, 201), ("k" * (NONCE_MAX_CHARS + 1), 400), ("", 400), ("1", 201)]:
        response = owner_client.post(url, {"body_md": "x"}, format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert response.status_code == status, (len(key), response.content)


def range_schemas(document) -> dict[str, dict]:
    zoom = document["paths"]["/api/v1/memories/{id}/zoom"]["get"]["parameters"]
    schemas = document["components"]["schemas"]
    return {
        "zoom": next(p for p in zoom if p["name"] == "range")["schema"],
        "compact": schemas["CompactRequest"]["properties"]["range"],
        "forget": schemas["ForgetRequest"]["properties"]["range"],
    }


def ecma_search(pattern: str, text: str) -> bool:
    """`pattern` searched as ECMA-262 (what OpenAPI means) searches: `$` at the very end only (Python's `$`
    also matches before a final newline)."""
    return re.search(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern, text) is not None


def generated_ranges(count: int) -> list[str]:
    """Edge cases plus `count` random strings near the range syntax (digits, '-', signs, spaces, zeros)."""
    rng = random.Random(15)
    cases = ["", "0", "00", "01", "0-0", "0-1", "0-01", "00-1", "1-", "-1", "1--2", "1-2-3", "+1", " 1", "1 ",
             "1\n", "\n1", "٤", "０", "1_0", "1e3", "0x1", "9" * 19, "9" * 20, f"{'1' * 19}-{'1' * 19}",
             f"{'1' * 20}-1", f"1-{'1' * 20}", str(2**62), str(2**62 + 1), f"0-{2**62 - 1}"]  # fmt: skip
    alphabet = "0123456789" * 4 + "---" + "+ \n.a٤"
    for _ in range(count):
        if rng.random() < 0.5:
            cases.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 45))))
        else:
            first, second = (rng.choice(["0", "00", "07", str(rng.randint(0, 10 ** rng.randint(1, 20)))]) for _ in "ab")
            cases.append(first if rng.random() < 0.3 else f"{first}-{second}")
    return cases


def test_the_range_pattern_is_exactly_the_syntax_the_parser_reads(document):
    """zoom's, compact's and forget's `range` declare maxLength 64 (the field's limit) and a pattern that
    accepts a string exactly when memories.tree.parse_range reads its syntax ('n' or 'a-b', canonical
    decimal); what is left to the parser is meaning (size, alignment, order, numbers up to 2^62)."""
    from memories.api.serializers import RANGE_MAX_CHARS
    from memories.tree import RangeError, parse_range

    declared = range_schemas(document)
    assert {schema["maxLength"] for schema in declared.values()} == {RANGE_MAX_CHARS}
    patterns = {schema["pattern"] for schema in declared.values()}
    assert len(patterns) == 1
    pattern = patterns.pop()
    accepted = refused = 0
    for text in generated_ranges(20_000):
        try:
            parse_range(text)
            syntax = True
        except RangeError as exc:
            syntax = "is not a range" not in str(exc)  # refused for its meaning, after its syntax was read
        assert ecma_search(pattern, text) == syntax, (text, syntax)
        accepted += syntax
        refused += not syntax
    assert accepted > 3_000 and refused > 3_000


def test_the_views_that_take_metadata_are_the_operations_whose_body_has_it(document):
    """`config.parsers` gives a bad character inside `metadata` the `invalid_metadata` code only on views that
    declare ``takes_metadata``; elsewhere `metadata` is an unknown field (a breaker: a NUL inside it got the
    code on `POST …/keys`). The declaration must follow the request bodies this document describes."""
    from django.urls import resolve

    def body_properties(operation) -> dict:
        schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        while "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        return schema.get("properties", {})

    taking, declaring = set(), set()
    for path, method, operation in operations(document):
        if method not in {"post", "patch", "put"}:
            continue
        view = resolve(re.sub(r"{\w+}", "00000000-0000-4000-8000-000000000000", path)).func.view_class
        if "metadata" in body_properties(operation):
            taking.add(view)
        if getattr(view, "takes_metadata", False):
            declaring.add(view)
    assert len(taking) == 7  # stores, environments and sessions (create, update), work update
    assert taking == declaring


@pytest.mark.django_db(transaction=True)
def test_the_document_is_generated_one_request_at_a_time(live_server, monkeypatch):
    """drf-spectacular loads its extensions on first use without a lock: four requests at once on a fresh
    worker gave 500 500 500 200 (`'NoneType' object has no attribute 'startswith'`, a breaker). Generations
    are serialised (`config.openapi.OpenApiDocumentView`): here each one is slowed so that they would overlap."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from drf_spectacular.generators import SchemaGenerator

    real, lock, state = SchemaGenerator.get_schema, threading.Lock(), {"now": 0, "most": 0}

    def slowed(self, *args, **kwargs):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.3)
            return real(self, *args, **kwargs)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(SchemaGenerator, "get_schema", slowed)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: httpx.get(f"{live_server.url}/openapi.yaml", timeout=60), range(4)))
    assert [answer.status_code for answer in answers] == [200] * 4
    assert state["most"] == 1
