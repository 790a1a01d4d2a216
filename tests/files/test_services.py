"""Service-level branches the API cannot reach yet: back-office (user) and session actors (SPEC §5)."""

from __future__ import annotations

import uuid

import pytest

from config.errors import InvalidRequest
from stores.models import Store
from tests.files.conftest import versions_url
from versions import services
from versions.actors import Actor, actor_for_request
from versions.models import Version
from versions.validation import clean_path


def test_a_back_office_write_is_attributed_to_a_user_actor(owner_client, private_store, staff):
    services.create_memory(store=private_store, path="/by-staff.md", content="x", actor=Actor.user(staff.pk))
    version = owner_client.get(versions_url(private_store)).json()["data"][0]
    assert version["created_by"] == {"type": "user_actor", "user_id": str(staff.pk)}
    row = Version.objects.get()
    assert (row.user_id, row.api_key_id, row.session_id) == (staff.pk, None, None)


def test_a_session_redaction_records_a_session_actor(private_store, seed):
    memory = seed("/a.md", "one")
    old_head = memory.current_version_id
    session_id = uuid.uuid4()
    services.update_memory(store=private_store, memory_id=memory.pk, content="two", actor=Actor.session(session_id))
    redacted = services.redact_version(store=private_store, version_id=old_head, actor=Actor.user(uuid.uuid4()))
    head = Version.objects.get(memory_id=memory.pk, operation="modified")
    assert head.created_by == {"type": "session_actor", "session_id": str(session_id)}
    assert head.session_id == session_id
    assert redacted.redacted_by["type"] == "user_actor"


def test_a_request_without_a_credential_has_no_actor(rf):
    request = rf.post("/")
    request.auth = None
    with pytest.raises(ValueError):
        actor_for_request(request)


@pytest.mark.parametrize(
    "body",
    [
        {"name": 123},
        {"name": "x" * 256},
        {"name": "line\nbreak"},
        {"name": "ok", "description": "d" * 1025},
        {"name": "ok", "metadata": ["a"]},
        {"name": "ok", "metadata": {"k": 1}},
        {"name": "ok", "metadata": {"": "v"}},
        {"name": "ok", "metadata": {"k": "v" * 513}},
        {"name": "ok", "unknown": True},
        {},
    ],
)
def test_a_bad_store_create_body_is_rejected_and_creates_nothing(owner_client, body):
    response = owner_client.post("/api/v1/memory_stores", body)
    assert response.status_code == 400
    assert not Store.objects.exists()


def test_bad_metadata_carries_the_invalid_metadata_error_code(owner_client):
    response = owner_client.post("/api/v1/memory_stores", {"name": "ok", "metadata": {"k": 1}})
    assert response.json()["error"]["details"]["error_code"] == "invalid_metadata"


def test_the_path_validator_returns_nfc_paths_unchanged_and_refuses_decomposed_ones():
    assert clean_path("/\u00c5.md") == "/\u00c5.md"
    with pytest.raises(InvalidRequest):
        clean_path("/A\u030a.md")
