"""Each credential reaches exactly what SPEC §5 says, and nothing changes when one is refused.

- An environment key authenticates its own environment's work endpoints only (elsewhere 401).
- A per-work credential: its own session's GET, its own work item's heartbeat and stop, and the memory
  endpoints of the session's attached stores with the attachment's access intersected with the owner's
  current access; another store is 404 (the body of a missing one); a write after its claim ended is 409
  `lease_expired`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from accounts.models import User
from sessions.models import Work, WorkClaim
from sessions.services import sessions as session_services
from sessions.services import work as work_services
from tests.agent.conftest import bearer
from tests.factories import ProjectFactory, ProjectMembershipFactory, ReaderGrantFactory, StoreFactory, project_store
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db


def memories(store, *rest) -> str:
    return "/".join([f"/api/v1/memory_stores/{store.pk if hasattr(store, 'pk') else store}/memories", *rest])


def work_url(work, action: str = "") -> str:
    base = f"/api/v1/environments/{work.environment_id}/work/{work.pk}"
    return f"{base}/{action}" if action else base


def error_of(response) -> tuple[int, str, str | None]:
    body = response.json()
    return response.status_code, body["error"]["type"], (body["error"].get("details") or {}).get("reason")


# --- environment keys -----------------------------------------------------------------------------


def test_an_environment_key_is_401_on_every_endpoint_outside_its_work(key_api, environment, notes_store, make_session):
    session = make_session(notes_store)
    for method, url in [
        ("get", "/api/v1/me"),
        ("get", f"/api/v1/memory_stores/{notes_store.pk}"),
        ("get", memories(notes_store)),
        ("post", memories(notes_store)),
        ("get", f"/api/v1/memories/{notes_store.pk}"),
        ("get", "/api/v1/environments"),
        ("get", f"/api/v1/environments/{environment.pk}"),
        ("post", f"/api/v1/environments/{environment.pk}/keys"),
        ("get", "/api/v1/sessions"),
        ("get", f"/api/v1/sessions/{session.pk}"),
        ("get", f"/api/v1/environments/{environment.pk}/work/{Work.objects.get().pk}"),
    ]:
        response = getattr(key_api, method)(url, {"path": "/x.md", "content": "x"} if method == "post" else None)
        assert error_of(response)[:2] == (401, "authentication_error"), (method, url, response.content)
    assert not Memory.objects.exists()


def test_an_environment_key_is_401_on_another_environments_work_endpoints(key_api, owner):
    from sessions.services import environments as environment_services

    other = environment_services.create_environment(owner=owner, name="Other")
    for target in (other.pk, uuid.uuid4()):
        for url in (f"/api/v1/environments/{target}/work/poll", f"/api/v1/environments/{target}/work"):
            assert error_of(key_api.get(url))[:2] == (401, "authentication_error")


def test_an_api_token_is_401_on_the_workers_endpoints(owner_api, environment, run_session, notes_store):
    running = run_session(notes_store)
    for method, url in [
        ("get", f"/api/v1/environments/{environment.pk}/work/poll"),
        ("get", f"/api/v1/environments/{environment.pk}/work"),
        ("post", work_url(running.work, "ack")),
        ("post", work_url(running.work, "heartbeat")),
        ("post", work_url(running.work, "stop")),
    ]:
        assert error_of(getattr(owner_api, method)(url))[:2] == (401, "authentication_error"), url
    assert running.refresh().state == "active"


def test_unknown_and_revoked_credentials_are_401(environment, env_key):
    from sessions.services import environments as environment_services

    poll = f"/api/v1/environments/{environment.pk}/work/poll"
    for secret in ("menv_not-a-key", "mwork_not-a-credential", "mem_not-a-token"):
        assert error_of(bearer(secret).get(poll))[:2] == (401, "authentication_error")
    environment_services.revoke_environment_key(key=env_key.key)
    assert error_of(bearer(env_key.secret).get(poll))[:2] == (401, "authentication_error")


def test_an_inactive_owner_makes_both_agent_credentials_401(environment, env_key, run_session, notes_store, owner):
    running = run_session(notes_store)
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert bearer(env_key.secret).get(f"/api/v1/environments/{environment.pk}/work/poll").status_code == 401
    assert running.api.get(f"/api/v1/sessions/{running.session.pk}").status_code == 401


# --- per-work credentials: reach ------------------------------------------------------------------


def test_the_credential_reaches_its_session_and_not_another(run_session, notes_store, make_session):
    running = run_session(notes_store)
    other = make_session(notes_store)
    assert running.api.get(f"/api/v1/sessions/{running.session.pk}").status_code == 200
    missing = running.api.get(f"/api/v1/sessions/{uuid.uuid4()}")
    foreign = running.api.get(f"/api/v1/sessions/{other.pk}")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"] == missing.json()["error"]
    for method, url in [
        ("get", "/api/v1/sessions"),
        ("post", f"/api/v1/sessions/{running.session.pk}"),
        ("post", f"/api/v1/sessions/{running.session.pk}/archive"),
        ("get", f"/api/v1/sessions/{running.session.pk}/resources"),
        ("get", "/api/v1/environments"),
        ("get", "/api/v1/memory_stores"),
        ("post", "/api/v1/memory_stores"),
        ("get", "/api/v1/me"),
    ]:
        assert getattr(running.api, method)(url).status_code == 401, url


def test_the_credential_reaches_its_own_work_item_only(run_session, notes_store):
    first = run_session(notes_store)
    second = run_session(notes_store)
    for action in ("heartbeat", "stop"):
        assert error_of(first.api.post(work_url(second.work, action)))[:2] == (404, "not_found_error")
    assert second.refresh().state == "active"


def test_another_store_is_404_exactly_like_a_missing_store(run_session, notes_store, owner):
    running = run_session(notes_store)
    unattached = StoreFactory(owner=owner, canonical=False, name="Not attached")
    Memory_before = Memory.objects.count()
    for url in (memories(unattached), f"/api/v1/memory_stores/{unattached.pk}", memories(unattached, "x")):
        foreign = running.api.get(url)
        missing = running.api.get(url.replace(str(unattached.pk), str(uuid.uuid4())))
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json()["error"] == missing.json()["error"]
    assert running.api.post(memories(unattached), {"path": "/a.md", "content": "x"}).status_code == 404
    assert Memory.objects.count() == Memory_before


def test_writes_through_a_read_only_attachment_are_403_and_reads_work(run_session, owner):
    prefs = StoreFactory(owner=owner, canonical=False, name="Prefs")
    running = run_session((prefs, "read_only"))
    assert running.api.get(memories(prefs)).status_code == 200
    refused = running.api.post(memories(prefs), {"path": "/a.md", "content": "x"})
    assert error_of(refused)[:2] == (403, "permission_error")
    assert not Memory.objects.filter(store=prefs).exists()


def test_the_credential_never_has_owner_rights_on_an_attached_store(run_session, notes_store):
    running = run_session(notes_store)
    for method, url in [
        ("post", f"/api/v1/memory_stores/{notes_store.pk}"),
        ("post", f"/api/v1/memory_stores/{notes_store.pk}/archive"),
        ("delete", f"/api/v1/memory_stores/{notes_store.pk}"),
    ]:
        assert error_of(getattr(running.api, method)(url, {"name": "mine"}))[:2] == (403, "permission_error")
    notes_store.refresh_from_db()
    assert (notes_store.name, notes_store.archived_at) == ("Team Notes", None)


def test_an_agent_can_delete_a_persons_memory_but_never_redact_its_versions(run_session, notes_store, owner_api):
    """A breaker's agent deleted a person's memory and redacted every version: the text gone for good. The
    work credential may delete (undoable from the versions); redaction is for people's API tokens."""
    created = owner_api.post(memories(notes_store), {"path": "/decision.md", "content": "Human decision"})
    memory_id, first = created.json()["id"], Version.objects.get().pk
    running = run_session(notes_store)

    assert running.api.delete(memories(notes_store, memory_id)).status_code == 200
    versions = f"/api/v1/memory_stores/{notes_store.pk}/memory_versions"
    refused = [running.api.post(f"{versions}/{version.pk}/redact") for version in Version.objects.all()]

    assert len(refused) == 2 and all(error_of(r)[:2] == (403, "permission_error") for r in refused)
    assert Version.objects.get(pk=first).content == "Human decision"  # a person can still restore it
    by_the_owner = owner_api.post(f"{versions}/{first}/redact")
    assert by_the_owner.status_code == 200 and by_the_owner.json()["redacted_by"]["type"] == "api_actor"


