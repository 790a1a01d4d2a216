"""Sessions through the official SDK against a live server (SPEC §5): create/retrieve/list/update/archive/
delete and `sessions.resources.list`, every documented key of the session object, mount paths, status."""

from __future__ import annotations

import anthropic
import pytest

from sessions.models import Attachment, Session, Work
from tests.factories import StoreFactory

pytestmark = pytest.mark.django_db(transaction=True)

SESSION_KEYS = {
    "id",
    "type",
    "agent",
    "archived_at",
    "budget",
    "created_at",
    "deployment_id",
    "environment_id",
    "metadata",
    "outcome_evaluations",
    "resources",
    "stats",
    "status",
    "title",
    "updated_at",
    "usage",
    "vault_ids",
}
RESOURCE_KEYS = {"type", "memory_store_id", "access", "description", "instructions", "mount_path", "name"}


def test_create_attaches_memory_stores_with_snapshots_and_queues_one_work_item(
    owner_sdk, environment, notes_store, owner
):
    prefs = StoreFactory(owner=owner, canonical=False, name="User preferences", description="")
    raw = owner_sdk.beta.sessions.with_raw_response.create(
        agent={"type": "agent", "id": "agent_42", "version": 3},
        environment_id=str(environment.pk),
        title="Nightly triage",
        metadata={"ticket": "T-9"},
        resources=[
            {"type": "memory_store", "memory_store_id": str(notes_store.pk), "instructions": "Append decisions."},
            {"type": "memory_store", "memory_store_id": str(prefs.pk), "access": "read_only"},
        ],
    )
    body, session = raw.http_response.json(), raw.parse()
    assert set(body) == SESSION_KEYS and all(set(r) == RESOURCE_KEYS for r in body["resources"])
    assert (session.type, session.status, session.title, session.metadata) == (
        "session",
        "idle",
        "Nightly triage",
        {"ticket": "T-9"},
    )
    assert (session.agent.id, session.agent.version, session.agent.type) == ("agent_42", 3, "agent")
    assert (session.vault_ids, session.outcome_evaluations, session.budget, session.deployment_id) == (
        [],
        [],
        None,
        None,
    )
    assert session.usage.input_tokens == session.usage.output_tokens == 0 and session.stats.active_seconds == 0
    notes, prefs_resource = session.resources
    assert (notes.memory_store_id, notes.access, notes.name, notes.description, notes.instructions) == (
        str(notes_store.pk),
        "read_write",
        "Team Notes",
        "What we decided.",
        "Append decisions.",
    )
    assert (notes.mount_path, prefs_resource.mount_path, prefs_resource.access) == (
        "/mnt/memory/team-notes",
        "/mnt/memory/user-preferences",
        "read_only",
    )
    work = Work.objects.get(session_id=session.id)
    assert (work.state, work.environment_id) == ("queued", environment.pk)


def test_names_and_descriptions_are_snapshots_that_later_renames_do_not_touch(owner_sdk, environment, notes_store):
    session = owner_sdk.beta.sessions.create(
        agent="agent_1",
        environment_id=str(environment.pk),
        resources=[{"type": "memory_store", "memory_store_id": str(notes_store.pk)}],
    )
    owner_sdk.beta.memory_stores.update(str(notes_store.pk), name="Renamed", description="New words")
    resource = owner_sdk.beta.sessions.retrieve(session.id).resources[0]
    assert (resource.name, resource.description, resource.mount_path) == (
        "Team Notes",
        "What we decided.",
        "/mnt/memory/team-notes",
    )


def test_mount_paths_slug_the_names_and_number_repeats(owner_sdk, environment, owner):
    names = ["Demo Memory", "demo memory!", "--Demo--Memory--", "!!!", "Ünïcode café", "demo-memory-2"]
    stores = [StoreFactory(owner=owner, canonical=False, name=name) for name in names]
    session = owner_sdk.beta.sessions.create(
        agent="agent_1",
        environment_id=str(environment.pk),
        resources=[{"type": "memory_store", "memory_store_id": str(s.pk)} for s in stores],
    )
    assert [r.mount_path for r in session.resources] == [
        "/mnt/memory/demo-memory",
        "/mnt/memory/demo-memory-2",
        "/mnt/memory/demo-memory-3",
        "/mnt/memory/store",
        "/mnt/memory/n-code-caf",
        "/mnt/memory/demo-memory-2-2",
    ]


def test_mount_paths_of_the_longest_names_stay_folders_a_worker_can_create(owner_sdk, environment, owner, tmp_path):
    """Store names may be 255 characters; the slug and its `-2` must still be one folder name (NAME_MAX,
    255 bytes): `a`×255 twice made `…a-2` of 257 bytes, and the worker failed every run with ENAMETOOLONG."""
    names = ["A" * 255, "a" * 255, "a" * 252 + "-bb", "a" * 252 + " BB", "a" * 255]
    stores = [StoreFactory(owner=owner, canonical=False, name=name) for name in names]
    session = owner_sdk.beta.sessions.create(
        agent="agent_1",
        environment_id=str(environment.pk),
        resources=[{"type": "memory_store", "memory_store_id": str(s.pk)} for s in stores],
    )
    slugs = [r.mount_path.removeprefix("/mnt/memory/") for r in session.resources]
    # the cut lands on the hyphen of `…a-bb` in the fourth: trimmed, so no `--2`
    assert slugs == ["a" * 255, "a" * 253 + "-2", "a" * 252 + "-bb", "a" * 252 + "-2", "a" * 253 + "-3"]
    assert len(set(slugs)) == len(slugs)
    for slug in slugs:
        (tmp_path / slug).mkdir()  # raises OSError (ENAMETOOLONG) past 255 bytes


