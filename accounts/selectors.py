"""Access-checked reads of projects, sections, memberships and the caller's tokens (SPEC §3).

A project or section the caller cannot see — private and not an active member — raises the same NotFound
as one that does not exist. Rights are computed from current memberships on every request.

| parent  | see (read)                           | members list   | manage (update, members) |
| ---     | ---                                  | ---            | ---                      |
| project | public, or an active member or owner | active members | active owners            |
| section | public, or an active member or owner | active members | active owners            |
"""

from __future__ import annotations

from typing import Literal

from django.db.models import BooleanField, Exists, Model, OuterRef, Q, QuerySet, Subquery, Value
from django.utils.dateparse import parse_datetime

from accounts.errors import (
    MembershipRequired,
    OwnerRequired,
    ProjectNotFound,
    SectionNotFound,
    TokenNotFound,
    UserNotFound,
)
from accounts.models import (
    ApiToken,
    Project,
    ProjectMembership,
    Role,
    Section,
    SectionMembership,
    User,
    Visibility,
)
from config.errors import InvalidRequest
from config.fields import canonical_uuid
from config.text import first_forbidden_char, quoted

Need = Literal["read", "member", "owner"]


def _authenticated(user) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and user.is_active)


def _visible(queryset: QuerySet, membership_model: type[Model], parent_field: str, user) -> QuerySet:
    """Rows of `queryset` that `user` may see, annotated with `caller_role` and `caller_can_post`.

    `caller_role` is the role of the caller's *active* membership (None when not an active member).
    """
    if not _authenticated(user):
        return queryset.filter(visibility=Visibility.PUBLIC).annotate(caller_role=_none(), caller_can_post=_none())
    mine = membership_model.objects.filter(**{parent_field: OuterRef("pk")}, user=user, active=True)
    annotated = queryset.annotate(caller_role=Subquery(mine.values("role")[:1]))
    if membership_model is SectionMembership:
        annotated = annotated.annotate(caller_can_post=Subquery(mine.values("can_post")[:1]))
    else:
        annotated = annotated.annotate(caller_can_post=_none())
    return annotated.filter(Q(visibility=Visibility.PUBLIC) | Exists(mine))


def _none() -> Value:
    return Value(None, output_field=BooleanField())


def visible_projects(user, *, member_only: bool = False) -> QuerySet[Project]:
    """Projects `user` may see (public ones, and those they are an active member of), newest first.

    Annotated with `caller_role` ("owner" | "member" | None). `member_only` keeps the caller's own.
    One query.
    """
    projects = _visible(Project.objects.all(), ProjectMembership, "project", user)
    if member_only:
        projects = projects.filter(caller_role__isnull=False)
    return projects.order_by("-created_at", "-id")


def visible_sections(user, *, member_only: bool = False) -> QuerySet[Section]:
    """Sections (boards) `user` may see, newest first, annotated with `caller_role`/`caller_can_post`."""
    sections = _visible(Section.objects.all(), SectionMembership, "section", user)
    if member_only:
        sections = sections.filter(caller_role__isnull=False)
    return sections.order_by("-created_at", "-id")


def _lookup(queryset: QuerySet, ref: object) -> Model | None:
    """Find by UUID (preferred; canonical spelling only, `config.fields.canonical_uuid` — any other spelling
    names nothing, as for every id in a URL) or by slug, case-insensitively; None when absent."""
    if not isinstance(ref, str) or not ref:
        return None
    pk = canonical_uuid(ref)
    if pk is not None:
        found = queryset.filter(pk=pk).first()
        if found is not None:
            return found
    return by_slug(queryset, ref)


def by_slug(queryset: QuerySet, slug: str) -> Model | None:
    """The project or section of `queryset` whose slug is `slug`, case-insensitively — or, failing that, the
    one that had it before a rename (`RetiredSlug`: an old slug keeps naming its parent, so agents set up
    with it keep writing where they did, and nobody else can take it). None when neither matches. The one
    slug lookup of the API, the resolver and the importer (SPEC §3; docs/access.md "Renamed slugs")."""
    return queryset.filter(slug__iexact=slug).first() or queryset.filter(retired_slugs__slug__iexact=slug).first()


