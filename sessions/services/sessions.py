"""Sessions and their memory-store attachments (SPEC §5). Access is checked by the caller through
`sessions.selectors` (the owner's API token; `stores_to_attach` for every store)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from sessions.errors import EnvironmentArchived, EnvironmentNotFound, SessionArchived, SessionNotFound
from sessions.models import Attachment, Environment, Session, Work
from sessions.selectors import StoreToAttach
from sessions.services.common import UNSET, db_now, lock_row
from sessions.services.work import stop_for_good
from sessions.validation import clean_environment_id, clean_title, mount_paths
from stores import services as stores_services
from stores import validation as store_validation
from stores.errors import StoreArchived, StoreNotFound
from stores.selectors import judge_again


@transaction.atomic
def create_session(
    *,
    owner: User,
    environment_id: object,
    agent: dict[str, Any],
    attach: list[StoreToAttach],
    metadata: dict[str, str],
    title: str | None,
) -> Session:
    """Create a session, its attachments and its queued work item, in one transaction (SPEC §5).

    agent: the cleaned snapshot (`validation.clean_agent`); attach: access-checked stores in request
    order (`selectors.stores_to_attach`); metadata/title: cleaned. Names and descriptions are
    snapshotted now; mount paths are ``/mnt/memory/<slug>`` with ``-2``, ``-3``… for repeats.

    environment_id: the body's raw value — a UUID string, else InvalidRequest (400 naming the field).
    Raises EnvironmentNotFound (404: missing or not `owner`'s), EnvironmentArchived (400), StoreNotFound
    (404: deleted since the access check, or unreadable since: its rights changed and the owner is judged
    again, `stores.selectors.judge_again`), StoreArchived (409). Locks the environment row, then every
    store row in pk order — so a store cannot be deleted, archived or closed to the owner between the check
    and the attach.
    """
    environment = (
        Environment.objects.select_for_update(of=("self",))
        .filter(pk=clean_environment_id(environment_id), owner=owner)
        .first()
    )
    if environment is None:
        raise EnvironmentNotFound()
    if environment.archived_at is not None:
        raise EnvironmentArchived()
    ids = [item.store.pk for item in attach]
    locked = stores_services.lock_stores_in_order(ids)
    for item in attach:
        pk = item.store.pk
        if pk not in locked:
            raise StoreNotFound()
        judge_again(locked[pk], item.store)  # the owner's right again, if the store's rights changed meanwhile
        if locked[pk].archived_at is not None:
            raise StoreArchived("An archived store cannot be attached to a new session.")
    stores = [locked[pk] for pk in ids]
    session = Session.objects.create(
        owner=owner, environment=environment, agent=agent, title=clean_title(title), metadata=metadata
    )
    Attachment.objects.bulk_create(
        Attachment(
            session=session,
            store_id=store.pk,
            position=position,
            access=item.access,
            instructions=item.instructions,
            name=store.name,
            description=store.description,
            mount_path=path,
        )
        for position, (item, store, path) in enumerate(
            zip(attach, stores, mount_paths([s.name for s in stores]), strict=True)
        )
    )
    Work.objects.create(environment=environment, session=session, created_at=session.created_at)
    return session


def _lock(session: Session) -> Session:
    return lock_row(session, SessionNotFound)


@transaction.atomic
def update_session(*, session: Session, title: object = UNSET, metadata_patch: object = UNSET) -> Session:
    """Update `title` (null or absent = unchanged) and `metadata` (a patch: null deletes a key).

    Raises SessionArchived (409) for a terminated session. `updated_at` moves only when something changes.
    """
    locked = _lock(session)
    if locked.archived_at is not None:
        raise SessionArchived()
    changed: list[str] = []
    if title is not UNSET and title is not None:
        new_title = clean_title(title)
        if new_title != locked.title:
            locked.title = new_title
            changed.append("title")
    if metadata_patch is not UNSET and metadata_patch is not None:
        merged = store_validation.patch_metadata(locked.metadata, metadata_patch)
        if merged != locked.metadata:
            locked.metadata = merged
            changed.append("metadata")
    if changed:
        locked.updated_at = timezone.now()
        locked.save(update_fields=[*changed, "updated_at"])
    return locked


@transaction.atomic
def archive_session(*, session: Session) -> tuple[Session, bool]:
    """Archive `session` for good (status `terminated`): its work items stop, their credentials die, and
    its stores may be deleted again. Returns ``(session, changed)``; idempotent.

    Locks the session row, then its work rows in pk order (a fenced write in flight finishes first or
    fails with lease_expired after).
    """
    locked = _lock(session)
    if locked.archived_at is not None:
        return locked, False
    works = list(Work.objects.select_for_update(of=("self",)).filter(session=locked).order_by("pk"))
    now = db_now()  # after the work locks: a fenced write holding one commits before this time (a tester)
    for work in works:
        stop_for_good(work, now)
    locked.archived_at = locked.updated_at = now
    locked.save(update_fields=["archived_at", "updated_at"])
    return locked, True


@transaction.atomic
def delete_session(*, session: Session) -> None:
    """Delete `session` with its attachments, work items and claims (their credentials stop working).

    Versions it wrote keep their `session_actor`. Locks the session row, then its work rows.
    """
    locked = _lock(session)
    list(Work.objects.select_for_update(of=("self",)).filter(session=locked).order_by("pk"))
    locked.delete()
