"""Environments and their keys, sessions and their memory-store attachments, work items, claims (SPEC §5).

Vocabulary (the SDK's, `anthropic==2.10.0`):

- An **environment** is a self-hosted place where agents run; its **keys** let that place's workers poll.
- A **session** is one agent run: an opaque agent snapshot plus up to 8 **attachments** (memory stores,
  their name/description snapshotted, an access mode and a `mount_path`). Creating one queues a **work item**.
- A worker **polls** the queue: the poll **claims** the oldest claimable item and mints a **per-work
  credential** (a `WorkClaim`, stored hashed). The worker **acknowledges** it (`starting`) and **heartbeats**
  its **lease** (`active`); a lease whose TTL passes re-queues the item, and every later claim kills the
  previous one's credential. `stop` moves it to `stopping`/`stopped`.

Every lease and claim time is database time (`statement_timestamp()`), never the app server's clock.
Attachments hold store content references, so they carry `store_id`, first in their primary key, for a
later distribution by store; the other tables are keyed by their own ids.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Case, Exists, OuterRef, Q, Value, When
from django.db.models.functions import Now
from django.utils import timezone

NAME_MAX_CHARS = 255
TITLE_MAX_CHARS = 255
KEY_NAME_MAX_CHARS = 100
INSTRUCTIONS_MAX_CHARS = 4096
MAX_ATTACHED_STORES = 8
WORKER_ID_MAX_CHARS = 200
MOUNT_ROOT = "/mnt/memory"

# Leases (SPEC §5): heartbeats ask for a TTL, clamped to 10..300 s (60 by default; acknowledging starts
# a lease of the default length). Unacknowledged claims are re-claimable after `reclaim_older_than_ms`.
LEASE_MIN_TTL_SECONDS = 10
LEASE_MAX_TTL_SECONDS = 300
LEASE_DEFAULT_TTL_SECONDS = 60
RECLAIM_DEFAULT_MS = 5000
RECLAIM_MAX_MS = 3_600_000
POLL_BLOCK_MAX_MS = 999
NO_HEARTBEAT = "NO_HEARTBEAT"

# The bearer credentials this app issues, told apart from API tokens (`mem_…`) by their prefix.
ENVIRONMENT_KEY_PREFIX = "menv_"
WORK_CREDENTIAL_PREFIX = "mwork_"


class EnvironmentScope(models.TextChoices):
    ORGANIZATION = "organization", "organization"
    ACCOUNT = "account", "account"


class Access(models.TextChoices):
    READ_WRITE = "read_write", "read_write"
    READ_ONLY = "read_only", "read_only"


class WorkState(models.TextChoices):
    QUEUED = "queued", "queued"
    STARTING = "starting", "starting"
    ACTIVE = "active", "active"
    STOPPING = "stopping", "stopping"
    STOPPED = "stopped", "stopped"


# States in which a claim holds a lease (`lease_expires_at` is set); a live lease is one of these with
# `lease_expires_at > statement_timestamp()`.
LEASED_STATES = (WorkState.STARTING, WorkState.ACTIVE, WorkState.STOPPING)


def self_hosted_config() -> dict[str, str]:
    return {"type": "self_hosted"}


class Environment(models.Model):
    """A self-hosted environment, owned and managed by its creator (SPEC §5). Archiving is one-way."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="environments")
    name = models.CharField(max_length=NAME_MAX_CHARS)
    description = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    scope = models.CharField(max_length=16, choices=EnvironmentScope.choices, null=True, blank=True)
    config = models.JSONField(default=self_hosted_config)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "-created_at", "-id"], name="environment_owner_newest")]

    def __str__(self) -> str:
        return self.name


class EnvironmentKey(models.Model):
    """A worker's standing credential for one environment: only `digest` (SHA-256) and `prefix` are stored.

    It authenticates that environment's work endpoints and nothing else. Revoked keys authenticate nobody.
    """

    credential_kind = "environment_key"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=KEY_NAME_MAX_CHARS, blank=True)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "environment key"
        indexes = [models.Index(fields=["environment", "-created_at", "-id"], name="envkey_environment_newest")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.environment_id})"


class SessionStatus(models.TextChoices):
    RESCHEDULING = "rescheduling", "rescheduling"
    RUNNING = "running", "running"
    IDLE = "idle", "idle"
    TERMINATED = "terminated", "terminated"


class SessionQuerySet(models.QuerySet):
    def with_status(self) -> SessionQuerySet:
        """Annotate `status` (SPEC §5): ``terminated`` once archived, ``running`` while a work item holds a
        live lease by database time (`Now()` is `statement_timestamp()`), ``idle`` otherwise."""
        live = Exists(Work.objects.filter(session=OuterRef("pk"), state__in=LEASED_STATES, lease_expires_at__gt=Now()))
        return self.annotate(
            status=Case(
                When(archived_at__isnull=False, then=Value(SessionStatus.TERMINATED.value)),
                When(live, then=Value(SessionStatus.RUNNING.value)),
                default=Value(SessionStatus.IDLE.value),
                output_field=models.CharField(),
            )
        )