def test_an_agent_named_by_id_is_kept_with_version_zero_and_empty_model_fields(owner_sdk, environment):
    created = owner_sdk.beta.sessions.create(agent="agent_by_id", environment_id=str(environment.pk))
    agent = created.agent
    assert (agent.id, agent.version, agent.name, agent.model.id) == ("agent_by_id", 0, "", "")
    # the version it reads is one a list can filter by (was a 400; a breaker)
    assert [s.id for s in owner_sdk.beta.sessions.list(agent_id="agent_by_id", agent_version=0)] == [created.id]
    assert list(owner_sdk.beta.sessions.list(agent_id="agent_by_id", agent_version=1)) == []
    assert (agent.tools, agent.skills, agent.mcp_servers, agent.system) == ([], [], [], None)
    assert agent.execution_identity.type == "service_account"


def test_retrieve_update_and_list_with_filters(owner_sdk, environment, notes_store, make_session, owner):
    other = StoreFactory(owner=owner, canonical=False, name="Other")
    first = make_session(notes_store)
    second = make_session(other, title="second")
    updated = owner_sdk.beta.sessions.update(str(second.pk), title="renamed", metadata={"k": "v"})
    assert (updated.title, updated.metadata) == ("renamed", {"k": "v"})
    assert owner_sdk.beta.sessions.update(str(second.pk), metadata={"k": None}).metadata == {}
    assert [s.id for s in owner_sdk.beta.sessions.list()] == [str(second.pk), str(first.pk)]
    assert [s.id for s in owner_sdk.beta.sessions.list(order="asc")] == [str(first.pk), str(second.pk)]
    assert [s.id for s in owner_sdk.beta.sessions.list(memory_store_id=str(notes_store.pk))] == [str(first.pk)]
    assert [s.id for s in owner_sdk.beta.sessions.list(agent_id="agent_test", agent_version=1)] == [
        str(second.pk),
        str(first.pk),
    ]
    assert [s.id for s in owner_sdk.beta.sessions.list(limit=1)] == [str(second.pk), str(first.pk)]  # two pages
    for no_match in ({"memory_store_id": "memstore_01"}, {"deployment_id": "dep_1"}, {"agent_id": "nope"}):
        assert list(owner_sdk.beta.sessions.list(**no_match)) == []
    page = owner_sdk.beta.sessions.list(limit=1)
    assert page.prev_page is None and page.next_page is not None


def test_status_is_idle_then_running_while_leased_then_terminated_once_archived(
    owner_sdk, environment, notes_store, make_session, claim
):
    session = make_session(notes_store)
    assert owner_sdk.beta.sessions.retrieve(str(session.pk)).status == "idle"
    claim()
    assert owner_sdk.beta.sessions.retrieve(str(session.pk)).status == "running"
    assert [s.id for s in owner_sdk.beta.sessions.list(statuses=["running"])] == [str(session.pk)]
    assert list(owner_sdk.beta.sessions.list(statuses=["idle"])) == []
    archived = owner_sdk.beta.sessions.archive(str(session.pk))
    assert archived.status == "terminated" and archived.archived_at is not None
    assert owner_sdk.beta.sessions.archive(str(session.pk)).archived_at == archived.archived_at
    assert list(owner_sdk.beta.sessions.list()) == []
    assert [s.id for s in owner_sdk.beta.sessions.list(include_archived=True)] == [str(session.pk)]
    assert [s.id for s in owner_sdk.beta.sessions.list(statuses=["terminated"])] == [str(session.pk)]
    with pytest.raises(anthropic.ConflictError) as caught:
        owner_sdk.beta.sessions.update(str(session.pk), title="late")
    assert caught.value.body["error"]["details"]["reason"] == "session_archived"


def test_resources_list_returns_the_attachments_in_attach_order_and_pages(owner_sdk, make_session, owner):
    stores = [StoreFactory(owner=owner, canonical=False, name=f"Store {i}") for i in range(3)]
    session = make_session(*stores)
    listed = owner_sdk.beta.sessions.resources.list(str(session.pk))
    assert [r.memory_store_id for r in listed.data] == [str(s.pk) for s in stores] and listed.next_page is None
    first = owner_sdk.beta.sessions.resources.list(str(session.pk), limit=2)
    assert len(first.data) == 2 and first.next_page is not None
    assert [r.memory_store_id for r in owner_sdk.beta.sessions.resources.list(str(session.pk), limit=2)] == [
        str(s.pk) for s in stores
    ]


def test_delete_removes_the_session_its_attachments_and_work(owner_sdk, make_session, notes_store):
    session = make_session(notes_store)
    deleted = owner_sdk.beta.sessions.delete(str(session.pk))
    assert (deleted.id, deleted.type) == (str(session.pk), "session_deleted")
    assert not Session.objects.exists() and not Attachment.objects.exists() and not Work.objects.exists()
    with pytest.raises(anthropic.NotFoundError):
        owner_sdk.beta.sessions.retrieve(str(session.pk))


def test_the_per_work_credential_retrieves_its_own_session(client_for, make_session, notes_store, claim):
    session = make_session(notes_store)
    claimed = claim()
    got = client_for(claimed.token).beta.sessions.retrieve(str(session.pk))
    assert got.id == str(session.pk) and got.status == "running"
    assert got.resources[0].mount_path == "/mnt/memory/team-notes"
