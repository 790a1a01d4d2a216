"""Access-checked reads of environments, sessions, work items and attached stores (SPEC §5).

Three credentials reach this app, each with its own reach (docs/agent-access.md):

- an **API token** (`accounts.ApiToken`): its user's environments, keys, sessions and work items;
- an **environment key** (`EnvironmentKey`): its own environment's work endpoints only (elsewhere 401);
- a **per-work credential** (`WorkClaim`): its own session, its own work item's heartbeat and stop, and
  the session's attached stores with the attachment's access intersected with the owner's current access.

Something outside the caller's reach is the same 404 as something missing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import BooleanField, Count, ExpressionWrapper, F, Min, Q, QuerySet
from django.db.models.functions import Now

from accounts.models import User
from config.compiled import CompiledQuery
from config.fields import canonical_uuid
from sessions.errors import (
    CredentialNotAccepted,
    EnvironmentKeyNotFound,
    EnvironmentNotFound,
    LeaseExpired,
    SessionNotFound,
    WorkNotFound,
)
from sessions.models import (
    LEASED_STATES,
    RECLAIM_DEFAULT_MS,
    WORKERS_POLLING_WINDOW,
    Access,
    Attachment,
    Environment,
    EnvironmentKey,
    Poller,
    Session,
    Work,
    WorkClaim,
    WorkState,
)
from stores.errors import StoreNotFound, StoreOwnerRequired, StoreWriteForbidden
from stores.models import Store
from stores.selectors import Need, get_store_for, judged, parse_store_id
from versions.selectors import parse_id


def _same_id(value: object, pk: uuid.UUID) -> bool:
    """Whether the URL's id `value` names `pk`: only in its canonical spelling (`config.fields.canonical_uuid`),
    as every id in a URL (an uppercase or braced environment id polled the queue)."""
    return canonical_uuid(value) == pk


def _after(rows: QuerySet, after: tuple[datetime, uuid.UUID] | None, *, descending: bool = True) -> QuerySet:
    """Rows strictly after the keyset position ``(created_at, id)`` in the list's order."""
    if after is None:
        return rows
    created_at, pk = after
    if descending:
        return rows.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    return rows.filter(Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=pk))


# --- credentials ----------------------------------------------------------------------------------


def _claims_by_digest(digest: str) -> QuerySet:
    live = Q(work__claim_id=F("id"), work__state__in=LEASED_STATES, work__lease_expires_at__gt=Now())
    return (
        WorkClaim.objects.select_related("work__session__owner", "work__environment")
        .annotate(live=ExpressionWrapper(live, output_field=BooleanField()))
        .filter(digest=digest)[:1]
    )


# The lookups every request made with a per-work credential runs (a worker's sync and flush: one file at a
# time), compiled once per process and run as prepared statements (config/compiled.py): building them with
# the ORM was most of such a write's CPU (bench/inprocess.py work_file_update; bench/RESULTS.md).
_CLAIM_BY_DIGEST = CompiledQuery(_claims_by_digest, digest="compiled-query-sentinel:work-credential-digest")
_ATTACHMENT = CompiledQuery(
    lambda session_id, store_id: Attachment.objects.filter(session_id=session_id, store_id=store_id)[:1],
    session_id=uuid.UUID("00000000-0000-4000-8000-00000000a77a"),
    store_id=uuid.UUID("00000000-0000-4000-8000-00000000a77b"),
)


def claim_by_digest(digest: str) -> WorkClaim | None:
    """The claim whose credential hashes to `digest`, with its work item, session, owner and environment,
    annotated ``live`` (its item's current claim, in a leased state, lease not passed by database time).
    One prepared statement."""
    return _CLAIM_BY_DIGEST.first(digest=digest)


_ENVIRONMENT_KEY_BY_DIGEST = CompiledQuery(
    lambda digest: EnvironmentKey.objects.select_related("environment__owner").filter(digest=digest)[:1],
    digest="compiled-query-sentinel:environment-key-digest",
)


