"""/openapi.yaml describes the agent-access endpoints exactly (SPEC §5): every real response validates
against its documented schema (closed objects: an undocumented key fails), every body is closed, and each
operation names exactly the credentials it accepts."""

from __future__ import annotations

import pytest
import yaml

from tests.agent.conftest import bearer
from tests.documented import check, response_errors

pytestmark = pytest.mark.django_db

PREFIXES = ("/api/v1/environments", "/api/v1/sessions")
SECURITY = {
    ("/api/v1/environments", "get"): ["bearerAuth"],
    ("/api/v1/environments", "post"): ["bearerAuth"],
    ("/api/v1/environments/{environment_id}/keys", "post"): ["bearerAuth"],
    ("/api/v1/environments/{environment_id}/work", "get"): ["environmentKey"],
    ("/api/v1/environments/{environment_id}/work/poll", "get"): ["environmentKey"],
    ("/api/v1/environments/{environment_id}/work/stats", "get"): ["bearerAuth", "environmentKey"],
    ("/api/v1/environments/{environment_id}/work/{work_id}", "get"): ["bearerAuth"],
    ("/api/v1/environments/{environment_id}/work/{work_id}", "post"): ["bearerAuth"],
    ("/api/v1/environments/{environment_id}/work/{work_id}/ack", "post"): ["environmentKey"],
    ("/api/v1/environments/{environment_id}/work/{work_id}/heartbeat", "post"): ["environmentKey", "workCredential"],
    ("/api/v1/environments/{environment_id}/work/{work_id}/stop", "post"): ["environmentKey", "workCredential"],
    ("/api/v1/sessions/{session_id}", "get"): ["bearerAuth", "workCredential"],
    ("/api/v1/sessions/{session_id}", "post"): ["bearerAuth"],
    ("/api/v1/sessions/{session_id}/resources", "get"): ["bearerAuth"],
    ("/api/v1/memory_stores/{store_id}/memories", "post"): ["bearerAuth", "workCredential"],
    ("/api/v1/memory_stores", "get"): ["bearerAuth"],
}


@pytest.fixture(scope="module")
def document(django_db_blocker) -> dict:
    from rest_framework.test import APIClient

    with django_db_blocker.unblock():
        response = APIClient().get("/openapi.yaml")
    return yaml.safe_load(response.content)


def test_the_check_itself_rejects_an_undocumented_key_and_a_wrong_type(document, owner_api, environment):
    path = "/api/v1/environments/{environment_id}"
    body = owner_api.get(f"/api/v1/environments/{environment.pk}").json()
    assert response_errors(document, path, "get", 200, body) == []
    assert response_errors(document, path, "get", 200, {**body, "extra": 1})
    assert response_errors(document, path, "get", 200, {**body, "metadata": {"k": 1}})


def test_every_agent_access_response_matches_its_documented_schema(
    document, owner_api, key_api, environment, notes_store, owner
):
    env = f"/api/v1/environments/{environment.pk}"
    made = owner_api.post(
        "/api/v1/environments", {"name": "E", "metadata": {"a": "b"}, "scope": "account"}, format="json"
    )
    check(document, "/api/v1/environments", "post", made)
    check(document, "/api/v1/environments", "get", owner_api.get("/api/v1/environments"))
    check(document, "/api/v1/environments/{environment_id}", "get", owner_api.get(env))
    check(document, "/api/v1/environments/{environment_id}", "post", owner_api.post(env, {"description": None}))
    key = owner_api.post(f"{env}/keys", {"name": "k"})
    check(document, "/api/v1/environments/{environment_id}/keys", "post", key)
    check(document, "/api/v1/environments/{environment_id}/keys", "get", owner_api.get(f"{env}/keys"))
    check(
        document,
        "/api/v1/environments/{environment_id}/keys/{key_id}",
        "delete",
        owner_api.delete(f"{env}/keys/{key.json()['id']}"),
    )
    session = owner_api.post(
        "/api/v1/sessions",
        {
            "agent": {"type": "agent", "id": "a", "version": 2},
            "environment_id": str(environment.pk),
            "title": "t",
            "resources": [{"type": "memory_store", "memory_store_id": str(notes_store.pk), "instructions": "i"}],
        },
        format="json",
    )
    check(document, "/api/v1/sessions", "post", session)
    sid = session.json()["id"]
    check(document, "/api/v1/sessions", "get", owner_api.get("/api/v1/sessions?limit=1"))
    check(
        document, "/api/v1/sessions/{session_id}/resources", "get", owner_api.get(f"/api/v1/sessions/{sid}/resources")
    )
    check(document, "/api/v1/environments/{environment_id}/work/poll", "get", key_api.get(f"{env}/work/poll"))
    empty = key_api.get(f"{env}/work/poll")
    assert empty.content == b"null"
    check(document, "/api/v1/environments/{environment_id}/work/poll", "get", empty)
    work_id = key_api.get(f"{env}/work").json()["data"][0]["id"]
    work = f"{env}/work/{work_id}"
    check(document, "/api/v1/environments/{environment_id}/work", "get", key_api.get(f"{env}/work"))
    check(document, "/api/v1/environments/{environment_id}/work/{work_id}/ack", "post", key_api.post(f"{work}/ack"))
    beat = key_api.post(f"{work}/heartbeat?expected_last_heartbeat=NO_HEARTBEAT&desired_ttl_seconds=30")
    check(document, "/api/v1/environments/{environment_id}/work/{work_id}/heartbeat", "post", beat)
    refused = key_api.post(f"{work}/heartbeat?expected_last_heartbeat=NO_HEARTBEAT")
    assert refused.status_code == 412
    check(document, "/api/v1/environments/{environment_id}/work/{work_id}/heartbeat", "post", refused)
    check(document, "/api/v1/environments/{environment_id}/work/stats", "get", key_api.get(f"{env}/work/stats"))
    check(document, "/api/v1/environments/{environment_id}/work/{work_id}", "get", owner_api.get(work))
    check(
        document,
        "/api/v1/environments/{environment_id}/work/{work_id}",
        "post",
        owner_api.post(work, {"metadata": {"k": "v"}}, format="json"),
    )
    check(
        document,
        "/api/v1/environments/{environment_id}/work/{work_id}/stop",
        "post",
        key_api.post(f"{work}/stop", {"force": True}, format="json"),
    )
    check(document, "/api/v1/sessions/{session_id}", "get", owner_api.get(f"/api/v1/sessions/{sid}"))
    check(
        document,
        "/api/v1/sessions/{session_id}",
        "post",
        owner_api.post(f"/api/v1/sessions/{sid}", {"metadata": {"x": "y"}}, format="json"),
    )
    check(document, "/api/v1/sessions/{session_id}/archive", "post", owner_api.post(f"/api/v1/sessions/{sid}/archive"))
    check(document, "/api/v1/sessions/{session_id}", "delete", owner_api.delete(f"/api/v1/sessions/{sid}"))
    check(document, "/api/v1/environments/{environment_id}/archive", "post", owner_api.post(f"{env}/archive"))
    check(document, "/api/v1/environments/{environment_id}", "delete", owner_api.delete(env))
    assert owner  # the owner of everything above


