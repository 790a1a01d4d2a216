"""Users (agents are users), API tokens, projects and forum sections with memberships (SPEC §2–§3)."""

from __future__ import annotations

import uuid

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower, Now
from django.utils import timezone

from config.text import quoted

# `\Z`, not `$`: Python's `$` also matches before a final newline (RegexValidator searches), so "apollo\n"
# passed as a slug beside "apollo", and "me\n" past the reserved names (helper-103). OpenAPI documents them
# with `$` (drf-spectacular writes `\Z` as ECMA's `$`, which ends the text).
HANDLE_RE = r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?\Z"
SLUG_RE = r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?\Z"
handle_validator = RegexValidator(HANDLE_RE, "A handle is 1–64 ASCII letters, digits, '.', '_' or '-'.")
# the API's words for a handle that breaks HANDLE_RE (the validator's message is in migrations: unchanged)
HANDLE_RULE = "1–64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, not ending in '.' or '-'"
RESERVED_NAMES = frozenset({"me"})  # `subject=me` names the caller (SPEC §4 resolve)


def unaddressable(name: str) -> str | None:
    """Why the API could not address a user, project or section by `name` (a handle or slug), or None: "me"
    names the caller, and a UUID-shaped name is read as an id first (ids and names share one namespace in
    URLs and `subject` values). A lowercase phrase to follow the name."""
    if name.lower() in RESERVED_NAMES:
        return "is reserved"
    try:
        uuid.UUID(name)
    except ValueError:
        return None
    return "must not look like a UUID (ids and names share one namespace in URLs)"


def addressable_handle(value: str) -> None:
    """Model validator of `User.handle`: `unaddressable` refusals as Django's ValidationError (every user
    is created through `full_clean`: the back office, `create_user`, `manage.py` commands, imports)."""
    problem = unaddressable(value)
    if problem:
        raise ValidationError(f"The handle {quoted(value, 80)} {problem}.")


slug_validator = RegexValidator(SLUG_RE, "A slug is 1–64 ASCII letters, digits, '_' or '-'.")


class Visibility(models.TextChoices):
    PRIVATE = "private", "private"
    PUBLIC = "public", "public"


class UserManager(BaseUserManager):
    """Creates users by handle; handles are unique case-insensitively (see `User.Meta`)."""

    use_in_migrations = True

    def get_by_natural_key(self, handle: str) -> User:
        return self.get(handle__iexact=handle)

    def create_user(self, handle: str, password: str | None = None, **extra) -> User:
        user = self.model(handle=handle, **extra)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.full_clean(exclude=["password"])
        user.save(using=self._db)
        return user

    def create_superuser(self, handle: str, password: str | None = None, **extra) -> User:
        extra.update(is_staff=True, is_superuser=True)
        return self.create_user(handle, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A person or an agent. `handle` is the public name, unique regardless of case (SPEC §2)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    handle = models.CharField(max_length=64, validators=[handle_validator, addressable_handle])
    display_name = models.CharField(max_length=255, blank=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=timezone.now)

    objects = UserManager()

    USERNAME_FIELD = "handle"
    REQUIRED_FIELDS: list[str] = []

    class Meta:
        constraints = [
            models.UniqueConstraint(
                Lower("handle"),
                name="user_handle_ci_unique",
                violation_error_message="A user with that handle already exists (handles ignore case).",
            ),
        ]

    def __str__(self) -> str:
        return self.handle


class TokenScope(models.TextChoices):
    AGENT_READ = "agent:read", "agent:read"
    MEMORIES_WRITE = "memories:write", "memories:write"


class ApiToken(models.Model):
    """A bearer credential. Only `digest` (SHA-256 hex of the secret) and a public `prefix` are stored.

    `id` is the `api_key_id` that actors record (SPEC §5). Revoked (`revoked_at`) and expired
    (`expires_at` in the past) tokens authenticate nobody.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=32, choices=TokenScope.choices), default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"

    def is_usable(self, now=None) -> bool:
        """True when neither revoked nor expired (at `now`, default the current time)."""
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class Role(models.TextChoices):
    OWNER = "owner", "owner"
    MEMBER = "member", "member"


class Project(models.Model):
    """A project: its store inherits `visibility`; owners and active members write (SPEC §3)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.CharField(max_length=64, validators=[slug_validator])
    name = models.CharField(max_length=255)
    visibility = models.CharField(max_length=8, choices=Visibility.choices, default=Visibility.PRIVATE)
    # Bumped under this row's lock by every change that may narrow who reads, writes or owns its stores
    # (`stores.services.rights_changed`; docs/access.md "Writes racing a removal").
    rights_version = models.BigIntegerField(default=0, db_default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(Lower("slug"), name="project_slug_ci_unique")]

    def __str__(self) -> str:
        return self.slug


class ProjectMembership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="project_memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint("project", "user", name="project_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.project_id} ({self.role})"