def environment_key_by_digest(digest: str) -> EnvironmentKey | None:
    """The environment key hashing to `digest`, with its environment and the environment's owner. One
    prepared statement (an idle worker polls about once a second)."""
    return _ENVIRONMENT_KEY_BY_DIGEST.first(digest=digest)


# --- environments ---------------------------------------------------------------------------------


def environments_for(
    user: User, *, include_archived: bool = False, after: tuple[datetime, uuid.UUID] | None = None, limit: int = 20
) -> list[Environment]:
    """`user`'s environments, newest first; archived ones only with `include_archived`. ≤ limit + 1 rows."""
    rows = Environment.objects.filter(owner=user)
    if not include_archived:
        rows = rows.filter(archived_at__isnull=True)
    return list(_after(rows, after).order_by("-created_at", "-id")[: limit + 1])


def get_environment_for(user: User, environment_id: object) -> Environment:
    """`user`'s environment `environment_id`; EnvironmentNotFound (404) when missing or someone else's."""
    pk = parse_id(environment_id, EnvironmentNotFound)
    found = Environment.objects.filter(pk=pk, owner=user).first()
    if found is None:
        raise EnvironmentNotFound()
    return found


def environment_for_request(request: Any, environment_id: object) -> Environment:
    """The environment a work endpoint addresses, checked against the request's credential.

    API token: the caller's own environment (else 404). Environment key: its own environment only; another
    environment's id (existing or not) is 401 CredentialNotAccepted. Per-work credential: its work item's
    environment (else 404).
    """
    auth = request.auth
    if isinstance(auth, EnvironmentKey):
        if not _same_id(environment_id, auth.environment_id):
            raise CredentialNotAccepted("This environment key belongs to another environment.")
        return auth.environment
    if isinstance(auth, WorkClaim):
        if not _same_id(environment_id, auth.work.environment_id):
            raise WorkNotFound()
        return auth.work.environment
    return get_environment_for(request.user, environment_id)


def environment_keys(
    environment: Environment, *, after: tuple[datetime, uuid.UUID] | None = None, limit: int = 20
) -> list[EnvironmentKey]:
    """The environment's keys (revoked ones too), newest first. ≤ limit + 1 rows."""
    rows = EnvironmentKey.objects.filter(environment=environment)
    return list(_after(rows, after).order_by("-created_at", "-id")[: limit + 1])


def get_environment_key(environment: Environment, key_id: object) -> EnvironmentKey:
    pk = parse_id(key_id, EnvironmentKeyNotFound)
    found = EnvironmentKey.objects.filter(environment=environment, pk=pk).first()
    if found is None:
        raise EnvironmentKeyNotFound()
    return found


# --- sessions -------------------------------------------------------------------------------------


def _sessions() -> QuerySet[Session]:
    return Session.objects.with_status().prefetch_related("attachments")


@dataclass(frozen=True)
class SessionFilters:
    """The `GET /sessions` filters (all optional; combined with AND)."""

    include_archived: bool = False
    statuses: tuple[str, ...] = ()
    agent_id: str | None = None
    agent_version: int | None = None
    memory_store_id: str | None = None
    deployment_id: str | None = None
    created_gt: datetime | None = None
    created_gte: datetime | None = None
    created_lt: datetime | None = None
    created_lte: datetime | None = None