def test_access_is_intersected_with_the_owners_current_access_on_every_request(environment, make_session):
    from sessions.services import work as services

    project = ProjectFactory()
    membership = ProjectMembershipFactory(project=project, user=environment.owner)
    store = project_store(project, name="Project log")
    make_session(store)
    claimed = services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    services.heartbeat_work(work=services.acknowledge_work(work=claimed.work), expected_last_heartbeat=None)
    from tests.agent.conftest import sessions_token

    agent = bearer(sessions_token(claimed.secret))
    assert agent.post(memories(store), {"path": "/a.md", "content": "x"}).status_code == 200
    membership.active = False
    membership.save()  # the owner left the (private) project: the store is now unreadable for them
    assert agent.get(memories(store)).status_code == 404
    assert agent.post(memories(store), {"path": "/b.md", "content": "x"}).status_code == 404
    assert list(Memory.objects.filter(store=store).values_list("path", flat=True)) == ["/a.md"]


def test_a_reader_owner_attaching_read_only_can_read_but_never_write(environment, make_session, owner):
    someone = User.objects.create_user("someone")
    theirs = StoreFactory(owner=someone, canonical=False, name="Theirs")
    ReaderGrantFactory(store=theirs, user=owner)
    from sessions.services import work as services
    from tests.agent.conftest import sessions_token

    make_session((theirs, "read_only"))
    claimed = services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    services.heartbeat_work(work=services.acknowledge_work(work=claimed.work), expected_last_heartbeat=None)
    agent = bearer(sessions_token(claimed.secret))
    assert agent.get(memories(theirs)).status_code == 200
    assert agent.post(memories(theirs), {"path": "/a.md", "content": "x"}).status_code == 403