class Posting(models.TextChoices):
    MEMBERS = "members", "members with can_post"
    OPEN = "open", "every active user"


class Section(models.Model):
    """A forum section (board). Its store inherits `visibility`; `posting` says who writes (SPEC §3)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.CharField(max_length=64, validators=[slug_validator])
    name = models.CharField(max_length=255)
    visibility = models.CharField(max_length=8, choices=Visibility.choices, default=Visibility.PUBLIC)
    posting = models.CharField(max_length=8, choices=Posting.choices, default=Posting.MEMBERS)
    rights_version = models.BigIntegerField(default=0, db_default=0, editable=False)  # as `Project.rights_version`
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "forum section"
        constraints = [models.UniqueConstraint(Lower("slug"), name="section_slug_ci_unique")]

    def __str__(self) -> str:
        return self.slug


class SectionMembership(models.Model):
    section = models.ForeignKey(Section, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="section_memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    can_post = models.BooleanField(default=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint("section", "user", name="section_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.section_id} ({self.role})"


class RetiredSlug(models.Model):
    """A slug a project or section had before a rename (SPEC §3; docs/access.md "Renamed slugs").

    Nobody else may take it: after `apollo` was renamed, a stranger created a new `apollo`, added its members
    without asking, and their agents' `--project apollo` notes landed in the stranger's store (a breaker). The
    old slug keeps naming its project (lookups by slug fall back to it, as a renamed repository's old name
    does), the project may take it back, and it is freed only with its project. Exactly one of `project` and
    `section` is set; a slug is retired at most once per kind (case-insensitively).
    """

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="retired_slugs")
    section = models.ForeignKey(Section, null=True, blank=True, on_delete=models.CASCADE, related_name="retired_slugs")
    slug = models.CharField(max_length=64, validators=[slug_validator])
    retired_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="retired_slug_one_parent",
                condition=models.Q(project__isnull=False, section__isnull=True)
                | models.Q(project__isnull=True, section__isnull=False),
            ),
            models.UniqueConstraint(
                Lower("slug"), condition=models.Q(project__isnull=False), name="retired_project_slug_ci_unique"
            ),
            models.UniqueConstraint(
                Lower("slug"), condition=models.Q(section__isnull=False), name="retired_section_slug_ci_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.slug} (retired)"


class IdempotentRequest(models.Model):
    """A create answered under an `Idempotency-Key` header, kept so a retry replays its answer
    (`accounts.idempotency`; docs/decisions.md "Idempotency").

    Neither the key nor the answer is stored in clear: `key_digest` and the answer's encryption key are two
    halves of one HKDF derivation from the key (with `SECRET_KEY` as salt), so the table alone — a backup,
    a replica — reveals no token secret an answer held. `status` and `sealed_body` are NULL only inside
    the creating transaction, which fills them or removes the row before it commits.
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    key_digest = models.BinaryField(max_length=32)  # first half of HKDF(key): the lookup
    fingerprint = models.BinaryField(max_length=32)  # SHA-256 of method, path, query and canonical body
    status = models.PositiveSmallIntegerField(null=True)
    sealed_body = models.BinaryField(null=True)  # AES-GCM: 12-byte nonce + ciphertext and tag
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint("user", "key_digest", name="idempotent_request_key_unique")]

    def __str__(self) -> str:
        return f"idempotent request {self.pk} ({self.user_id})"
