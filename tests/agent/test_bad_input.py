"""Bad input gets a clear 4xx in the SPEC §2 error shape and changes nothing (SPEC §5)."""

from __future__ import annotations

import json
import uuid

import pytest
from django.urls import get_resolver

from accounts import services as account_services
from config.fields import JSON_TYPE_NAMES, json_type_of
from sessions.models import Environment, Session, Work
from sessions.services import environments as environment_services
from stores.models import Store
from tests.agent.conftest import bearer
from tests.factories import ReaderGrantFactory, StoreFactory, UserFactory

pytestmark = pytest.mark.django_db


def session_body(environment, *resources, **extra) -> dict:
    return {"agent": "agent_1", "environment_id": str(environment.pk), "resources": list(resources), **extra}


def resource(store, **extra) -> dict:
    return {"type": "memory_store", "memory_store_id": str(store.pk), **extra}


def assert_error(response, status: int, error_type: str, *, mentions: str | None = None) -> dict:
    body = response.json()
    assert response.status_code == status, response.content
    assert body["type"] == "error" and body["error"]["type"] == error_type
    assert body["request_id"].startswith("req_") and response["Request-Id"] == body["request_id"]
    if mentions:
        assert mentions in body["error"]["message"], body["error"]["message"]
    return body


@pytest.fixture
def nothing_created():
    yield
    assert not Session.objects.exists() and not Work.objects.exists()


@pytest.mark.usefixtures("nothing_created")
class TestSessionCreate:
    def test_a_resource_of_another_type_is_400_naming_it(self, owner_api, environment):
        body = session_body(environment, {"type": "file", "file_id": "file_1"})
        assert_error(
            owner_api.post("/api/v1/sessions", body), 400, "invalid_request_error", mentions="resources[0].type"
        )

    def test_nine_stores_are_400(self, owner_api, environment, owner):
        stores = [StoreFactory(owner=owner, canonical=False) for _ in range(9)]
        response = owner_api.post("/api/v1/sessions", session_body(environment, *map(resource, stores)))
        assert_error(response, 400, "invalid_request_error", mentions="at most 8")

    def test_the_same_store_twice_is_400(self, owner_api, environment, notes_store):
        body = session_body(environment, resource(notes_store), resource(notes_store, access="read_only"))
        assert_error(
            owner_api.post("/api/v1/sessions", body), 400, "invalid_request_error", mentions="already attached"
        )

    def test_an_archived_store_is_409_store_archived(self, owner_api, environment, notes_store):
        owner_api.post(f"/api/v1/memory_stores/{notes_store.pk}/archive")
        body = assert_error(
            owner_api.post("/api/v1/sessions", session_body(environment, resource(notes_store))), 409, "conflict_error"
        )
        assert body["error"]["details"]["reason"] == "store_archived"

    def test_an_unreadable_store_is_404_exactly_like_a_missing_one(self, owner_api, environment):
        private = StoreFactory(owner=UserFactory(handle="elsewhere"), canonical=False)
        unreadable = owner_api.post("/api/v1/sessions", session_body(environment, resource(private)))
        missing = owner_api.post(
            "/api/v1/sessions",
            session_body(environment, {"type": "memory_store", "memory_store_id": str(uuid.uuid4())}),
        )
        assert_error(unreadable, 404, "not_found_error")
        assert unreadable.json()["error"] == missing.json()["error"]

    def test_read_write_on_a_store_the_caller_can_only_read_is_403(self, owner_api, environment, owner):
        theirs = StoreFactory(owner=UserFactory(handle="lender"), canonical=False)
        ReaderGrantFactory(store=theirs, user=owner)
        response = owner_api.post("/api/v1/sessions", session_body(environment, resource(theirs)))
        assert_error(response, 403, "permission_error", mentions="read_only")

    def test_instructions_over_4096_characters_are_400(self, owner_api, environment, notes_store):
        body = session_body(environment, resource(notes_store, instructions="é" * 4097))
        assert_error(owner_api.post("/api/v1/sessions", body), 400, "invalid_request_error", mentions="4096")

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("agent", ""),
            ("agent", 7),
            ("agent", {"type": "agent_with_overrides", "id": "a"}),
            ("agent", {"type": "agent", "id": "a", "version": 0}),
            ("agent", {"type": "agent", "id": "a", "version": True}),
            ("agent", {"type": "agent", "id": "a", "model": "m"}),
            ("environment_id", "env_01"),
            ("budget", {"type": "limit", "max_list_cost": {"amount": "100", "currency": "USD"}}),
            ("initial_events", [{"type": "user.message"}]),
            ("vault_ids", ["vlt_1"]),
            ("title", "a\x00b"),
            ("metadata", {"k": 1}),
            ("metadata", {str(i): "v" for i in range(17)}),
            ("resources", {"type": "memory_store"}),
            ("unknown", 1),
        ],
    )
    def test_bad_fields_are_400(self, owner_api, environment, field, value):
        assert_error(
            owner_api.post("/api/v1/sessions", {**session_body(environment), field: value}),
            400,
            "invalid_request_error",
        )

    def test_another_users_environment_is_404(self, environment):
        from accounts import services
        from tests.agent.conftest import bearer

        other = bearer(services.issue_token(user=UserFactory(handle="other")).secret)
        assert_error(other.post("/api/v1/sessions", session_body(environment)), 404, "not_found_error")