# --- per-work credentials: the fence --------------------------------------------------------------


def _lapse(work: Work) -> None:
    Work.objects.filter(pk=work.pk).update(lease_expires_at=Now() - timedelta(milliseconds=1))


@pytest.mark.parametrize("ending", ["lapse", "reclaim", "stop", "archive"])
def test_a_write_after_the_claim_ended_is_409_lease_expired_and_changes_nothing(
    run_session, notes_store, environment, ending
):
    running = run_session(notes_store)
    assert running.api.post(memories(notes_store), {"path": "/before.md", "content": "x"}).status_code == 200
    if ending == "lapse":
        _lapse(running.work)
    elif ending == "reclaim":
        _lapse(running.work)
        work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    elif ending == "stop":
        work_services.stop_work(work=running.work, force=True)
    else:
        session_services.archive_session(session=running.session)
    memory = Memory.objects.get(path="/before.md")
    attempts = [
        running.api.post(memories(notes_store), {"path": "/after.md", "content": "x"}),
        running.api.post(memories(notes_store, str(memory.pk)), {"content": "changed"}),
        running.api.delete(memories(notes_store, str(memory.pk))),
        running.api.post(f"/api/v1/memory_stores/{notes_store.pk}/memory_versions/{memory.current_version_id}/redact"),
        running.api.get(memories(notes_store)),
        running.api.get(f"/api/v1/sessions/{running.session.pk}"),
    ]
    for response in attempts:
        assert error_of(response) == (409, "conflict_error", "lease_expired"), response.content
        assert response["x-should-retry"] == "false"
    assert list(Memory.objects.values_list("path", "content")) == [("/before.md", "x")]
    assert Version.objects.count() == 1