def sessions_for(
    user: User,
    filters: SessionFilters,
    *,
    ascending: bool = False,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 20,
) -> list[Session]:
    """`user`'s sessions with `status`, ordered by (`created_at`, `id`), newest first unless `ascending`.

    Archived sessions are left out unless `include_archived` (or `terminated` is among `statuses`).
    An id that cannot match (a `memory_store_id` that is not a UUID, any `deployment_id`: there are no
    deployments here) gives an empty list, never a 400. Two queries (sessions, attachments).
    """
    if filters.deployment_id is not None:
        return []
    rows = _sessions().filter(owner=user)
    if not filters.include_archived and "terminated" not in filters.statuses:
        rows = rows.filter(archived_at__isnull=True)
    if filters.statuses:
        rows = rows.filter(status__in=filters.statuses)
    if filters.agent_id is not None:
        rows = rows.filter(agent__id=filters.agent_id)
        if filters.agent_version == 0:  # named by id alone: stored without a version, shown as 0 (a breaker)
            rows = rows.filter(agent__version=None)
        elif filters.agent_version is not None:
            rows = rows.filter(agent__version=filters.agent_version)
    if filters.memory_store_id is not None:
        try:
            store_id = uuid.UUID(filters.memory_store_id)
        except ValueError:
            return []
        rows = rows.filter(attachments__store_id=store_id)
    for lookup, value in (
        ("created_at__gt", filters.created_gt),
        ("created_at__gte", filters.created_gte),
        ("created_at__lt", filters.created_lt),
        ("created_at__lte", filters.created_lte),
    ):
        if value is not None:
            rows = rows.filter(**{lookup: value})
    order = ("created_at", "id") if ascending else ("-created_at", "-id")
    return list(_after(rows, after, descending=not ascending).order_by(*order)[: limit + 1])


def get_session_for(user: User, session_id: object) -> Session:
    """`user`'s session `session_id` with `status` and attachments; SessionNotFound (404) otherwise."""
    pk = parse_id(session_id, SessionNotFound)
    found = _sessions().filter(pk=pk, owner=user).first()
    if found is None:
        raise SessionNotFound()
    return found


def session_for_request(request: Any, session_id: object) -> Session:
    """GET /sessions/{id}: the owner's session, or the per-work credential's own session (another one is
    404); a credential whose claim has ended is 409 lease_expired. A session deleted after the credential
    authenticated is the SessionNotFound (404) of a missing one."""
    auth = request.auth
    if isinstance(auth, WorkClaim):
        if not auth.live:
            raise LeaseExpired.of(auth.pk, auth.work)
        pk = parse_id(session_id, SessionNotFound)
        found = _sessions().filter(pk=pk).first() if pk == auth.work.session_id else None
        if found is None:
            raise SessionNotFound()
        return found
    return get_session_for(request.user, session_id)


def attachments_of(session: Session) -> list[Attachment]:
    """The session's attachments in request order (uses the prefetch when there is one)."""
    return sorted(session.attachments.all(), key=lambda a: a.position)


@dataclass(frozen=True)
class StoreToAttach:
    """One requested attachment with its store, already access-checked for the session's owner."""

    store: Store
    access: str
    instructions: str | None


def stores_to_attach(user: User, resources: list[dict[str, Any]]) -> list[StoreToAttach]:
    """Check `user`'s access to every requested store (SPEC §5): read access, write access for
    `read_write`. Raises StoreNotFound (404, the body of a missing store) or StoreWriteForbidden (403
    naming the resource). Archived state is checked by `create_session` under the store locks."""
    found: list[StoreToAttach] = []
    for index, item in enumerate(resources):
        store = get_store_for(user, item["store_id"], need="read")
        if item["access"] == Access.READ_WRITE and not store.can_write:
            raise StoreWriteForbidden(
                f'resources[{index}]: you can read this store but not write to it; attach it with access "read_only".'
            )
        if item["access"] == Access.READ_WRITE:
            judged(store, user, "write")  # judged again for write when its rights change before the attach
        found.append(StoreToAttach(store=store, access=item["access"], instructions=item["instructions"]))
    return found


def store_is_attached(store_id: uuid.UUID) -> bool:
    """True while a session that is not terminated (archived) has the store attached and the session's
    owner can still read the store (SPEC §3 delete; docs/agent-access.md "The delete guard").

    An attachment whose owner lost read access is dead — its credential already answers 404 for the store —
    so it cannot veto the owner's delete: otherwise anyone who could read a store once (a reader of a store
    made private since, a project member later removed) could keep it from ever being deleted. A stranger's
    live session on a *public* store still guards it: the owner makes the store private first. One query for
    the owners, one per distinct owner (a store is attached to few live sessions).
    """
    owner_ids = (
        Attachment.objects.filter(store_id=store_id, session__archived_at__isnull=True)
        .values_list("session__owner_id", flat=True)
        .distinct()
    )
    owners = User.objects.filter(pk__in=list(owner_ids), is_active=True)
    return any(Store.objects.readable_by(owner).filter(pk=store_id).exists() for owner in owners)


