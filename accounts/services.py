"""Write use-cases for accounts: users, API tokens, projects, sections and memberships (SPEC §2–§3).

Every membership change locks its project or section row first, so rules that span rows (a parent always
keeps an active owner; one membership per user) hold under parallel requests.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from accounts import selectors
from accounts.errors import (
    LastOwner,
    ProjectNotFound,
    RenameLimit,
    SectionNotFound,
    SlugTaken,
    TokenPowerExceeded,
)
from accounts.models import (
    ApiToken,
    Posting,
    Project,
    ProjectMembership,
    RetiredSlug,
    Role,
    Section,
    SectionMembership,
    TokenScope,
    User,
    Visibility,
    unaddressable,
)
from config.errors import InvalidRequest
from config.text import quoted
from stores.services import rights_changed
from stores.validation import name_problem

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
    """Validate scope names; return them de-duplicated in canonical order (SPEC §2).

    Raises ValueError on unknown ones, on none at all, and on `memories:write` without `agent:read` (every
    write also reads: such a token could do nothing, not even revoke itself) — the one rule for the API,
    `manage.py create_token` and every other caller of `issue_token`.
    """
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown:
        raise ValueError(f"Unknown scope(s): {', '.join(unknown)}. Known: {', '.join(ALL_SCOPES)}.")
    if not scopes:
        raise ValueError(f"At least one scope: {', '.join(ALL_SCOPES)}.")
    if TokenScope.MEMORIES_WRITE.value in scopes and TokenScope.AGENT_READ.value not in scopes:
        raise ValueError(MEMORIES_WRITE_ALONE)
    return [s for s in ALL_SCOPES if s in scopes]


MEMORIES_WRITE_ALONE = "memories:write needs agent:read too (every write also reads)."


@transaction.atomic
def issue_token(
    *,
    user: User,
    scopes: list[str] | tuple[str, ...] = ALL_SCOPES,
    name: str = "",
    expires_in_days: int | None = None,
    expires_at: datetime | None = None,
) -> IssuedToken:
    """Create an API token for `user` and return it with its secret.

    scopes: names from `ALL_SCOPES`; expires_in_days: positive int (days from now) or None; expires_at: an
    explicit expiry instead (at most one of the two). None for both: no expiry.
    Raises ValueError for unknown scopes or a non-positive expiry.
    """
    if expires_in_days is not None and expires_in_days <= 0:
        raise ValueError("expires_in_days must be positive.")
    if expires_in_days:
        expires_at = timezone.now() + timedelta(days=expires_in_days)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=secret[:12],
        digest=token_digest(secret),
        scopes=normalise_scopes(scopes),
        expires_at=expires_at,
    )
    return IssuedToken(token=token, secret=secret)


TOKEN_NAME_MAX_CHARS = 100  # ApiToken.name
# Slugs one project (section) may have left by renames, each reserved for it for good (docs/access.md).
RETIRED_SLUGS_MAX = 10


def clean_token_name(value: object) -> str:
    """Return a valid token name: a string of 1–100 characters with nothing `stores.validation.name_problem`
    refuses (control characters, lone surrogates, line separators, invisible formatting characters, no
    visible character) — the one rule for the API (`TokenNameField`) and the back office. Raises InvalidRequest whose
    message names no field (callers add it)."""
    if not isinstance(value, str):
        raise InvalidRequest("Must be a string.")
    if not 1 <= len(value) <= TOKEN_NAME_MAX_CHARS:
        raise InvalidRequest(f"Must be 1–{TOKEN_NAME_MAX_CHARS} characters (got {len(value)}).")
    problem = name_problem(value)
    if problem:
        raise InvalidRequest(problem[0].upper() + problem[1:])
    return value


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


def reactivate_user(*, handle: str) -> tuple[User, bool]:
    """Re-activate the user `handle` (case-insensitive): an operator's act (`manage.py reactivate_user`),
    never the back office's, which only takes access away — re-activation gives back every right the user's
    memberships hold. Returns ``(user, changed)``; raises UserNotFound (404) for an unknown handle."""
    user = selectors.user_by_handle(handle, active=False)
    changed = bool(User.objects.filter(pk=user.pk, is_active=False).update(is_active=True))
    user.refresh_from_db(fields=["is_active"])
    return user, changed


def ensure_user(*, handle: str, **fields) -> tuple[User, bool]:
    """Return the user with `handle` (case-insensitive), creating it with `fields` if absent."""
    user = User.objects.filter(handle__iexact=handle).first()
    if user is not None:
        return user, False
    return User.objects.create_user(handle, **fields), True


def ensure_project(*, slug: str, name: str, visibility: str = "private") -> tuple[Project, bool]:
    """Return the project with `slug` (case-insensitive, a retired slug naming its project), creating it
    with `name`/`visibility` if absent.

    slug: 1–64 ASCII letters, digits, '_' or '-'; name: 1–255 characters. Returns ``(project, created)``;
    an existing project is returned unchanged. Raises django ValidationError for a bad slug or name.
    Concurrent calls are safe: the case-insensitive unique constraint decides, the loser reads the winner.
    """
    existing = selectors.by_slug(Project.objects.all(), slug)
    if existing is not None:
        return existing, False
    project = Project(slug=slug, name=name, visibility=visibility)
    project.full_clean(validate_constraints=False)
    try:
        _save_parent(project)
    except SlugTaken:
        return selectors.by_slug(Project.objects.all(), slug), False
    return project, True


def ensure_project_membership(*, project: Project, user: User, role: str = Role.MEMBER) -> ProjectMembership:
    """Make `user` an active member of `project` with `role` (`owner` | `member`) and return the membership
    (the demo's and tests' set-up; not part of the API).

    Creates the membership if absent; re-activates an inactive one and sets its role otherwise (SPEC §3:
    owners and active members write to the project store) — through `set_project_member` as an operator, so
    under the project's row lock, with the last-owner rule (LastOwner 409) and the rights version bumped by
    a narrowing, as every membership change. Raises UserNotFound (404) for an inactive user.
    """
    membership, _ = set_project_member(project=project, actor=None, handle=user.handle, role=role)
    return membership


def mint_token(
    *, user: User, caller: object, name: str, scopes: list[str], expires_in_days: int | None = None
) -> IssuedToken:
    """Issue a token for `user` through the API (SPEC §3 `POST /me/tokens`) and return it with its secret.

    caller: the credential of the request (`request.auth`). The new token never exceeds it: its scopes are
    a subset of the caller's, and when the caller expires the new token expires no later (omitted
    `expires_in_days` inherits the caller's expiry). Only an API token can mint. Raises TokenPowerExceeded
    (403) otherwise; ValueError for unknown scopes (the serializer has already checked them).
    """
    if not isinstance(caller, ApiToken):
        raise TokenPowerExceeded("Only an API token can create API tokens.")
    beyond = [scope for scope in ALL_SCOPES if scope in scopes and scope not in caller.scopes]
    if beyond:
        raise TokenPowerExceeded(f"scopes: the calling token lacks {', '.join(beyond)}; a new token cannot have more.")
    expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days is not None else None
    if caller.expires_at is not None:
        if expires_at is None:
            expires_at = caller.expires_at
        elif expires_at > caller.expires_at:
            raise TokenPowerExceeded(
                f"expires_in_days: the calling token expires at {caller.expires_at.isoformat()}; "
                "a token it creates cannot expire later."
            )
    return issue_token(user=user, scopes=scopes, name=name, expires_at=expires_at)


# --- projects and sections ---------------------------------------------------------------------------

UNSET: Any = object()

# API roles of a section membership ↔ the (role, can_post) stored on the row.
SECTION_ROLES = {
    "owner": {"role": Role.OWNER, "can_post": True},
    "poster": {"role": Role.MEMBER, "can_post": True},
    "reader": {"role": Role.MEMBER, "can_post": False},
}


def section_role(membership: SectionMembership) -> str:
    """The API role of a section membership: "owner", "poster" (may post) or "reader" (reads only)."""
    if membership.role == Role.OWNER:
        return "owner"
    return "poster" if membership.can_post else "reader"


def check_slug(slug: str) -> str:
    """Reject slugs the API could not address: UUID-shaped ones (ids are looked up first) and "me".

    The shape (1–64 ASCII letters, digits, '_' or '-') is the serializer's. Raises InvalidRequest.
    """
    problem = unaddressable(slug)
    if problem:
        raise InvalidRequest(f"slug: {quoted(slug)} {problem}.")
    return slug


def _save_parent(parent: Model, *, old_slug: str | None = None) -> None:
    """Insert or update a project/section row. SlugTaken (409) when another project (section) holds the slug
    now or held it before a rename (`RetiredSlug`), case-insensitively. `old_slug`: the slug a rename leaves,
    retired for this parent (a slug this parent had retired before is taken back).

    Retired slugs are checked *after* the row is written: another parent's rename away from this slug, in
    flight, holds the old index entry, so this write waits on the unique index until that rename commits,
    and the check (a statement after it) then sees its retirement — no window in which a freed slug can be
    taken (docs/access.md "Renamed slugs").
    """
    field = "project" if isinstance(parent, Project) else "section"
    taken = SlugTaken(f"The slug {quoted(parent.slug)} is already taken.", details={"slug": parent.slug})
    try:
        with transaction.atomic():
            parent.save()
            retired = RetiredSlug.objects.filter(**{f"{field}__isnull": False}, slug__iexact=parent.slug)
            if retired.exclude(**{field: parent}).exists():
                raise taken
            if old_slug is not None and old_slug.lower() != parent.slug.lower():
                retired.delete()  # this parent's own old slug, taken back
                # the parent's row is locked by the save above: parallel renames of it count one at a time
                if RetiredSlug.objects.filter(**{field: parent}).count() >= RETIRED_SLUGS_MAX:
                    raise RenameLimit(
                        f"This {field} has been renamed away from {RETIRED_SLUGS_MAX} slugs, which all keep naming "
                        "it for good; it may take one of them back.",
                        details={"retired_slugs": RETIRED_SLUGS_MAX},
                    )
                RetiredSlug.objects.create(**{field: parent}, slug=old_slug)
    except IntegrityError:
        raise taken from None


@transaction.atomic
def create_project(
    *, creator: User, slug: str, name: str | None = None, visibility: str = Visibility.PRIVATE
) -> Project:
    """Create a project and make `creator` its active owner (SPEC §3: any user may create one).

    slug: already shaped by the serializer (checked here for UUIDs and reserved words); name: 1–255
    characters, default the slug; visibility: private unless "public". Raises SlugTaken (409) when the slug
    is taken, case-insensitively, by any project (seen or not: slugs are one namespace), InvalidRequest.
    """
    project = Project(slug=check_slug(slug), name=name or slug, visibility=visibility)
    _save_parent(project)
    ProjectMembership.objects.create(project=project, user=creator, role=Role.OWNER, active=True)
    return project


@transaction.atomic
def create_section(
    *,
    creator: User,
    slug: str,
    name: str | None = None,
    visibility: str = Visibility.PRIVATE,
    open_to_all_posters: bool = False,
) -> Section:
    """Create a forum section (board) and make `creator` its active owner (SPEC §3).

    The caller has checked that `creator` is staff. `open_to_all_posters`: every active user who can read
    the section may post (the public global board). Raises SlugTaken (409), InvalidRequest.
    """
    section = Section(
        slug=check_slug(slug),
        name=name or slug,
        visibility=visibility,
        posting=Posting.OPEN if open_to_all_posters else Posting.MEMBERS,
    )
    _save_parent(section)
    SectionMembership.objects.create(section=section, user=creator, **SECTION_ROLES["owner"])
    return section


def _lock_parent(parent: Model, actor: User | None) -> Model:
    """Lock `parent`'s row (a project or section) and return it; then `actor` must still be one of its active
    owners. The caller's right was checked before the lock (the view's
    `get_project_for(need="owner")`), but a demotion may have committed since: two owners demoting each
    other in parallel both succeeded (found by a breaker). Under the lock the memberships cannot change, so
    every change is judged against the owners of the moment it happens. Raises what the view's check raises:
    ProjectNotFound / SectionNotFound (404) once the actor cannot see a private parent, OwnerRequired (403).
    actor None: an operator's change (admin, scripts), no owner needed."""
    locked = type(parent).objects.select_for_update().filter(pk=parent.pk).first()
    if locked is None:  # deleted (the back office) between the caller's lookup and this lock: a 404, not a 500
        raise ProjectNotFound() if isinstance(parent, Project) else SectionNotFound()
    if actor is not None:  # the view's own check, again: 404 once unseen, 403 once not an owner
        find = selectors.get_project_for if isinstance(locked, Project) else selectors.get_section_for
        find(actor, str(locked.pk), need="owner")
    return locked


