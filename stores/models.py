"""The Store — one row serving both surfaces — its reader grants, and the access policy as QuerySet filters.

SPEC §3. A store belongs to exactly one subject: a user (`scope="user"`), a project or a forum section
(`scope="board"`). Who may read, write or own it is computed from *current* memberships, grants and
visibility on every request (nothing cached): `StoreQuerySet.readable_by` / `.with_permissions`.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Length
from django.utils import timezone

from accounts.models import Posting, ProjectMembership, Role, SectionMembership, Visibility

NAME_MAX_CHARS = 255
DESCRIPTION_MAX_CHARS = 1024
METADATA_MAX_PAIRS = 16
METADATA_KEY_MAX_CHARS = 64
METADATA_VALUE_MAX_CHARS = 512

# Universal search (SPEC §8): the text-search configuration and the weighted document of a store. The
# GIN index `store_search_gin` is built on exactly this expression, so `search_stores` can use it.
SEARCH_CONFIG = "english"
SEARCH_VECTOR = SearchVector("name", weight="A", config=SEARCH_CONFIG) + SearchVector(
    "description", weight="B", config=SEARCH_CONFIG
)


# `name__length` in the check constraints below needs Length registered as a transform.
models.CharField.register_lookup(Length, "length")
models.TextField.register_lookup(Length, "length")


class Scope(models.TextChoices):
    USER = "user", "user"
    PROJECT = "project", "project"
    BOARD = "board", "board"


def _is_user(user) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and user.is_active)


def present_q() -> Q:
    """Stores that exist for every read path: not being imported (SPEC §8b), not deleted (rows not yet
    purged: `stores.services.delete_store`)."""
    return Q(importing=False, deleted_at__isnull=True)


def public_q() -> Q:
    """Stores anyone (also anonymous callers) may read: public user stores, stores of public projects/sections."""
    return present_q() & _public_right_q()


def _public_right_q() -> Q:
    """`public_q` without the import gate (`read_right_q`'s public branch: a store being imported is public
    once it commits — the author check of an open public board's import needs that; a breaker)."""
    return (
        Q(scope=Scope.USER, visibility=Visibility.PUBLIC)
        | Q(scope=Scope.PROJECT, project__visibility=Visibility.PUBLIC)
        | Q(scope=Scope.BOARD, section__visibility=Visibility.PUBLIC)
    )


def read_q(user) -> Q:
    """SPEC §3 read column for `user` (a User or AnonymousUser) as a Q over Store."""
    # A store being imported is nobody's until its import commits (memories.exchange); a deleted one nobody's.
    return present_q() & read_right_q(user)


def read_right_q(user) -> Q:
    """The read column without the import gate: who will read the store once its import commits (the
    import's author check, `memories.exchange.services`). Everything else uses `read_q`."""
    if not _is_user(user):
        return _public_right_q()
    granted = Exists(ReaderGrant.objects.filter(store=OuterRef("pk"), user=user, active=True))
    project_member = Exists(ProjectMembership.objects.filter(project=OuterRef("project_id"), user=user, active=True))
    section_member = Exists(SectionMembership.objects.filter(section=OuterRef("section_id"), user=user, active=True))
    return (
        _public_right_q()
        | Q(scope=Scope.USER, owner=user)
        | (Q(scope=Scope.USER) & granted)
        | (Q(scope=Scope.PROJECT) & project_member)
        | (Q(scope=Scope.BOARD) & section_member)
    )


def write_q(user) -> Q:
    """SPEC §3 write column (before the read requirement): owner; project members; section posters."""
    if not _is_user(user):
        return Q(pk__in=[])
    project_member = Exists(ProjectMembership.objects.filter(project=OuterRef("project_id"), user=user, active=True))
    section_poster = Exists(
        SectionMembership.objects.filter(section=OuterRef("section_id"), user=user, active=True).filter(
            Q(can_post=True) | Q(role=Role.OWNER)
        )
    )
    return (
        Q(scope=Scope.USER, owner=user)
        | (Q(scope=Scope.PROJECT) & project_member)
        | (Q(scope=Scope.BOARD) & (section_poster | Q(section__posting=Posting.OPEN)))
    )


def owner_q(user) -> Q:
    """SPEC §3 owner column: the user of a user store; active owners of the project or section."""
    if not _is_user(user):
        return Q(pk__in=[])
    project_owner = Exists(
        ProjectMembership.objects.filter(project=OuterRef("project_id"), user=user, active=True, role=Role.OWNER)
    )
    section_owner = Exists(
        SectionMembership.objects.filter(section=OuterRef("section_id"), user=user, active=True, role=Role.OWNER)
    )
    return (
        Q(scope=Scope.USER, owner=user)
        | (Q(scope=Scope.PROJECT) & project_owner)
        | (Q(scope=Scope.BOARD) & section_owner)
    )


class StoreQuerySet(models.QuerySet):
    """Access-policy building blocks; each is one SQL filter so lists stay one query."""

    def readable_by(self, user) -> StoreQuerySet:
        return self.filter(read_q(user))

    def writable_by(self, user) -> StoreQuerySet:
        return self.filter(read_q(user)).filter(write_q(user))

    def owned_by(self, user) -> StoreQuerySet:
        return self.filter(read_q(user)).filter(owner_q(user))

    def with_permissions(self, user) -> StoreQuerySet:
        """Readable stores annotated with booleans `can_write` and `is_owner` for `user`."""
        return self.readable_by(user).annotate(
            can_write=models.ExpressionWrapper(write_q(user), output_field=models.BooleanField()),
            is_owner=models.ExpressionWrapper(owner_q(user), output_field=models.BooleanField()),
        )


class Store(models.Model):
    """A unit of ownership and access holding a Memories log and file memories (SPEC §3).

    Counters are maintained by services under the store row lock: `entry_count` (next seq),
    `generation` (bumped by forget), `summary_count` (live summaries), `memory_count` (current files).
    `rights_version` is bumped, under the store row lock, whenever who may read or write a user store may
    have narrowed (made private, a reader grant revoked); project and board stores follow their parent's
    `rights_version`. A write judged against an older version is judged again before it lands
    (`stores.selectors.judge_again`, docs/access.md "Writes racing a removal").
    `visibility` is set on user stores only; project and board stores inherit their parent's.
    `importing` is true while an import fills the store (SPEC §8b): such a store is readable by nobody.
    `deleted_at` is set when the store is deleted (`stores.services.delete_store`): from then on no read or
    write path sees it, and its rows are purged in batches (`purge_deleted_stores`) until the row itself
    goes (docs/decisions.md "Deleting a store of any size").
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    scope = models.CharField(max_length=8, choices=Scope.choices)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="owned_stores"
    )
    project = models.ForeignKey(
        "accounts.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="stores"
    )
    section = models.ForeignKey(
        "accounts.Section", null=True, blank=True, on_delete=models.PROTECT, related_name="stores"
    )
    canonical = models.BooleanField(default=False)
    name = models.CharField(max_length=NAME_MAX_CHARS)
    description = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    visibility = models.CharField(max_length=8, choices=Visibility.choices, null=True, blank=True)
    entry_count = models.BigIntegerField(default=0)
    generation = models.BigIntegerField(default=1)
    summary_count = models.BigIntegerField(default=0)
    memory_count = models.IntegerField(default=0)
    rights_version = models.BigIntegerField(default=0, db_default=0, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    archived_at = models.DateTimeField(null=True, blank=True)
    importing = models.BooleanField(default=False)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Where the purge of a deleted store goes on: {"table": i, "after": last id deleted} (stores.services)
    purge_cursor = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = StoreQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="store_scope_subject",
                condition=(
                    # a deleted store belongs to no subject any more (`stores.services.mark_deleted`)
                    Q(deleted_at__isnull=False, owner__isnull=True, project__isnull=True, section__isnull=True)
                    | Q(
                        scope=Scope.USER,
                        owner__isnull=False,
                        project__isnull=True,
                        section__isnull=True,
                        visibility__isnull=False,
                    )
                    | Q(
                        scope=Scope.PROJECT,
                        owner__isnull=True,
                        project__isnull=False,
                        section__isnull=True,
                        visibility__isnull=True,
                    )
                    | Q(
                        scope=Scope.BOARD,
                        owner__isnull=True,
                        project__isnull=True,
                        section__isnull=False,
                        visibility__isnull=True,
                    )
                ),
            ),
            models.CheckConstraint(
                name="store_name_length",
                condition=Q(name__length__gte=1, name__length__lte=NAME_MAX_CHARS),
            ),
            models.CheckConstraint(
                name="store_description_length", condition=Q(description__length__lte=DESCRIPTION_MAX_CHARS)
            ),
            models.CheckConstraint(
                name="store_counters_nonnegative",
                condition=Q(entry_count__gte=0, summary_count__gte=0, memory_count__gte=0, generation__gte=1),
            ),
        ]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="store_newest_first"),
            models.Index(fields=["scope", "-created_at"], name="store_scope_newest"),
            GinIndex(SEARCH_VECTOR, name="store_search_gin"),
            # The purge queue: the few deleted stores whose rows are not purged yet, oldest first.
            models.Index(fields=["deleted_at"], name="store_purge_queue", condition=Q(deleted_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope})"

    @property
    def subject_id(self):
        """The id of the store's subject: the owner's (user scope), the project's or the section's (a UUID)."""
        return {Scope.USER: self.owner_id, Scope.PROJECT: self.project_id, Scope.BOARD: self.section_id}[self.scope]

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

    @property
    def effective_visibility(self) -> str:
        """`visibility` for user stores; the project's or section's for the others (needs them loaded)."""
        if self.scope == Scope.PROJECT:
            return self.project.visibility
        if self.scope == Scope.BOARD:
            return self.section.visibility
        return self.visibility


class CanonicalStore(models.Model):
    """The one canonical store of a subject (SPEC §3, §4 ensure), keyed by the subject (issue 21).

    The rule "at most one canonical store per user, project or section" used to be three partial unique
    indexes on `stores_store`; a store table distributed by its id (Citus) cannot enforce a uniqueness over
    another column across shards, so the rule lives here, keyed by (scope, subject_id): a small platform
    table (a Citus reference table, copied to every node). A row is written in the same transaction as the
    store it names (`stores.services.claim_canonical`) and deleted with it (`delete_store`); `Store.canonical`
    mirrors it for reads. `store_id` is a plain UUID (a reference table cannot reference a distributed one).
    """

    pk = models.CompositePrimaryKey("scope", "subject_id")
    scope = models.CharField(max_length=8, choices=Scope.choices)
    subject_id = models.UUIDField()
    store_id = models.UUIDField(unique=True)

    class Meta:
        constraints = [models.CheckConstraint(name="canonical_scope_valid", condition=Q(scope__in=Scope.values))]

    def __str__(self) -> str:
        return f"canonical {self.scope} store of {self.subject_id}: {self.store_id}"


class ReaderGrant(models.Model):
    """An explicit read grant on a user store (SPEC §3 share/readers). Revoking sets `active=False`."""

    store = models.ForeignKey(Store, on_delete=models.CASCADE, related_name="reader_grants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reader_grants")
    active = models.BooleanField(default=True)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint("store", "user", name="reader_grant_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} reads {self.store_id} ({'active' if self.active else 'revoked'})"