class Session(models.Model):
    """One agent run on an environment (SPEC §5). `agent` is the opaque snapshot ``{"id", "version"}``.

    `status` is derived, never stored: ``terminated`` once archived, ``running`` while one of its work
    items holds a live lease, ``idle`` otherwise (see `SessionQuerySet.with_status`).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_sessions")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="sessions")
    agent = models.JSONField()
    title = models.CharField(max_length=TITLE_MAX_CHARS, null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    archived_at = models.DateTimeField(null=True, blank=True)

    objects = SessionQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["owner", "-created_at", "-id"], name="session_owner_newest")]

    def __str__(self) -> str:
        return self.title or str(self.pk)


class Attachment(models.Model):
    """A memory store attached to a session at creation: the `memory_store` resource (SPEC §5).

    `name` and `description` are snapshots taken at attach time; `mount_path` is ``/mnt/memory/<slug>``.
    `store_id` is a plain UUID (no foreign key): the store cannot be deleted while the session is not
    terminated, and a terminated session keeps the record of what it mounted.
    """

    # The key is (store_id, session): store content is keyed by store first, so the table can be
    # distributed by store later (a store is attached to a session at most once).
    pk = models.CompositePrimaryKey("store_id", "session")
    store_id = models.UUIDField()
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="attachments")
    position = models.PositiveSmallIntegerField()
    access = models.CharField(max_length=16, choices=Access.choices)
    instructions = models.TextField(null=True, blank=True)
    name = models.CharField(max_length=NAME_MAX_CHARS)
    description = models.TextField(blank=True, default="")
    mount_path = models.TextField()

    class Meta:
        constraints = [
            models.CheckConstraint(name="attachment_access_valid", condition=Q(access__in=Access.values)),
        ]

    def __str__(self) -> str:
        return f"{self.mount_path} ({self.access})"


class Work(models.Model):
    """A work item: the unit a worker claims to run one session (SPEC §5).

    `claim_id` names the current claim (`WorkClaim`), whose credential is the only live one. `polled_at`
    is when the current claim was made; `lease_expires_at` is set while a leased state holds the item.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="work_items")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="work_items")
    state = models.CharField(max_length=16, choices=WorkState.choices, default=WorkState.QUEUED)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    queued_at = models.DateTimeField(default=timezone.now)
    claim_id = models.UUIDField(null=True, blank=True)
    polled_at = models.DateTimeField(null=True, blank=True)
    worker_id = models.CharField(max_length=WORKER_ID_MAX_CHARS, blank=True, default="")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The expectation the last successful heartbeat was made with (None: NO_HEARTBEAT or none yet): a retry of
    # that heartbeat by the claim's own credential, whose answer was lost, is taken as the same heartbeat.
    previous_heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_ttl_seconds = models.PositiveIntegerField(default=0)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "work item"
        constraints = [
            models.CheckConstraint(name="work_state_valid", condition=Q(state__in=WorkState.values)),
            # A leased state always has a lease and a claim; a queued item holds no lease.
            models.CheckConstraint(
                name="work_lease_shape",
                condition=(
                    Q(state__in=LEASED_STATES, lease_expires_at__isnull=False, claim_id__isnull=False)
                    | Q(state=WorkState.QUEUED, lease_expires_at__isnull=True)
                    | Q(state=WorkState.STOPPED, claim_id__isnull=True)
                ),
            ),
        ]
        indexes = [
            models.Index(
                fields=["environment", "created_at", "id"],
                name="work_queue",
                condition=Q(state=WorkState.QUEUED),
            ),
            models.Index(
                fields=["environment", "lease_expires_at"],
                name="work_leases",
                condition=Q(state__in=LEASED_STATES),
            ),
            models.Index(fields=["environment", "-created_at", "-id"], name="work_environment_newest"),
        ]

    def __str__(self) -> str:
        return f"work {self.pk} ({self.state})"


class WorkClaim(models.Model):
    """One claim of a work item and its per-work credential (only `digest` and `prefix` are stored).

    The credential is live while this claim is its work item's current claim (`work.claim_id == id`) and
    the item's lease is live by database time; `ended_at` records when a reclaim, a lapsed lease, a stop
    or an archive ended it. `request.auth` is this object for requests made with the credential, so
    `request.auth.session` is the session acting (SPEC §4 nap claims, §5).
    """

    credential_kind = "work_credential"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    work = models.ForeignKey(Work, on_delete=models.CASCADE, related_name="claims")
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    worker_id = models.CharField(max_length=WORKER_ID_MAX_CHARS, blank=True, default="")
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "work claim"
        indexes = [models.Index(fields=["work", "-created_at"], name="claim_work_newest")]

    def __str__(self) -> str:
        return f"{self.prefix}… (work {self.work_id})"

    @property
    def session(self) -> Session:
        """The session this credential acts for."""
        return self.work.session

    @property
    def session_id(self) -> uuid.UUID:
        """The acting session's id (what `versions.actors.actor_for_request` records as `session_actor`)."""
        return self.work.session_id


# `workers_polling` counts workers seen this recently (the SDK's documented window); older Poller rows count
# for nothing and are pruned by the next poll of their environment (`record_poller`).
WORKERS_POLLING_WINDOW = timedelta(seconds=30)


class Poller(models.Model):
    """The last time a worker (`Anthropic-Worker-ID`) polled an environment, for `workers_polling`. Only rows
    of the last `WORKERS_POLLING_WINDOW` are kept: one row per distinct header value, so a key holder sending
    a new id on every poll grew the table without bound (a breaker)."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="pollers")
    worker_id = models.CharField(max_length=WORKER_ID_MAX_CHARS)
    last_polled_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint("environment", "worker_id", name="poller_environment_worker_unique")]

    def __str__(self) -> str:
        return f"{self.worker_id} on {self.environment_id}"