def _update_parent(parent: Model, changes: dict[str, Any], actor: User | None) -> Model:
    """Lock `parent`'s row (`_lock_parent`: `actor` still an owner) and apply `changes` ({field: value});
    save only what differs."""
    locked = _lock_parent(parent, actor)
    old_slug = locked.slug
    changed = [field for field, value in changes.items() if getattr(locked, field) != value]
    for field in changed:
        setattr(locked, field, changes[field])
    if "slug" in changed:
        check_slug(locked.slug)
    if changed:
        _save_parent(locked, old_slug=old_slug if "slug" in changed else None)
    if {"visibility", "posting"} & set(changed):  # who may read or post may have narrowed
        parent_rights_changed(locked)
    return locked


def parent_rights_changed(parent: Model) -> None:
    """Bump the `rights_version` of `parent` (a Project or Section whose row the caller has locked, inside its
    transaction), so that a write judged before a change of its memberships, visibility or posting rule is
    judged again before it lands (`stores.services.rights_changed`). For the API's changes here and the back
    office's alike."""
    rights_changed(parent)


@transaction.atomic
def update_project(
    *, project: Project, actor: User | None, slug: str = UNSET, name: str = UNSET, visibility: str = UNSET
) -> Project:
    """Update a project's slug, name or visibility; returns the row. actor: the owner asking (checked again
    under the lock), None for an operator.

    Locks the project row. Raises ProjectNotFound (404) / OwnerRequired (403) as `_lock_parent` says,
    SlugTaken (409), RenameLimit (409), InvalidRequest.
    """
    changes = {k: v for k, v in (("slug", slug), ("name", name), ("visibility", visibility)) if v is not UNSET}
    return _update_parent(project, changes, actor)


