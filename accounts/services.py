"""Write use-cases for accounts: users and API tokens (SPEC §2)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import ApiToken, Project, ProjectMembership, Role, TokenScope, User

TOKEN_PREFIX = "mem_"  # noqa: S105 (a public prefix, not a secret)
ALL_SCOPES = (TokenScope.AGENT_READ.value, TokenScope.MEMORIES_WRITE.value)


def token_digest(secret: str) -> str:
    """SHA-256 hex of a token secret (what the database stores and looks up)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    """A freshly created token: `secret` is shown once and never stored."""

    token: ApiToken
    secret: str


def normalise_scopes(scopes: list[str] | tuple[str, ...]) -> list[str]:
    """Validate scope names; return them de-duplicated in canonical order. Raises ValueError on unknown ones."""
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown:
        raise ValueError(f"Unknown scope(s): {', '.join(unknown)}. Known: {', '.join(ALL_SCOPES)}.")
    return [s for s in ALL_SCOPES if s in scopes]


@transaction.atomic
def issue_token(
    *, user: User, scopes: list[str] | tuple[str, ...] = ALL_SCOPES, name: str = "", expires_in_days: int | None = None
) -> IssuedToken:
    """Create an API token for `user` and return it with its secret.

    scopes: names from `ALL_SCOPES`; expires_in_days: positive int or None (no expiry).
    Raises ValueError for unknown scopes or a non-positive expiry.
    """
    if expires_in_days is not None and expires_in_days <= 0:
        raise ValueError("expires_in_days must be positive.")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=secret[:12],
        digest=token_digest(secret),
        scopes=normalise_scopes(scopes),
        expires_at=timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None,
    )
    return IssuedToken(token=token, secret=secret)


def revoke_token(*, token: ApiToken) -> ApiToken:
    """Revoke `token` (idempotent: an already-revoked token keeps its first `revoked_at`)."""
    ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())
    token.refresh_from_db(fields=["revoked_at"])
    return token


def touch_token(*, token, resolution_seconds: int) -> None:
    """Record use of a bearer credential with a `last_used_at` (an ApiToken, or an environment key), at most
    once per `resolution_seconds` (a write per request would cost every call)."""
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() >= resolution_seconds:
        type(token).objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


def ensure_user(*, handle: str, **fields) -> tuple[User, bool]:
    """Return the user with `handle` (case-insensitive), creating it with `fields` if absent."""
    user = User.objects.filter(handle__iexact=handle).first()
    if user is not None:
        return user, False
    return User.objects.create_user(handle, **fields), True


def ensure_project(*, slug: str, name: str, visibility: str = "private") -> tuple[Project, bool]:
    """Return the project with `slug` (case-insensitive), creating it with `name`/`visibility` if absent.

    slug: 1–64 ASCII letters, digits, '_' or '-'; name: 1–255 characters. Returns ``(project, created)``;
    an existing project is returned unchanged. Raises django ValidationError for a bad slug or name.
    Concurrent calls are safe: the case-insensitive unique constraint decides, the loser reads the winner.
    """
    existing = Project.objects.filter(slug__iexact=slug).first()
    if existing is not None:
        return existing, False
    project = Project(slug=slug, name=name, visibility=visibility)
    project.full_clean(validate_constraints=False)
    try:
        with transaction.atomic():
            project.save()
    except IntegrityError:
        return Project.objects.get(slug__iexact=slug), False
    return project, True


def ensure_project_membership(*, project: Project, user: User, role: str = Role.MEMBER) -> ProjectMembership:
    """Make `user` an active member of `project` with `role` (`owner` | `member`) and return the membership.

    Creates the membership if absent; re-activates an inactive one and sets its role otherwise (SPEC §3:
    owners and active members write to the project store).
    """
    membership, _ = ProjectMembership.objects.update_or_create(
        project=project, user=user, defaults={"role": role, "active": True}
    )
    return membership
