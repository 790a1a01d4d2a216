"""`Idempotency-Key` on the creates that mint a new object (`accounts.idempotency`; docs/decisions.md
"Idempotency"): a retry replays the first answer instead of making a second store, session, environment,
key or token — with our test client, with parallel clients on a live server, and with the official SDK
retrying after a lost answer."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import httpx
import httpx2
import pytest
from anthropic import Anthropic
from django.db.models import F
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.idempotency import KEY_MAX_CHARS, REPLAY_SECONDS
from accounts.models import ApiToken, IdempotentRequest
from sessions.models import Environment, EnvironmentKey, Session
from sessions.services import environments as environment_services
from stores.models import Store
from tests.documented import responses_of
from tests.threads import run_threads


@pytest.fixture
def environment(owner):
    return environment_services.create_environment(owner=owner, name="Build farm")


def creates(environment) -> dict:
    """name → (path, body, count of the objects it makes)."""
    return {
        "memory_store": ("/api/v1/memory_stores", {"name": "Notes"}, lambda: Store.objects.count()),
        "session": (
            "/api/v1/sessions",
            {"agent": "agent_1", "environment_id": str(environment.pk)},
            lambda: Session.objects.count(),
        ),
        "environment": ("/api/v1/environments", {"name": "Farm"}, lambda: Environment.objects.count()),
        "environment_key": (
            f"/api/v1/environments/{environment.pk}/keys",
            {"name": "worker"},
            lambda: EnvironmentKey.objects.count(),
        ),
        "token": ("/api/v1/me/tokens", {"name": "ci", "scopes": ["agent:read"]}, lambda: ApiToken.objects.count()),
    }


CREATES = ["memory_store", "session", "environment", "environment_key", "token"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", CREATES)
def test_a_retry_with_the_same_key_replays_the_first_answer_and_creates_nothing(owner_client, environment, name):
    path, body, count = creates(environment)[name]
    before = count()
    first = owner_client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code in (200, 201), first.content
    assert "Idempotent-Replayed" not in first
    again = owner_client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again["Idempotent-Replayed"] == "true"
    assert count() == before + 1
    fresh = owner_client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert fresh.status_code == first.status_code and fresh.json() != first.json()
    unkeyed = [owner_client.post(path, body, format="json") for _ in range(2)]
    assert all(r.status_code == first.status_code and "Idempotent-Replayed" not in r for r in unkeyed)
    assert count() == before + 4


@pytest.mark.django_db
@pytest.mark.parametrize("name", CREATES)
def test_the_key_with_another_request_is_a_409_that_creates_nothing(owner_client, environment, name):
    path, body, count = creates(environment)[name]
    assert owner_client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1").status_code in (200, 201)
    before = count()
    other_body = owner_client.post(path, {**body, "name": "Other"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    other_route = owner_client.post(
        "/api/v1/environments" if name != "environment" else "/api/v1/memory_stores",
        {"name": "x"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    other_query = owner_client.post(f"{path}?a=1", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    for response in (other_body, other_route):
        assert response.status_code == 409, response.content
        error = response.json()["error"]
        assert (error["type"], error["details"]["reason"]) == ("conflict_error", "idempotency_key_reused")
        assert response["x-should-retry"] == "false"
    assert other_query.status_code in (400, 409)  # these creates take no query: 400 before the key, or 409
    assert count() == before


@pytest.mark.django_db
def test_the_same_body_in_another_key_order_is_the_same_request(owner_client, environment):
    path = "/api/v1/environments"
    first = owner_client.post(
        path, '{"name": "Farm", "description": "d"}', content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    again = owner_client.post(
        path, '{"description":"d","name":"Farm"}', content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert first.status_code == 200 and again.json() == first.json() and again["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_keys_belong_to_their_user(owner_client, stranger_client, environment):
    mine = owner_client.post("/api/v1/environments", {"name": "Farm"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    theirs = stranger_client.post("/api/v1/environments", {"name": "Farm"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert mine.status_code == theirs.status_code == 200
    assert mine.json()["id"] != theirs.json()["id"] and "Idempotent-Replayed" not in theirs
    assert Environment.objects.filter(name="Farm").count() == 2


@pytest.mark.django_db
def test_a_refused_create_stores_nothing_and_its_key_stays_free(owner_client, environment):
    refused = owner_client.post(
        "/api/v1/sessions", {"agent": "a", "environment_id": "0" * 32}, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert refused.status_code in (400, 404), refused.content
    assert not IdempotentRequest.objects.exists()
    body = {"agent": "a", "environment_id": str(environment.pk)}
    created = owner_client.post("/api/v1/sessions", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert created.status_code == 200 and Session.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key, problem",
    [("", "blank"), ("k" * (KEY_MAX_CHARS + 1), "128"), ("a\x00b", "NUL"), ("\xff\xfe", "UTF-8")],
)
def test_a_bad_key_is_a_400_naming_the_header_and_creates_nothing(owner_client, key, problem):
    response = owner_client.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["details"]["fields"]) == ["Idempotency-Key"] and problem in error["message"]
    assert not Environment.objects.exists() and not IdempotentRequest.objects.exists()


@pytest.mark.django_db
def test_a_utf8_key_is_one_key_whatever_the_transport_spelling(owner_client):
    raw = "ключ".encode().decode("latin-1")  # how WSGI hands a UTF-8 header over
    first = owner_client.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY=raw)
    again = owner_client.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY=raw)
    assert again.json() == first.json() and Environment.objects.count() == 1


@pytest.mark.django_db
def test_a_secret_shown_once_is_replayed_but_never_stored_in_clear(owner_client, owner):
    key = "retry-me"
    first = owner_client.post(
        "/api/v1/me/tokens", {"name": "ci", "scopes": ["agent:read"]}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    secret = first.json()["data"]["token"]
    again = owner_client.post(
        "/api/v1/me/tokens", {"name": "ci", "scopes": ["agent:read"]}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert again.json()["data"]["token"] == secret
    row = IdempotentRequest.objects.get()
    stored = bytes(row.sealed_body) + bytes(row.key_digest) + bytes(row.fingerprint)
    assert secret.encode() not in stored and key.encode() not in stored
    assert bytes(row.key_digest) != hashlib.sha256(key.encode()).digest()
    assert ApiToken.objects.filter(user=owner).count() == 2  # the caller's and the one created
    me = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/me")
    assert me.status_code == 200  # the replayed secret is the live token's


@pytest.mark.django_db
def test_after_the_replay_period_the_key_creates_again_and_old_rows_are_purged(
    owner_client, stranger_client, owner, stranger
):
    stale = timedelta(seconds=REPLAY_SECONDS + 1)
    first = owner_client.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    owner_client.post("/api/v1/environments", {"name": "G"}, format="json", HTTP_IDEMPOTENCY_KEY="other")
    stranger_client.post("/api/v1/environments", {"name": "H"}, format="json", HTTP_IDEMPOTENCY_KEY="theirs")
    IdempotentRequest.objects.update(created_at=F("created_at") - stale)
    again = owner_client.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.status_code == 200 and again.json()["id"] != first.json()["id"]
    assert "Idempotent-Replayed" not in again
    # the caller's expired rows went (its other key too); another user's wait for that user's next create
    rows = list(IdempotentRequest.objects.values_list("user_id", flat=True))
    assert sorted(rows, key=str) == sorted([owner.pk, stranger.pk], key=str)
    reused = owner_client.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert reused.json()["id"] == again.json()["id"] and reused["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_keys_belong_to_their_token_so_a_shorter_token_never_collects_a_longer_ones_secret(owner, owner_client):
    """A tester's finding: a one-day token replaying the key of a 30-day token's create got the 30-day
    secret its own create is refused (a token may not create one expiring later than itself)."""
    body = {"name": "long", "scopes": ["agent:read", "memories:write"], "expires_in_days": 30}
    long = owner_client.post("/api/v1/me/tokens", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert long.status_code == 201
    short = account_services.issue_token(user=owner, expires_in_days=1)
    short_client = APIClient(HTTP_AUTHORIZATION=f"Bearer {short.secret}")
    refused = short_client.post("/api/v1/me/tokens", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert refused.status_code == 403, refused.content
    assert long.json()["data"]["token"] not in refused.content.decode()
    again = owner_client.post("/api/v1/me/tokens", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again["Idempotent-Replayed"] == "true" and again.json() == long.json()
    envs = [
        c.post("/api/v1/environments", {"name": "F"}, format="json", HTTP_IDEMPOTENCY_KEY="e")
        for c in (owner_client, short_client)
    ]
    assert envs[0].json()["id"] != envs[1].json()["id"] and "Idempotent-Replayed" not in envs[1]


# ------------------------------------------------------------------------------ real clients, live server


@pytest.mark.django_db(transaction=True)
def test_parallel_requests_with_one_key_make_one_object_and_all_get_its_answer(live_server, owner):
    """Eight clients send the same create with the same key at once: the first inserts the key's row, the
    others wait on its unique index and then replay the committed answer."""
    secret = account_services.issue_token(user=owner).secret
    answers: dict[str, httpx.Response] = {}
    start = threading.Barrier(8)

    def send(i):
        with httpx.Client(base_url=live_server.url, timeout=30) as client:
            start.wait(10)
            answers[i] = client.post(
                "/api/v1/environments",
                json={"name": "Farm"},
                headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "once"},
            )

    errors = run_threads({str(i): (lambda i=i: send(i)) for i in range(8)})
    assert not errors
    assert {r.status_code for r in answers.values()} == {200}
    assert len({r.content for r in answers.values()}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in answers.values()) == 1
    assert Environment.objects.count() == 1


class LoseFirstAnswer(httpx2.BaseTransport):
    """Sends every request to the server, but the first POST's answer is lost on its way back (the SDK
    sees a connection error after the server committed), as with a dropped connection or a proxy timeout.
    An httpx2 transport: the SDK refuses httpx objects."""

    def __init__(self):
        self.inner = httpx2.HTTPTransport()
        self.posts = 0

    def handle_request(self, request):
        response = self.inner.handle_request(request)
        if request.method == "POST":
            self.posts += 1
            if self.posts == 1:
                response.read()
                raise httpx2.ReadError("connection reset after the request was sent", request=request)
        return response

    def close(self):
        self.inner.close()


@pytest.mark.django_db(transaction=True)
def test_the_official_sdk_retrying_a_lost_answer_creates_one_session(live_server, owner, environment):
    secret = account_services.issue_token(user=owner).secret
    transport = LoseFirstAnswer()
    with Anthropic(
        base_url=f"{live_server.url}/api",
        auth_token=secret,
        max_retries=2,
        http_client=httpx2.Client(transport=transport),
    ) as sdk:
        session = sdk.beta.sessions.create(
            agent="agent_1",
            environment_id=str(environment.pk),
            extra_headers={"Idempotency-Key": "session-for-ticket-42"},
        )
    assert transport.posts == 2  # the SDK did retry
    assert [str(pk) for pk in Session.objects.values_list("id", flat=True)] == [session.id]


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["projects", "sections"])
def test_a_retried_project_or_section_create_replays_instead_of_a_409_for_its_own_slug(make_client, kind):
    """A project (a board: staff) whose create answer was lost: the retry under the same key gets the first
    answer, not `409 slug_taken` for the caller's own new slug; a refused create stores nothing, and the key
    with another slug is 409 `idempotency_key_reused`."""
    from accounts.models import Project, Section
    from tests.factories import UserFactory

    model = Project if kind == "projects" else Section
    client = make_client(UserFactory(is_staff=True))
    first = client.post(f"/api/v1/{kind}", {"slug": "apollo"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201, first.content
    again = client.post(f"/api/v1/{kind}", {"slug": "apollo"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (again.status_code, again.content, again["Idempotent-Replayed"]) == (201, first.content, "true")
    assert model.objects.count() == 1
    reused = client.post(f"/api/v1/{kind}", {"slug": "gemini"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert reused.status_code == 409 and reused.json()["error"]["details"]["reason"] == "idempotency_key_reused"
    taken = client.post(f"/api/v1/{kind}", {"slug": "APOLLO"}, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert taken.status_code == 409 and taken.json()["error"]["details"]["reason"] == "slug_taken"
    fresh = client.post(f"/api/v1/{kind}", {"slug": "orion"}, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert fresh.status_code == 201  # the refusal stored nothing under k-2
    assert model.objects.count() == 2


@pytest.mark.django_db
def test_the_openapi_document_names_the_header_on_exactly_the_replayable_creates(anon_client):
    import yaml

    document = yaml.safe_load(anon_client.get("/openapi.yaml").content)
    keyed = {}
    for item in document["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]
                if "Idempotency-Key" in names:
                    keyed[operation["operationId"]] = operation
    replayable = {
        "create_project",
        "create_section",
        "memory_stores_create",
        "sessions_create",
        "environments_create",
        "environments_keys_create",
        "create_token",
        "import_memories",
    }
    assert set(keyed) == replayable | {"note_memories"}
    for operation_id in replayable:
        operation = keyed[operation_id]
        key = next(p for p in operation["parameters"] if p["name"] == "Idempotency-Key")
        assert key["schema"] == {"type": "string", "minLength": 1, "maxLength": KEY_MAX_CHARS}
        for status, response in responses_of(document, operation).items():
            assert ("Idempotent-Replayed" in response.get("headers", {})) == status.startswith("2")
        assert "409" in operation["responses"]


@pytest.mark.django_db(transaction=True)
def test_a_slow_create_holds_no_lock_on_another_keys_expired_row(live_server, owner, monkeypatch):
    """The purge of expired rows runs in a statement of its own: a create that is slow (here: held inside
    the service) must not keep another request, taking over its own expired key, waiting for it. Inside the
    create's transaction the purge locked that row until the slow create ended (and two such requests could
    deadlock)."""
    from sessions.api import environments as environment_views

    token = account_services.issue_token(user=owner)
    headers = {"Authorization": f"Bearer {token.secret}"}
    with httpx.Client(base_url=live_server.url, timeout=10) as client:
        for key in ("a", "b"):
            sent = client.post("/api/v1/environments", json={"name": key}, headers={**headers, "Idempotency-Key": key})
            assert sent.status_code == 200
    IdempotentRequest.objects.update(created_at=F("created_at") - timedelta(seconds=REPLAY_SECONDS + 1))

    inside, release = threading.Event(), threading.Event()
    real = environment_views.services.create_environment

    def slow(**kwargs):
        if kwargs["name"] == "slow":
            inside.set()
            release.wait(20)
        return real(**kwargs)

    monkeypatch.setattr(environment_views.services, "create_environment", slow)
    answers = {}

    def send(key, name, timeout):
        with httpx.Client(base_url=live_server.url, timeout=timeout) as client:
            answers[key] = client.post(
                "/api/v1/environments", json={"name": name}, headers={**headers, "Idempotency-Key": key}
            )

    slow_one = threading.Thread(target=send, args=("a", "slow", 30))
    slow_one.start()
    try:
        assert inside.wait(10)
        send("b", "quick", 5)  # its expired row must not be locked by the slow create's transaction
        assert answers["b"].status_code == 200 and "Idempotent-Replayed" not in answers["b"].headers
    finally:
        release.set()
        slow_one.join(30)
    assert answers["a"].status_code == 200