@transaction.atomic
def update_section(
    *,
    section: Section,
    actor: User | None,
    slug: str = UNSET,
    name: str = UNSET,
    visibility: str = UNSET,
    open_to_all_posters: bool = UNSET,
) -> Section:
    """Update a section's slug, name, visibility or `open_to_all_posters`; returns the row. actor: as in
    `update_project`."""
    changes = {k: v for k, v in (("slug", slug), ("name", name), ("visibility", visibility)) if v is not UNSET}
    if open_to_all_posters is not UNSET:
        changes["posting"] = Posting.OPEN if open_to_all_posters else Posting.MEMBERS
    return _update_parent(section, changes, actor)


def _set_member(
    *,
    model: type[Model],
    parent_field: str,
    parent: Model,
    handle: str,
    active: bool,
    changes: dict[str, Any],
    defaults: dict[str, Any],
) -> tuple[Model, bool]:
    """Add, change or deactivate one membership of a locked project/section row (see `set_project_member`)."""
    user = selectors.user_by_handle(handle, active=active)
    memberships = model.objects.filter(**{parent_field: parent})
    current = memberships.filter(user=user).first()
    if current is None and not active:
        # Removing someone who is not a member stores nothing (like revoking a reader who holds no grant).
        return model(**{parent_field: parent}, user=user, **{**defaults, **changes}, active=False), False
    wanted = {**(defaults if current is None else {}), **changes, "active": active}
    role_after = wanted.get("role", current.role if current is not None else None)
    was_owner = current is not None and current.active and current.role == Role.OWNER
    stays_owner = active and role_after == Role.OWNER
    if was_owner and not stays_owner and not keeps_an_owner(memberships, without=user):
        raise LastOwner()
    if current is None:
        return model.objects.create(**{parent_field: parent}, user=user, **wanted), True
    changed = [field for field, value in wanted.items() if getattr(current, field) != value]
    for field in changed:
        setattr(current, field, wanted[field])
    if changed:
        current.save(update_fields=changed)
        parent_rights_changed(parent)  # a deactivation, a demotion, the right to post taken away…
    return current, False