def _require(parent: Model, need: Need) -> Model:
    if need == "member" and parent.caller_role is None:
        raise MembershipRequired()
    if need == "owner" and parent.caller_role != Role.OWNER:
        raise OwnerRequired()
    return parent


def get_project_for(user, ref: object, *, need: Need = "read") -> Project:
    """The project `ref` (UUID or slug, case-insensitive) if `user` may see it, with `caller_role`.

    need: "read" | "member" (an active member or owner) | "owner" (an active owner). Raises
    ProjectNotFound (404, identical for missing and unseen), MembershipRequired / OwnerRequired (403).
    One query.
    """
    project = _lookup(_visible(Project.objects.all(), ProjectMembership, "project", user), ref)
    if project is None:
        raise ProjectNotFound()
    return _require(project, need)


def get_section_for(user, ref: object, *, need: Need = "read") -> Section:
    """The section `ref` (UUID or slug) if `user` may see it; as `get_project_for` (SectionNotFound)."""
    section = _lookup(_visible(Section.objects.all(), SectionMembership, "section", user), ref)
    if section is None:
        raise SectionNotFound()
    return _require(section, need)


def project_members(project: Project) -> QuerySet[ProjectMembership]:
    """Every membership of `project` (active and inactive), oldest first, with users; one query."""
    return ProjectMembership.objects.filter(project=project).select_related("user").order_by("created_at", "user_id")


def section_members(section: Section) -> QuerySet[SectionMembership]:
    """Every membership of `section` (active and inactive), oldest first, with users; one query."""
    return SectionMembership.objects.filter(section=section).select_related("user").order_by("created_at", "user_id")


def membership_keys(membership: ProjectMembership | SectionMembership) -> list:
    """The keyset of a membership in oldest-first order: ``[created_at ISO 8601, user id]``.

    The member's id, unique in its parent, breaks ties — not the row's serial id: cursors are signed, not
    encrypted, and serial ids told a reader how many memberships the server made meanwhile (a breaker)."""
    return [membership.created_at.isoformat(), str(membership.user_id)]


def after_membership(memberships: QuerySet, keys: list | None) -> QuerySet:
    """Memberships strictly after the cursor keys (oldest first). Raises InvalidRequest for bad keys."""
    if keys is None:
        return memberships
    created_at = parse_datetime(keys[0]) if isinstance(keys[0], str) else None
    user_id = canonical_uuid(keys[1]) if isinstance(keys[1], str) else None
    if created_at is None or user_id is None:
        raise InvalidRequest("cursor: invalid or tampered cursor; use meta.next_cursor as returned.")
    return memberships.filter(Q(created_at__gt=created_at) | Q(created_at=created_at, user_id__gt=user_id))


def user_tokens(user: User) -> QuerySet[ApiToken]:
    """`user`'s own API tokens (live, expired and revoked), newest first; one query. Never the secret."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def get_token_for(user: User, token_id: object) -> ApiToken:
    """One of `user`'s own tokens. Raises TokenNotFound (404) for a malformed or non-canonical id
    (`config.fields.canonical_uuid`), an unknown one or someone else's token (identical bodies)."""
    pk = canonical_uuid(token_id)
    if pk is None:
        raise TokenNotFound()
    token = ApiToken.objects.filter(user=user, pk=pk).first()
    if token is None:
        raise TokenNotFound()
    return token


def user_by_handle(handle: str, *, active: bool) -> User:
    """The user `handle` names (case-insensitive, as handles are unique): the one lookup of a membership
    change, a reader grant and an operator's re-activation. `active=True` finds active users only (adding a
    member, granting); `active=False` inactive ones too (removing, revoking, re-activating).

    Raises UserNotFound (404, ``details.handle``) naming the handle, written as JSON — also for a text no
    handle can hold (NUL, a lone surrogate: `manage.py reactivate_user` given bytes that are not UTF-8 was a
    UnicodeEncodeError from the driver, helper-94).
    """
    users = User.objects.filter(handle__iexact=handle)
    user = None if first_forbidden_char(handle) else (users.filter(is_active=True) if active else users).first()
    if user is None:
        raise UserNotFound(f"No user with handle {quoted(handle, 80)}.", details={"handle": handle})
    return user
