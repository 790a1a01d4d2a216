"""Environments and environment keys (SPEC §5). Access (the owner's API token) is checked by the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import User
from sessions import validation
from sessions.errors import (
    EnvironmentArchived,
    EnvironmentInUse,
    EnvironmentKeyNotFound,
    EnvironmentNotFound,
    InvalidConfigTypeChange,
)
from sessions.models import ENVIRONMENT_KEY_PREFIX, Environment, EnvironmentKey, Session, Work
from sessions.services.common import UNSET, lock_row, mint_secret
from stores import validation as store_validation


def _lock(environment: Environment) -> Environment:
    return lock_row(environment, EnvironmentNotFound)


def create_environment(
    *,
    owner: User,
    name: object,
    config: object = None,
    description: object = None,
    metadata: object = None,
    scope: object = None,
) -> Environment:
    """Create a self-hosted environment owned by `owner` (SPEC §5 `environments.create`).

    name: 1–255 characters; config: ``{"type": "self_hosted"}`` or null; description: null or ≤1,024
    characters; metadata: ≤16 string pairs; scope: `organization` | `account` | null (kept, never widens
    access). Raises InvalidRequest (400) naming the field.
    """
    return Environment.objects.create(
        owner=owner,
        name=store_validation.clean_name(name),
        config=validation.clean_config(config),
        description=validation.clean_nullable_description(description),
        metadata=store_validation.clean_metadata(metadata if metadata is not None else {}),
        scope=validation.clean_scope(scope),
    )


@transaction.atomic
def update_environment(
    *,
    environment: Environment,
    name: object = UNSET,
    config: object = UNSET,
    description: object = UNSET,
    metadata_patch: object = UNSET,
    scope: object = UNSET,
) -> Environment:
    """Update an environment (SDK `environments.update`): each argument left UNSET is unchanged.

    name: null = unchanged; description: null clears it to null, ``""`` stores ``""``; metadata_patch:
    ``{key: str | None}`` where null or ``""`` deletes the key; config: must stay `self_hosted`
    (InvalidConfigTypeChange 400); scope: as on create. An archived environment is EnvironmentArchived
    (400, the SDK's typed error). `updated_at` moves only when something changes. Locks the row.
    """
    locked = _lock(environment)
    if locked.archived_at is not None:
        raise EnvironmentArchived()
    changed: list[str] = []

    def put(field: str, value: Any) -> None:
        if getattr(locked, field) != value:
            setattr(locked, field, value)
            changed.append(field)

    if name is not UNSET and name is not None:
        put("name", store_validation.clean_name(name))
    if config is not UNSET and config is not None:
        if not isinstance(config, dict) or config.get("type") != "self_hosted":
            raise InvalidConfigTypeChange()
        put("config", validation.clean_config(config))
    if description is not UNSET:
        put("description", validation.clean_nullable_description(description))
    if metadata_patch is not UNSET and metadata_patch is not None:
        put("metadata", store_validation.patch_metadata(locked.metadata, metadata_patch, empty_deletes=True))
    if scope is not UNSET:
        put("scope", validation.clean_scope(scope))
    if changed:
        locked.updated_at = timezone.now()
        locked.save(update_fields=[*changed, "updated_at"])
    return locked


@transaction.atomic
def archive_environment(*, environment: Environment) -> tuple[Environment, bool]:
    """Archive `environment` (one-way): no new sessions may use it; its queued work can still be polled.

    Returns ``(environment, changed)``; archiving again returns it unchanged. Locks the row.
    """
    locked = _lock(environment)
    if locked.archived_at is not None:
        return locked, False
    locked.archived_at = locked.updated_at = timezone.now()
    locked.save(update_fields=["archived_at", "updated_at"])
    return locked, True


@transaction.atomic
def delete_environment(*, environment: Environment) -> None:
    """Delete `environment` with its keys, its (archived) sessions and their work items.

    Raises EnvironmentInUse (409 `environment_in_use`) while a session that is not archived uses it, so a
    running agent never loses its environment. Locks in the documented order before deleting anything:
    the environment row (a session created concurrently waits for it), then its sessions in pk order,
    then their work items in pk order — so it never holds work rows a session delete or archive (session,
    then work) is waiting for while it waits for that session (a deadlock, a 503, before).
    """
    locked = _lock(environment)
    sessions = list(Session.objects.select_for_update(of=("self",)).filter(environment=locked).order_by("pk"))
    if any(session.archived_at is None for session in sessions):
        raise EnvironmentInUse()
    list(
        Work.objects.select_for_update(of=("self",))
        .filter(Q(environment=locked) | Q(session__in=[session.pk for session in sessions]))
        .order_by("pk")
    )
    locked.delete()


@dataclass(frozen=True)
class IssuedKey:
    """A new environment key; `secret` is shown once and never stored."""

    key: EnvironmentKey
    secret: str


@transaction.atomic
def issue_environment_key(*, environment: Environment, name: object = "", created_by: User | None = None) -> IssuedKey:
    """Mint a key for `environment` (``menv_…``; only its SHA-256 and a prefix are stored).

    name: ≤100 characters, no control characters (`validation.clean_key_name`). Archived environments still
    get keys, so their queued work can be drained. Raises EnvironmentNotFound (404) when the environment was
    deleted since it was read; holds it (``FOR KEY SHARE``) until the key is committed.
    """
    clean_name = validation.clean_key_name(name if name is not None else "")
    locked = lock_row(environment, EnvironmentNotFound, strength="key share")
    minted = mint_secret(ENVIRONMENT_KEY_PREFIX)
    key = EnvironmentKey.objects.create(
        environment=locked, name=clean_name, prefix=minted.prefix, digest=minted.digest, created_by=created_by
    )
    return IssuedKey(key=key, secret=minted.secret)


@transaction.atomic
def revoke_environment_key(*, key: EnvironmentKey) -> EnvironmentKey:
    """Revoke `key` (idempotent: a revoked key keeps its first `revoked_at`). Work credentials it claimed
    stay valid until their own claims end.

    Locks the environment row, then the key row: EnvironmentNotFound (404) when the environment was deleted
    since it was read, EnvironmentKeyNotFound (404) when the key was. A poll holding the key (``FOR
    SHARE``, `work.poll_work`) finishes its claim first; every claim after this commits refuses the key.
    """
    lock_row(Environment(pk=key.environment_id), EnvironmentNotFound)
    locked = lock_row(key, EnvironmentKeyNotFound)
    if locked.revoked_at is None:
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
    return locked