def keeps_an_owner(memberships: QuerySet, *, without: User | None = None) -> bool:
    """Whether `memberships` (one project's or section's) hold an active owner whose account is active,
    `without` left out — the last-owner rule (SPEC §3), for the API's membership changes and the back office
    alike. An inactive (deactivated) user's ownership governs nothing: they cannot sign in (found by a
    breaker: a project was left to a deactivated owner)."""
    owners = memberships.filter(active=True, role=Role.OWNER, user__is_active=True)
    return (owners.exclude(user=without) if without is not None else owners).exists()


@transaction.atomic
def set_project_member(
    *, project: Project, actor: User | None, handle: str, role: str = UNSET, active: bool = True
) -> tuple[ProjectMembership, bool]:
    """Add a member, change their role, or deactivate them (`active=False`); owner only (SPEC §3).

    role: "owner" | "member" (default "member" for a new membership; an existing one keeps its role unless
    given). Returns ``(membership, created)``; deactivating a non-member stores nothing and returns an
    unsaved inactive membership. Locks the project row, so parallel changes serialise: a project always
    keeps at least one active owner whose account is active (LastOwner 409 otherwise), and there is one
    membership per user. actor: the owner asking, checked again under the lock (OwnerRequired 403 when a
    parallel change demoted them, ProjectNotFound 404 when it removed them from a private project); None
    for an operator. Raises UserNotFound (404) for an unknown handle, or
    an inactive user when adding.
    """
    locked = _lock_parent(project, actor)
    return _set_member(
        model=ProjectMembership,
        parent_field="project",
        parent=locked,
        handle=handle,
        active=active,
        changes={} if role is UNSET else {"role": role},
        defaults={"role": Role.MEMBER},
    )


@transaction.atomic
def set_section_member(
    *, section: Section, actor: User | None, handle: str, role: str = UNSET, active: bool = True
) -> tuple[SectionMembership, bool]:
    """As `set_project_member` for a section; role: "owner" | "poster" | "reader" (default "poster")."""
    locked = _lock_parent(section, actor)
    return _set_member(
        model=SectionMembership,
        parent_field="section",
        parent=locked,
        handle=handle,
        active=active,
        changes={} if role is UNSET else dict(SECTION_ROLES[role]),
        defaults=dict(SECTION_ROLES["poster"]),
    )