def test_environment_bodies_are_strict(owner_api, environment):
    for body in [
        {"name": ""},
        {"name": "x" * 256},
        {"name": "a\ud800"},
        {"name": "ok", "config": {"type": "self_hosted", "image": "x"}},
        {"name": "ok", "config": "self_hosted"},
        {"name": "ok", "scope": "galaxy"},
        {"name": "ok", "description": "x" * 1025},
        {"name": "ok", "extra": True},
        {},
    ]:
        raw = json.dumps(body)  # escapes the lone surrogate as \ud800, as a hostile client would send it
        assert_error(
            owner_api.post("/api/v1/environments", raw, content_type="application/json"), 400, "invalid_request_error"
        )
    assert list(Environment.objects.values_list("pk", flat=True)) == [environment.pk]
    assert_error(
        owner_api.post(f"/api/v1/environments/{environment.pk}", {"metadata": {"k": 5}}), 400, "invalid_request_error"
    )
    assert_error(
        owner_api.post(f"/api/v1/environments/{environment.pk}/archive", {"now": True}), 400, "invalid_request_error"
    )
    environment.refresh_from_db()
    assert environment.metadata == {} and environment.archived_at is None


@pytest.mark.parametrize("body", [b"null", b"[]", b'"x"', b'{"now": true}'])
def test_the_bodyless_control_plane_writes_refuse_a_body_like_every_other_bodyless_write(
    owner_api, key_api, environment, make_session, notes_store, run_session, body
):
    """Environment archive, session archive and the work item's ack and heartbeat follow the one rule of
    `config.api.reject_body`: no body, an empty one or ``{}``; anything else is 400 and changes nothing."""
    running = run_session(notes_store)
    session = make_session(notes_store)  # after: run_session claims the oldest queued item
    work = f"/api/v1/environments/{running.work.environment_id}/work/{running.work.pk}"
    beat_before = running.refresh().last_heartbeat_at
    for api, url in [
        (owner_api, f"/api/v1/environments/{environment.pk}/archive"),
        (owner_api, f"/api/v1/sessions/{session.pk}/archive"),
        (key_api, f"{work}/ack"),  # the environment key acknowledges
        (running.api, f"{work}/heartbeat?expected_last_heartbeat=NO_HEARTBEAT"),
    ]:
        response = api.post(url, body, content_type="application/json")
        body_of = assert_error(response, 400, "invalid_request_error")
        assert "now" in body_of["error"]["message"] or "no request body" in body_of["error"]["message"], url
    environment.refresh_from_db()
    session.refresh_from_db()
    assert environment.archived_at is None and session.archived_at is None
    assert running.refresh().last_heartbeat_at == beat_before
    for api, url in [
        (owner_api, f"/api/v1/environments/{environment.pk}/archive"),
        (owner_api, f"/api/v1/sessions/{session.pk}/archive"),
    ]:
        assert api.post(url, b"{}", content_type="application/json").status_code == 200, url
        assert api.post(url).status_code == 200, url  # no body at all: archiving again returns it unchanged