def test_after_a_reclaim_the_old_credential_gets_412_on_heartbeat_and_cannot_stop_the_new_claim(
    run_session, notes_store, environment
):
    running = run_session(notes_store)
    _lapse(running.work)
    work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    new_claim = Work.objects.get(pk=running.work.pk).claim_id
    beat = running.api.post(work_url(running.work, "heartbeat") + "?expected_last_heartbeat=NO_HEARTBEAT")
    assert beat.status_code == 412 and beat["x-should-retry"] == "false"
    assert beat.json()["error"]["details"]["current_state"]["state"] == "queued"
    assert error_of(running.api.post(work_url(running.work, "stop"), {"force": True})) == (
        409,
        "conflict_error",
        "lease_expired",
    )
    work = Work.objects.get(pk=running.work.pk)
    assert (work.state, work.claim_id) == ("queued", new_claim)
    assert WorkClaim.objects.get(pk=new_claim).ended_at is None


def test_an_environment_key_names_its_environment_only_in_the_canonical_spelling(key_api, environment, make_session):
    """Every id in a URL is canonical (docs/decisions.md "One rule each"): an uppercase, braced, URN or
    hyphen-less environment id with the environment's key polled the queue and claimed its item."""
    from sessions.models import WorkClaim

    make_session()
    text = str(environment.pk)
    for other in (text.upper(), "{" + text + "}", "urn:uuid:" + text, text.replace("-", "")):
        for path in ("work/poll", "work", "work/stats"):
            response = key_api.get(f"/api/v1/environments/{other}/{path}")
            assert response.status_code == 401, (other, path, response.content)
    assert not WorkClaim.objects.exists()
    assert key_api.get(f"/api/v1/environments/{text}/work/stats").status_code == 200


def test_an_ended_credential_gets_412_on_heartbeat_even_once_the_item_is_stopping_or_stopped(
    run_session, notes_store, environment
):
    """The state answer (`stopping`, `stopped`) is for the holder: a credential whose claim ended before —
    here by a reclaim — heard `stopping` with the new claim's heartbeat (a 200), and the SDK's loop took its
    lost lease for a stop (a breaker). The holder still hears the state, also after a force stop ended its
    claim; the old credential hears 412 throughout."""
    from tests.agent.conftest import sessions_token

    old = run_session(notes_store)
    _lapse(old.work)
    claimed = work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    work_services.acknowledge_work(work=claimed.work)
    holder = bearer(sessions_token(claimed.secret))
    beat = "heartbeat?expected_last_heartbeat=NO_HEARTBEAT"
    assert holder.post(work_url(old.work, beat)).status_code == 200
    work_services.stop_work(work=Work.objects.get(pk=old.work.pk))  # graceful: stopping

    for state in ("stopping", "stopped"):
        refused = old.api.post(work_url(old.work, beat))
        assert refused.status_code == 412, (state, refused.json())
        assert refused.json()["error"]["details"]["current_state"]["state"] == state
        heard = holder.post(work_url(old.work, "heartbeat"))
        assert heard.status_code == 200 and heard.json()["state"] == state, heard.json()
        assert heard.json()["lease_extended"] is False
        if state == "stopping":
            work_services.stop_work(work=Work.objects.get(pk=old.work.pk), force=True)


def test_a_lapsed_credential_hears_412_also_when_the_stop_is_what_applies_the_lapse(
    run_session, notes_store, environment
):
    """Applied by the stop, the lapse re-queued the item and stopped it at one instant: the lapsed claim
    then looked like the holder at the stop and heard `stopped` (200), where any other first reader of the
    lapse made it a 412 (a breaker)."""
    lapsed = run_session(notes_store)
    _lapse(lapsed.work)
    work_services.stop_work(work=Work.objects.get(pk=lapsed.work.pk))  # not forced: the item was queued

    beat = lapsed.api.post(work_url(lapsed.work, "heartbeat"))

    assert beat.status_code == 412, beat.json()
    assert beat.json()["error"]["details"]["current_state"]["state"] == "stopped"