# --- stores through a per-work credential ---------------------------------------------------------


def attached_store_for(claim: WorkClaim, store_id: object, *, need: Need = "read") -> Store:
    """The store `store_id` as the per-work credential `claim` may use it (SPEC §5).

    Raises LeaseExpired (409) when the claim has ended; StoreNotFound (404) when the store is not attached
    to the claim's session or its owner can no longer read it; StoreWriteForbidden (403) for a write to a
    `read_only` attachment or a store the owner can no longer write; StoreOwnerRequired (403) for store
    update, archive and delete, which a per-work credential never may. Two queries; checked every request.
    """
    if not claim.live:
        raise LeaseExpired.of(claim.pk, claim.work)
    pk = parse_store_id(store_id)
    attachment = _ATTACHMENT.first(session_id=claim.work.session_id, store_id=pk)
    if attachment is None:
        raise StoreNotFound()
    store = get_store_for(claim.work.session.owner, pk, need="read")
    if need == "owner":
        raise StoreOwnerRequired("A per-work credential cannot update, archive or delete a store.")
    if need == "write" and attachment.access != Access.READ_WRITE:
        raise StoreWriteForbidden("This store is attached to the session read-only.")
    if need == "write" and not store.can_write:
        raise StoreWriteForbidden("The session's owner can no longer write to this store.")
    return judged(store, claim.work.session.owner, need)  # a write is judged again if the rights change


def store_for_request(request: Any, store_id: object, *, need: Need = "read") -> Store:
    """`stores.selectors.get_store_for` for the request's credential: a per-work credential reaches its
    session's attached stores only (`attached_store_for`); an API token (or anonymous) the usual policy."""
    if isinstance(request.auth, WorkClaim):
        return attached_store_for(request.auth, store_id, need=need)
    return get_store_for(request.user, store_id, need=need)


# --- work -----------------------------------------------------------------------------------------


def work_items(
    environment: Environment, *, after: tuple[datetime, uuid.UUID] | None = None, limit: int = 20
) -> list[Work]:
    """The environment's work items, newest first. ≤ limit + 1 rows."""
    rows = Work.objects.filter(environment=environment)
    return list(_after(rows, after).order_by("-created_at", "-id")[: limit + 1])


def work_for_request(request: Any, environment: Environment, work_id: object) -> Work:
    """The work item `work_id` of `environment`; a per-work credential reaches its own item only (404)."""
    pk = parse_id(work_id, WorkNotFound)
    if isinstance(request.auth, WorkClaim) and request.auth.work_id != pk:
        raise WorkNotFound()
    found = Work.objects.filter(environment=environment, pk=pk).first()
    if found is None:
        raise WorkNotFound()
    return found


def queue_stats(environment: Environment) -> dict[str, Any]:
    """`work_queue_stats` (SDK): `depth` — queued items a poll would claim now (never polled, or polled
    longer than the default reclaim window ago); `pending` — polled but not acknowledged within it;
    `oldest_queued_at` — the oldest of both; `workers_polling` — distinct `Anthropic-Worker-ID`s seen in
    the last 30 s. Two queries; times by database clock."""
    fresh = Q(polled_at__gt=Now() - timedelta(milliseconds=RECLAIM_DEFAULT_MS))
    counts = Work.objects.filter(environment=environment, state=WorkState.QUEUED).aggregate(
        pending=Count("id", filter=fresh),
        total=Count("id"),
        oldest=Min("queued_at"),
    )
    polling = Poller.objects.filter(environment=environment, last_polled_at__gt=Now() - WORKERS_POLLING_WINDOW).count()
    return {
        "depth": counts["total"] - counts["pending"],
        "pending": counts["pending"],
        "oldest_queued_at": counts["oldest"],
        "workers_polling": polling,
    }
