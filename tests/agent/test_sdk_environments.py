"""Environments through the official SDK and environment keys through our own routes (SPEC §5)."""

from __future__ import annotations

import hashlib
from io import StringIO

import anthropic
import pytest
from anthropic.types.beta import BetaEnvironmentArchivedError
from django.core.management import CommandError, call_command

from sessions.models import Environment, EnvironmentKey, Session, Work
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

ENVIRONMENT_KEYS = {
    "id",
    "type",
    "name",
    "description",
    "config",
    "metadata",
    "scope",
    "created_at",
    "updated_at",
    "archived_at",
}
KEY_KEYS = {"id", "type", "environment_id", "name", "prefix", "created_at", "last_used_at", "revoked_at"}


def keys_url(environment_id, *rest: str) -> str:
    return "/".join([f"/v1/environments/{environment_id}/keys", *map(str, rest)])


def test_create_retrieve_and_list_an_environment(owner_sdk, owner):
    raw = owner_sdk.beta.environments.with_raw_response.create(
        name="Build farm", config={"type": "self_hosted"}, description="Runners in rack 4", metadata={"team": "ci"}
    )
    created = raw.parse()
    assert set(raw.http_response.json()) == ENVIRONMENT_KEYS
    assert (created.type, created.config.type, created.description, created.metadata) == (
        "environment",
        "self_hosted",
        "Runners in rack 4",
        {"team": "ci"},
    )
    assert created.archived_at is None and created.scope is None
    assert owner_sdk.beta.environments.retrieve(created.id) == created
    assert [e.id for e in owner_sdk.beta.environments.list()] == [created.id]
    assert Environment.objects.get(pk=created.id).owner == owner


def test_config_defaults_to_self_hosted_and_other_types_are_400(owner_sdk):
    assert owner_sdk.beta.environments.create(name="Default").config.type == "self_hosted"
    with pytest.raises(anthropic.BadRequestError) as caught:
        owner_sdk.beta.environments.create(name="Cloud", config={"type": "cloud"})
    assert "config.type" in caught.value.body["error"]["message"]
    assert list(Environment.objects.values_list("name", flat=True)) == ["Default"]


def test_update_patches_metadata_and_clears_the_description(owner_sdk):
    env = owner_sdk.beta.environments.create(name="A", description="old", metadata={"a": "1", "b": "2"})
    updated = owner_sdk.beta.environments.update(
        env.id, name="B", description=None, metadata={"a": None, "b": "", "c": "3"}
    )
    assert (updated.name, updated.description, updated.metadata) == ("B", None, {"c": "3"})
    assert updated.updated_at > env.updated_at
    same = owner_sdk.beta.environments.update(env.id)
    assert same.updated_at == updated.updated_at


def test_changing_the_config_type_is_the_sdks_invalid_config_type_change(owner_sdk):
    env = owner_sdk.beta.environments.create(name="A")
    with pytest.raises(anthropic.BadRequestError) as caught:
        owner_sdk.beta.environments.update(env.id, config={"type": "cloud"})
    assert caught.value.error_code == "invalid_config_type_change"


def test_archive_is_one_way_and_an_archived_environment_cannot_be_updated(owner_sdk):
    env = owner_sdk.beta.environments.create(name="A")
    archived = owner_sdk.beta.environments.archive(env.id)
    assert archived.archived_at is not None
    assert owner_sdk.beta.environments.archive(env.id).archived_at == archived.archived_at
    with pytest.raises(BetaEnvironmentArchivedError):
        owner_sdk.beta.environments.update(env.id, name="B")
    assert [e.id for e in owner_sdk.beta.environments.list()] == []
    assert [e.id for e in owner_sdk.beta.environments.list(include_archived=True)] == [env.id]


def test_a_session_on_an_archived_environment_is_refused(owner_sdk, environment):
    owner_sdk.beta.environments.archive(str(environment.pk))
    with pytest.raises(BetaEnvironmentArchivedError):
        owner_sdk.beta.sessions.create(agent="agent_x", environment_id=str(environment.pk))
    assert not Session.objects.exists()


def test_delete_removes_the_environment_and_refuses_while_a_live_session_uses_it(owner_sdk, environment, make_session):
    session = make_session()
    with pytest.raises(anthropic.ConflictError) as caught:
        owner_sdk.beta.environments.delete(str(environment.pk))
    assert caught.value.body["error"]["details"]["reason"] == "environment_in_use"
    owner_sdk.beta.sessions.archive(str(session.pk))
    deleted = owner_sdk.beta.environments.delete(str(environment.pk))
    assert (deleted.id, deleted.type) == (str(environment.pk), "environment_deleted")
    assert not Environment.objects.exists() and not Session.objects.exists() and not Work.objects.exists()


def test_another_users_environment_is_404_like_a_missing_one(client_for, environment):
    from accounts import services as account_services

    stranger = client_for(account_services.issue_token(user=UserFactory(handle="someone")).secret)
    for call in (
        lambda: stranger.beta.environments.retrieve(str(environment.pk)),
        lambda: stranger.beta.environments.update(str(environment.pk), name="mine"),
        lambda: stranger.beta.environments.archive(str(environment.pk)),
        lambda: stranger.beta.environments.delete(str(environment.pk)),
    ):
        with pytest.raises(anthropic.NotFoundError) as caught:
            call()
        assert caught.value.error_code == "environment_not_found"
    assert Environment.objects.get(pk=environment.pk).name == "Build farm"
    assert list(stranger.beta.environments.list()) == []


def test_keys_are_minted_once_listed_by_prefix_and_revoked(owner_sdk, environment):
    created = owner_sdk.post(keys_url(environment.pk), cast_to=object, body={"name": "rack-4"})
    assert set(created) == KEY_KEYS | {"secret"}
    assert created["secret"].startswith("menv_") and created["prefix"] == created["secret"][:12]
    row = EnvironmentKey.objects.get(pk=created["id"])
    assert row.digest == hashlib.sha256(created["secret"].encode()).hexdigest()
    listed = owner_sdk.get(keys_url(environment.pk), cast_to=object)
    assert listed == {"data": [{k: v for k, v in created.items() if k != "secret"}], "next_page": None}
    revoked = owner_sdk.delete(keys_url(environment.pk, created["id"]), cast_to=object)
    assert revoked["revoked_at"] is not None and set(revoked) == KEY_KEYS
    again = owner_sdk.delete(keys_url(environment.pk, created["id"]), cast_to=object)
    assert again["revoked_at"] == revoked["revoked_at"]


def test_a_revoked_key_authenticates_nobody(client_for, owner_sdk, environment, env_key):
    worker = client_for(env_key.secret)
    assert worker.beta.environments.work.poll(str(environment.pk)) is None
    owner_sdk.delete(keys_url(environment.pk, env_key.key.pk), cast_to=object)
    with pytest.raises(anthropic.AuthenticationError):
        worker.beta.environments.work.poll(str(environment.pk))


def test_create_environment_key_command_prints_the_secret_once(environment):
    out = StringIO()
    call_command("create_environment_key", "--environment", str(environment.pk), "--name", "cli", stdout=out)
    secret = out.getvalue().strip()
    key = EnvironmentKey.objects.get()
    assert secret.startswith("menv_") and key.digest == hashlib.sha256(secret.encode()).hexdigest()
    assert key.name == "cli" and key.prefix == secret[:12]
    with pytest.raises(CommandError):
        call_command("create_environment_key", "--environment", "not-a-uuid")