@pytest.mark.parametrize("value", ["5.0", " 5", "5 ", "５", "yes", "", "1e2", "0x10", "9" * 21])
def test_a_desired_ttl_that_is_not_an_integer_is_400_and_changes_nothing(run_session, notes_store, value):
    running = run_session(notes_store)
    before = running.refresh().last_heartbeat_at
    url = f"/api/v1/environments/{running.work.environment_id}/work/{running.work.pk}/heartbeat"
    response = running.api.post(url + "?" + "&".join([f"desired_ttl_seconds={value}", "expected_last_heartbeat="]))
    assert_error(response, 400, "invalid_request_error")
    assert running.refresh().last_heartbeat_at == before


def test_expected_last_heartbeat_must_be_no_heartbeat_or_a_time(run_session, notes_store):
    running = run_session(notes_store)
    url = f"/api/v1/environments/{running.work.environment_id}/work/{running.work.pk}/heartbeat"
    for value in ("banana", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00", "no_heartbeat", "20261205T222909Z"):
        assert_error(
            running.api.post(url, QUERY_STRING=f"expected_last_heartbeat={value}"),
            400,
            "invalid_request_error",
            mentions="expected_last_heartbeat",
        )
    assert_error(running.api.post(url, {"ttl": 5}), 400, "invalid_request_error")


@pytest.mark.parametrize(
    "query",
    [
        "block_ms=0",
        "block_ms=1000",
        "block_ms=1.5",
        "block_ms=-1",
        "reclaim_older_than_ms=-1",
        "reclaim_older_than_ms=3600001",
        "wait=1",
    ],
)
def test_poll_parameters_out_of_range_are_400_and_claim_nothing(key_api, environment, make_session, notes_store, query):
    make_session(notes_store)
    assert_error(key_api.get(f"/api/v1/environments/{environment.pk}/work/poll?{query}"), 400, "invalid_request_error")
    assert Work.objects.get().claim_id is None


def test_a_head_of_poll_claims_nothing(key_api, environment, make_session, notes_store):
    """HEAD ran `get`: it claimed an item and minted a credential nobody received, holding the item from
    workers for the reclaim window (a breaker). Poll has no HEAD, as nap has none."""
    make_session(notes_store)
    response = key_api.head(f"/api/v1/environments/{environment.pk}/work/poll")
    assert response.status_code == 405 and "HEAD" not in response["Allow"]
    assert Work.objects.get().claim_id is None
    assert key_api.get(f"/api/v1/environments/{environment.pk}/work/poll").json()["id"] == str(Work.objects.get().pk)


def test_stop_force_must_be_a_json_boolean(run_session, notes_store):
    running = run_session(notes_store)
    url = f"/api/v1/environments/{running.work.environment_id}/work/{running.work.pk}/stop"
    for body in ({"force": "true"}, {"force": 1}, {"now": True}):
        assert_error(running.api.post(url, body, format="json"), 400, "invalid_request_error")
    assert running.refresh().state == "active"


def test_work_update_needs_a_valid_metadata_patch(owner_api, run_session, notes_store):
    """Without `metadata` the item is returned unchanged — the SDK: "Omit the field to preserve existing
    metadata" (it was 400 "metadata: This field is required.", without `invalid_metadata`; helper-94)."""
    running = run_session(notes_store)
    url = f"/api/v1/environments/{running.work.environment_id}/work/{running.work.pk}"
    assert owner_api.post(url, {"metadata": {"kept": "yes"}}, format="json").status_code == 200
    for empty in ({}, None):  # a `{}` body, and no body at all
        kept = owner_api.post(url, empty, format="json") if empty is not None else owner_api.post(url)
        assert kept.status_code == 200, kept.content
        assert kept.json()["metadata"] == {"kept": "yes"} and kept.json()["id"] == str(running.work.pk)
    Work.objects.filter(pk=running.work.pk).update(metadata={})
    too_many = owner_api.post(url, {"metadata": {str(i): "v" for i in range(17)}}, format="json")
    assert assert_error(too_many, 400, "invalid_request_error")["error"]["details"]["error_code"] == "invalid_metadata"
    assert running.refresh().metadata == {}


@pytest.mark.parametrize(
    "query",
    [
        "statuses[]=sleeping",
        "include_archived=yes",
        "include_archived=1",
        "limit=0",
        "limit=101",
        "limit=2.0",
        "order=up",
        "agent_version=-1",
        "page=forged",
        "created_at[gte]=yesterday",
        "colour=blue",
    ],
)
def test_session_list_parameters_are_strict(owner_api, query):
    assert_error(owner_api.get(f"/api/v1/sessions?{query}"), 400, "invalid_request_error")


@pytest.mark.parametrize("query", ["include_archived=True", "limit=0", "page=forged"])
def test_environment_list_parameters_are_strict(owner_api, query):
    assert_error(owner_api.get(f"/api/v1/environments?{query}"), 400, "invalid_request_error")


def test_version_filters_by_ids_that_match_nothing_are_an_empty_list(owner_api, notes_store, run_session):
    running = run_session(notes_store)
    running.api.post(f"/api/v1/memory_stores/{notes_store.pk}/memories", {"path": "/a.md", "content": "x"})
    url = f"/api/v1/memory_stores/{notes_store.pk}/memory_versions"
    for query in ("session_id=sesn_011CZkZ", "api_key_id=apikey_01", "session_id=", "api_key_id=%E2%9C%93"):
        response = owner_api.get(f"{url}?{query}")
        assert response.status_code == 200 and response.json() == {"data": [], "next_page": None}, query
    found = owner_api.get(f"{url}?session_id={running.session.pk}").json()["data"]
    assert [v["created_by"] for v in found] == [{"type": "session_actor", "session_id": str(running.session.pk)}]


@pytest.mark.usefixtures("nothing_created")
@pytest.mark.parametrize("value", [5, True, 1.5, [], {}, None, "env_01"])
def test_an_environment_id_that_is_not_a_uuid_string_is_400_naming_it(owner_api, environment, value):
    """`5` was read as UUID(int=5) (and `true` as UUID(int=1)): a 404 for a malformed body (breaker 1 #5)."""
    response = owner_api.post("/api/v1/sessions", {**session_body(environment), "environment_id": value}, format="json")
    assert_error(response, 400, "invalid_request_error", mentions="environment_id")


def _spellings(pk: uuid.UUID) -> list[str]:
    text = str(pk)
    return [text.upper(), "{" + text + "}", "urn:uuid:" + text, text.replace("-", ""), f" {text}", f"{text}\n"]


@pytest.mark.usefixtures("nothing_created")
def test_a_body_id_is_taken_only_in_the_canonical_spelling_a_url_takes(owner_api, environment, notes_store):
    """Body ids took every spelling Python's UUID does (upper case, braces, `urn:uuid:`, no hyphens) where the
    same id in a URL names nothing (helper-96): one spelling everywhere, `config.fields.canonical_uuid`."""
    for other in _spellings(environment.pk):
        response = owner_api.post("/api/v1/sessions", {**session_body(environment), "environment_id": other})
        error = assert_error(response, 400, "invalid_request_error")["error"]
        assert error["details"]["fields"] == {
            "environment_id": "must be an environment id: a UUID in lowercase with hyphens, as the API writes it."
        }, other
    for other in _spellings(notes_store.pk):
        item = {"type": "memory_store", "memory_store_id": other}
        response = owner_api.post("/api/v1/sessions", session_body(environment, item))
        fields = assert_error(response, 400, "invalid_request_error")["error"]["details"]["fields"]
        assert list(fields) == ["resources[0].memory_store_id"], (other, fields)
    assert owner_api.post("/api/v1/sessions", session_body(environment, resource(notes_store))).status_code == 200
    Session.objects.all().delete()
    Work.objects.all().delete()


@pytest.mark.usefixtures("nothing_created")
@pytest.mark.parametrize(
    ("agent", "problem"),
    [
        (" ", "must contain a visible character"),
        ("\u3000", "must contain a visible character"),
        ("\u00a0 \u2800", "must contain a visible character"),
        ("a\nb", "must not contain control characters or line separators."),
        ("a\u001b[31m", "must not contain control characters or line separators."),
        ("a\u0085", "must not contain control characters or line separators."),
        ("a\u2028b", "must not contain control characters or line separators."),
        ("a\u200bb", "must not contain U+200B"),
        ("\ufeff", "must not contain U+FEFF"),
        ("", "must be 1–200 characters (got 0)."),
    ],
)
def test_an_agent_id_follows_the_name_rule(owner_api, environment, agent, problem):
    """`"   "`, newlines, ESC sequences, U+2028 and invisible characters were a session's agent id (only `""`,
    NUL and lone surrogates were refused; helper-96, helper-99): the one name rule, in both spellings."""
    for value, field in ((agent, "agent"), ({"type": "agent", "id": agent}, "agent.id")):
        response = owner_api.post("/api/v1/sessions", {**session_body(environment), "agent": value})
        error = assert_error(response, 400, "invalid_request_error")["error"]
        assert list(error["details"]["fields"]) == [field], (value, error)
        assert problem in error["details"]["fields"][field], (value, error)


@pytest.mark.parametrize("agent", ["agent_011CZkZaBF1tNoB5wlCeusgy", "a b", "agent 日本", "x" * 200])
def test_an_agent_id_of_visible_text_is_kept_as_given(owner_api, environment, agent):
    response = owner_api.post("/api/v1/sessions", {**session_body(environment), "agent": agent})
    assert response.status_code == 200, response.content
    assert response.json()["agent"]["id"] == agent


def test_vault_ids_are_refused_in_one_wording_on_create_and_update(owner_api, environment, make_session):
    """Create said "this service keeps no credential vaults", update "this service never runs a model"."""
    created = owner_api.post("/api/v1/sessions", {**session_body(environment), "vault_ids": ["vlt_1"]})
    session = make_session()
    updated = owner_api.post(f"/api/v1/sessions/{session.pk}", {"vault_ids": ["vlt_1"]})
    said = {assert_error(r, 400, "invalid_request_error")["error"]["message"] for r in (created, updated)}
    assert said == {"vault_ids: not supported — this service keeps no credential vaults."}
    assert owner_api.post(f"/api/v1/sessions/{session.pk}", {"vault_ids": []}).status_code == 200


@pytest.mark.parametrize("name", ["a\u0001b", "a\nb", "a\x7fb", "a\u0085b", "a\x00b", "x" * 101, 5])
def test_environment_key_names_follow_the_one_name_rule(owner_api, environment, name):
    """Key names refuse control characters as environment names and session titles do (`clean_name`)."""
    response = owner_api.post(f"/api/v1/environments/{environment.pk}/keys", {"name": name}, format="json")
    assert_error(response, 400, "invalid_request_error", mentions="name")
    assert not environment.keys.exists()


def test_an_empty_key_name_is_still_allowed(owner_api, environment):
    response = owner_api.post(f"/api/v1/environments/{environment.pk}/keys", {"name": ""}, format="json")
    assert response.status_code == 200 and response.json()["name"] == ""


def _everything(*models) -> list:
    """What a refused request must leave unchanged (timestamps of credential use aside)."""
    from sessions.models import EnvironmentKey, WorkClaim

    return [
        list(Environment.objects.order_by("pk").values()),
        list(EnvironmentKey.objects.order_by("pk").values("pk", "name", "revoked_at")),
        list(Session.objects.order_by("pk").values()),
        list(Work.objects.order_by("pk").values()),
        list(WorkClaim.objects.order_by("pk").values()),
    ]


def test_every_agent_access_endpoint_refuses_an_unknown_query_parameter_naming_it(
    owner_api, key_api, env_key, environment, run_session, make_session, notes_store
):
    """inputs.py: 'an unknown body field or query parameter is 400 naming it' — on every endpoint, those
    without query parameters of their own too (`config.api.reject_query`): `POST …/stop?force=true` was a
    graceful stop, `GET /sessions/{id}?x=1` a 200. Each request is otherwise valid, and nothing changes."""
    running = run_session(notes_store)
    idle = make_session(notes_store)
    env = f"/api/v1/environments/{environment.pk}"
    work = f"{env}/work/{running.work.pk}"
    calls = [
        (owner_api, "get", "/api/v1/environments", None),
        (owner_api, "post", "/api/v1/environments", {"name": "new"}),
        (owner_api, "get", env, None),
        (owner_api, "post", env, {"name": "renamed"}),
        (owner_api, "delete", env, None),
        (owner_api, "post", f"{env}/archive", None),
        (owner_api, "get", f"{env}/keys", None),
        (owner_api, "post", f"{env}/keys", {"name": "k"}),
        (owner_api, "delete", f"{env}/keys/{env_key.key.pk}", None),
        (owner_api, "get", "/api/v1/sessions", None),
        (owner_api, "post", "/api/v1/sessions", session_body(environment)),
        (owner_api, "get", f"/api/v1/sessions/{idle.pk}", None),
        (owner_api, "post", f"/api/v1/sessions/{idle.pk}", {"title": "t"}),
        (owner_api, "delete", f"/api/v1/sessions/{idle.pk}", None),
        (owner_api, "post", f"/api/v1/sessions/{idle.pk}/archive", None),
        (owner_api, "get", f"/api/v1/sessions/{idle.pk}/resources", None),
        (running.api, "get", f"/api/v1/sessions/{running.session.pk}", None),
        (key_api, "get", f"{env}/work", None),
        (key_api, "get", f"{env}/work/poll", None),
        (key_api, "get", f"{env}/work/stats", None),
        (owner_api, "get", f"{env}/work/stats", None),
        (owner_api, "get", work, None),
        (owner_api, "post", work, {"metadata": {"k": "v"}}),
        (key_api, "post", f"{work}/ack", None),
        (key_api, "post", f"{work}/heartbeat", None),
        (running.api, "post", f"{work}/heartbeat", None),
        (key_api, "post", f"{work}/stop", {"force": True}),
        (running.api, "post", f"{work}/stop", {}),
    ]
    before = _everything()
    for api, method, url, body in calls:
        response = getattr(api, method)(f"{url}?force=true", body, format="json")
        assert_error(response, 400, "invalid_request_error", mentions="force: Unknown field.")
    assert _everything() == before


def test_the_endpoints_without_query_parameters_still_answer_without_one(
    owner_api, environment, run_session, notes_store
):
    running = run_session(notes_store)
    work = f"/api/v1/environments/{environment.pk}/work/{running.work.pk}"
    assert owner_api.get(f"/api/v1/environments/{environment.pk}").status_code == 200
    assert owner_api.get(f"/api/v1/sessions/{running.session.pk}").status_code == 200
    assert owner_api.get(work).status_code == 200
    assert running.api.post(f"{work}/stop", {}, format="json").json()["state"] == "stopping"


def test_a_page_token_carried_to_another_caller_is_refused(owner, owner_api, make_session):
    """Page tokens were bound to the list and its query only: another caller's was a 200 page of their own
    (memory stores) or an empty one (environments, sessions; a tester). Bound to the caller now."""
    stores = [StoreFactory(owner=owner, canonical=False, name=f"s{n}") for n in range(3)]
    for store in stores[:2]:
        make_session(store)
    environment_services.create_environment(owner=owner, name="Second")
    other = UserFactory(handle="other-caller")
    for store in stores:
        ReaderGrantFactory(store=store, user=other)  # the other caller reads the very same stores
    other_api = bearer(account_services.issue_token(user=other).secret)
    for url in ("/api/v1/memory_stores", "/api/v1/environments", "/api/v1/sessions"):
        first = owner_api.get(f"{url}?limit=1").json()
        assert first["next_page"], url
        refused = other_api.get(f"{url}?limit=1&page={first['next_page']}")
        error = assert_error(refused, 400, "invalid_request_error")["error"]
        assert set(error["details"]["fields"]) == {"page"}, url
        assert owner_api.get(f"{url}?limit=1&page={first['next_page']}").status_code == 200, url


JSON_VALUES = {"null": None, "integer": 5, "number": 2.5, "boolean": True, "array": [], "object": {}, "string": "x"}


def test_every_raw_body_field_documents_the_json_types_it_takes():
    """A raw field (its value passed untouched to the service's validator) is type-checked by the JSON types
    its schema documents: each one names them, documents null exactly when it takes null, and a metadata field
    keeps the SDK's `invalid_metadata` code when its type is refused."""
    from drf_spectacular.drainage import get_override

    from config.api import STRICT_SERIALIZERS, documented_json_types
    from versions.api.serializers import RawField

    assert get_resolver().url_patterns  # every view's serializers imported
    raw = [
        (cls.__name__, name, field)
        for cls in STRICT_SERIALIZERS
        if cls.json_typed
        for name, field in cls._declared_fields.items()
        if isinstance(field, RawField)
    ]
    assert len(raw) >= 30
    for where, name, field in raw:
        schema = get_override(type(field), "field")
        assert documented_json_types(field), (where, name)
        assert bool(schema.get("nullable")) == field.allow_null, (where, name)
        assert (field.error_code == "invalid_metadata") == (name == "metadata"), (where, name)


def test_raw_fields_refuse_another_json_type_in_the_words_of_every_other_field(
    owner_api, environment, notes_store, make_session
):
    """`{"name": null}` was "This field may not be null." and `{"name": 5}` "must be a string." on memory
    stores, environments and sessions, where every other body said "Must be a string, not null." (helper-92,
    helper-93); a metadata refusal keeps `details.error_code: invalid_metadata` (the SDK's
    BetaInvalidMetadataError), and nothing is written."""
    memory = owner_api.post(
        f"/api/v1/memory_stores/{notes_store.pk}/memories", {"path": "/a.md", "content": "x"}, format="json"
    ).json()
    session = make_session(notes_store)
    stores, memories = "/api/v1/memory_stores", f"/api/v1/memory_stores/{notes_store.pk}/memories"
    new_session = {"agent": "agent_1", "environment_id": str(environment.pk)}
    # (path, body around the field, field, the JSON types it takes, their words)
    cases = [
        (stores, {}, "name", {"string"}, "a string"),
        (stores, {"name": "n"}, "description", {"string"}, "a string"),
        (stores, {"name": "n"}, "metadata", {"object"}, "an object"),
        (f"{stores}/{notes_store.pk}", {}, "name", {"string", "null"}, "a string or null"),
        (f"{stores}/{notes_store.pk}", {}, "metadata", {"object", "null"}, "an object or null"),
        (memories, {"path": "/b.md"}, "content", {"string"}, "a string"),
        (memories, {"content": "x"}, "path", {"string"}, "a string"),
        (f"{memories}/{memory['id']}", {}, "content", {"string", "null"}, "a string or null"),
        (f"{memories}/{memory['id']}", {}, "precondition", {"object", "null"}, "an object or null"),
        ("/api/v1/environments", {}, "name", {"string"}, "a string"),
        ("/api/v1/environments", {"name": "e"}, "config", {"object", "null"}, "an object or null"),
        ("/api/v1/environments", {"name": "e"}, "metadata", {"object"}, "an object"),
        (f"/api/v1/environments/{environment.pk}", {}, "scope", {"string", "null"}, "a string or null"),
        (f"/api/v1/environments/{environment.pk}/keys", {}, "name", {"string"}, "a string"),
        ("/api/v1/sessions", {**new_session, "agent": None}, "agent", {"string", "object"}, "an object or a string"),
        ("/api/v1/sessions", new_session, "environment_id", {"string"}, "a string"),
        ("/api/v1/sessions", new_session, "resources", {"array", "null"}, "an array or null"),
        ("/api/v1/sessions", new_session, "vault_ids", {"array"}, "an array"),
        (f"/api/v1/sessions/{session.pk}", {}, "metadata", {"object", "null"}, "an object or null"),
        (f"/api/v1/sessions/{session.pk}", {}, "title", {"string", "null"}, "a string or null"),
    ]
    counts = (Store.objects.count(), Environment.objects.count(), Session.objects.count())
    tried = 0
    for path, around, field, takes, words in cases:
        for kind, value in JSON_VALUES.items():
            if kind in takes or (kind == "integer" and "number" in takes):
                continue
            response = owner_api.post(path, {**around, field: value}, format="json")
            error = assert_error(response, 400, "invalid_request_error")["error"]
            expected = f"Must be {words}, not {JSON_TYPE_NAMES[kind]}."
            if (path, field, value) == (memories, "content", None):  # the hint a new memory's null content gets
                expected = expected.removesuffix(".") + '; use "" for an empty memory.'
            assert error["details"]["fields"] == {field: expected}, (path, field, value)
            assert error["message"] == f"{field}: {expected}"
            assert error["details"].get("error_code") == ("invalid_metadata" if field == "metadata" else None)
            tried += 1
    assert tried == 110
    assert (Store.objects.count(), Environment.objects.count(), Session.objects.count()) == counts
    assert owner_api.get(f"{memories}/{memory['id']}").json()["content"] == "x"


def test_a_refusal_is_a_metadata_error_only_when_metadata_alone_is_refused(owner_api, notes_store, make_session):
    """`{"name": 5, "metadata": 5}` carried `error_code: invalid_metadata` (BetaInvalidMetadataError in the
    SDK) although `name` was refused too (helper-94)."""
    session = make_session(notes_store)
    for path in (f"/api/v1/memory_stores/{notes_store.pk}", f"/api/v1/sessions/{session.pk}"):
        other = "name" if "memory_stores" in path else "title"
        both = assert_error(
            owner_api.post(path, {other: 5, "metadata": 5}, format="json"), 400, "invalid_request_error"
        )
        assert set(both["error"]["details"]) == {"fields"} and set(both["error"]["details"]["fields"]) == {
            other,
            "metadata",
        }
        alone = assert_error(owner_api.post(path, {"metadata": 5}, format="json"), 400, "invalid_request_error")
        assert alone["error"]["details"]["error_code"] == "invalid_metadata"
    notes_store.refresh_from_db()
    assert notes_store.name == "Team Notes"


def test_nested_session_fields_of_another_json_type_say_which_type(owner_api, environment, notes_store):
    """`resources[0].instructions: 7` said "Must be a string" although it takes null, a number for
    `memory_store_id` "must be a memory store id (a UUID string)." and a string `agent.version` "must be an
    integer from 1 to …" (helper-94): nested fields in the words of every other field."""
    item = {"type": "memory_store", "memory_store_id": str(notes_store.pk)}
    cases = [
        ({"resources": [{**item, "instructions": 7}]}, "resources[0].instructions", "a string or null", 7),
        ({"resources": [{**item, "access": True}]}, "resources[0].access", "a string or null", True),
        ({"resources": [{**item, "memory_store_id": 7}]}, "resources[0].memory_store_id", "a string", 7),
        ({"agent": {"type": "agent", "id": "a", "version": "5"}}, "agent.version", "an integer or null", "5"),
        ({"agent": {"type": "agent", "id": "a", "version": 2.5}}, "agent.version", "an integer or null", 2.5),
    ]
    for extra, field, words, value in cases:
        body = {"agent": "agent_1", "environment_id": str(environment.pk), **extra}
        error = assert_error(owner_api.post("/api/v1/sessions", body, format="json"), 400, "invalid_request_error")
        expected = f"Must be {words}, not {JSON_TYPE_NAMES[json_type_of(value)]}."
        assert error["error"]["details"]["fields"] == {field: expected}, (extra, error)
    assert not Session.objects.exists()


def test_a_null_content_is_refused_beside_the_other_problems(owner_api, notes_store):
    """A new memory's null content was refused alone, before the body's other problems (helper-94)."""
    url = f"/api/v1/memory_stores/{notes_store.pk}/memories"
    error = assert_error(owner_api.post(url, {"path": 5, "content": None}, format="json"), 400, "invalid_request_error")
    assert error["error"]["details"]["fields"] == {
        "path": "Must be a string, not an integer.",
        "content": 'Must be a string, not null; use "" for an empty memory.',
    }
    for body in ({}, {"path": "/p.md"}):  # no content at all (was a 500 in a first version of this, schemathesis)
        missing = assert_error(owner_api.post(url, body, format="json"), 400, "invalid_request_error")["error"]
        assert missing["details"]["fields"]["content"] == "This field is required."
    unknown = owner_api.post(url, {"path": "/p.md", "content": None, "zz": 1}, format="json")
    assert assert_error(unknown, 400, "invalid_request_error")["error"]["details"]["fields"] == {"zz": "Unknown field."}
    assert not owner_api.get(url).json()["data"]


@pytest.mark.parametrize("value", ["yes", "1", "True", ""])
def test_a_boolean_query_parameter_is_refused_in_one_wording_everywhere(owner_api, value):
    """Environments and sessions had their own boolean (`Must be "true" or "false".`) beside every other
    list's `Must be true or false.`: one field, `config.fields.QueryBooleanField`."""
    said = set()
    for path in ("/api/v1/environments", "/api/v1/sessions", "/api/v1/memory_stores"):
        response = owner_api.get(path, {"include_archived": value})
        said.add(assert_error(response, 400, "invalid_request_error")["error"]["details"]["fields"]["include_archived"])
    assert said == {"Must be true or false."}
    assert owner_api.get("/api/v1/sessions", {"include_archived": "true"}).status_code == 200