def test_every_body_and_object_of_these_endpoints_is_closed(document):
    schemas = document["components"]["schemas"]
    seen = 0
    for path, item in document["paths"].items():
        if not path.startswith(PREFIXES):
            continue
        for operation in item.values():
            refs = [c["schema"] for c in operation.get("requestBody", {}).get("content", {}).values()]
            refs += [operation["responses"]["200"]["content"]["application/json"]["schema"]]
            for ref in refs:
                ref = ref.get("$ref") or ref["oneOf"][0]["$ref"]  # a nullable reference: [X, NullEnum]
                assert schemas[ref.rsplit("/", 1)[1]]["additionalProperties"] is False, (path, ref)
                seen += 1
    assert seen > 20


def test_each_operation_names_exactly_the_credentials_it_accepts(document):
    for (path, method), schemes in SECURITY.items():
        security = document["paths"][path][method]["security"]
        assert sorted(name for requirement in security for name in requirement) == sorted(schemes), (path, method)
    assert set(document["components"]["securitySchemes"]) >= {"bearerAuth", "environmentKey", "workCredential"}


def test_the_schema_agrees_with_the_server_on_what_the_heartbeat_refuses(document, run_session, notes_store):
    running = run_session(notes_store)
    op = document["paths"]["/api/v1/environments/{environment_id}/work/{work_id}/heartbeat"]["post"]
    ttl = next(p for p in op["parameters"] if p["name"] == "desired_ttl_seconds")["schema"]
    url = f"/api/v1/environments/{running.work.environment_id}/work/{running.work.pk}/heartbeat"
    assert bearer(running.token).post(f"{url}?desired_ttl_seconds={ttl['maximum']}").status_code == 200
    assert bearer(running.token).post(f"{url}?desired_ttl_seconds={ttl['maximum'] + 1}").status_code == 400


def test_every_read_a_dead_per_work_credential_is_refused_documents_its_409(document, run_session, notes_store, owner):
    """A per-work credential whose lease has ended is 409 `lease_expired` on reads too; the GET operations
    that accept it did not list 409 (a tester). Every operation naming `workCredential` lists it now."""
    from sessions.services import work as work_services
    from versions import services as version_services
    from versions.actors import Actor

    memory = version_services.create_memory(
        store=notes_store, path="/a.md", content="a", actor=Actor.user(owner.pk)
    ).memory
    running = run_session(notes_store)
    work_services.stop_work(work=running.work, force=True)
    store = f"/api/v1/memory_stores/{notes_store.pk}"
    version = memory.current_version_id
    reads = {
        "/api/v1/sessions/{session_id}": f"/api/v1/sessions/{running.session.pk}",
        "/api/v1/memory_stores/{store_id}": store,
        "/api/v1/memory_stores/{store_id}/memories": f"{store}/memories",
        "/api/v1/memory_stores/{store_id}/memories/{memory_id}": f"{store}/memories/{memory.pk}",
        "/api/v1/memory_stores/{store_id}/memory_versions": f"{store}/memory_versions",
        "/api/v1/memory_stores/{store_id}/memory_versions/{version_id}": f"{store}/memory_versions/{version}",
    }
    for path, address in reads.items():
        response = running.api.get(address)
        assert response.status_code == 409 and response.json()["error"]["details"]["reason"] == "lease_expired"
        check(document, path, "get", response)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if any("workCredential" in requirement for requirement in operation.get("security", [])):
                assert "409" in operation["responses"], (method, path)
