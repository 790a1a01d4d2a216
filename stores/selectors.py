"""Access-checked reads of stores (SPEC §3). Every surface (log, files, sessions, MCP, CLI) comes through here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import FloatField, Q, QuerySet
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime

from accounts import selectors as account_selectors
from accounts.models import Posting, Project, ProjectMembership, Role, Section, SectionMembership, User, Visibility
from config.compiled import CompiledQuery, prepared_cursor
from config.errors import AuthenticationError, InvalidRequest
from config.fields import canonical_uuid
from config.text import quoted
from stores.errors import StoreNotFound, StoreOwnerRequired, StoreWriteForbidden, SubjectNotFound, SubjectWriteForbidden
from stores.models import SEARCH_CONFIG, SEARCH_VECTOR, CanonicalStore, ReaderGrant, Scope, Store, public_q

Need = Literal["read", "write", "owner"]
ME = "me"


def parse_store_id(value: object) -> uuid.UUID:
    """Parse a store id; anything but a canonical UUID (`config.fields.canonical_uuid`) raises StoreNotFound
    (the same 404 as a missing store)."""
    pk = canonical_uuid(value)
    if pk is None:
        raise StoreNotFound()
    return pk


def _authenticated(user) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and user.is_active)


def readable_stores(user, *, scope: str | None = None) -> QuerySet[Store]:
    """Stores `user` may read (SPEC §3), newest first, annotated with `can_write`/`is_owner`; one query."""
    stores = Store.objects.with_permissions(user).select_related("owner", "project", "section")
    if scope:
        stores = stores.filter(scope=scope)
    return stores.order_by("-created_at", "-id")


def public_stores(*, scope: str | None = None) -> QuerySet[Store]:
    """Stores anyone may read — the public directory (SPEC §8) — newest first; one query.

    Deliberately independent of the caller: the directory lists what is public, nothing else, even for
    members or staff.
    """
    stores = Store.objects.filter(public_q()).select_related("owner", "project", "section")
    if scope:
        stores = stores.filter(scope=scope)
    return stores.order_by("-created_at", "-id")


def parse_newest_first_keys(keys: list) -> tuple[datetime, uuid.UUID]:
    """Turn the keys of a newest-first cursor (``[created_at ISO 8601, id]``) back into values.

    Raises InvalidRequest (400 naming `cursor`) for anything malformed.
    """
    try:
        created_at = parse_datetime(keys[0]) if isinstance(keys[0], str) else None
        pk = uuid.UUID(keys[1]) if isinstance(keys[1], str) else None
    except (ValueError, TypeError):
        created_at = pk = None
    if created_at is None or pk is None:
        raise InvalidRequest("cursor: invalid or tampered cursor; use meta.next_cursor as returned.")
    return created_at, pk


def newest_first_keys(store: Store) -> list[str]:
    """The keyset of `store` in a newest-first list: ``[created_at ISO 8601, id]`` (any row with a
    `created_at` and a UUID primary key: imports use it too)."""
    return [store.created_at.isoformat(), str(store.pk)]


def after_newest_first(stores: QuerySet[Store], after: tuple[datetime, uuid.UUID] | None) -> QuerySet[Store]:
    """Rows strictly after the keyset position `after` in ``ORDER BY created_at DESC, id DESC`` (stores, or any
    QuerySet of a model with `created_at` and a UUID `id`)."""
    if after is None:
        return stores
    created_at, pk = after
    return stores.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))


def _store_for(user, pk: uuid.UUID) -> QuerySet[Store]:
    return Store.objects.with_permissions(user).select_related("owner", "project", "section").filter(pk=pk)[:1]


def _stand_in_user(user_id: uuid.UUID) -> User:
    """An active user with only its id set: all the access policy reads of a user is `pk` and `is_active`."""
    return User(id=user_id, is_active=True)


# The access query of `get_store_for`, compiled once per process (config/compiled.py): its SQL is the
# policy's own (`with_permissions`), only the user id and store id change per request. Building and
# compiling it was the largest Python cost of a request (bench/RESULTS.md).
_SENTINEL_USER = uuid.UUID("00000000-0000-4000-8000-00000000a11c")
_SENTINEL_STORE = uuid.UUID("00000000-0000-4000-8000-00000000570e")
_STORE_FOR_USER = CompiledQuery(
    lambda user_id, pk: _store_for(_stand_in_user(user_id), pk), user_id=_SENTINEL_USER, pk=_SENTINEL_STORE
)
_STORE_FOR_ANONYMOUS = CompiledQuery(lambda pk: _store_for(None, pk), pk=_SENTINEL_STORE)
# The same query, public for callers that run it joined to their own (the token lookup does:
# `accounts.authentication`, one round trip for token and store).
STORE_FOR_USER = _STORE_FOR_USER
_PREFETCHED = "_prefetched_store"
# Who a store instance was judged for, and the right asked: ``(user, need)`` (`get_store_for`, `judge_again`).
_JUDGED = "_judged_for"


def prefetch_store(user, store_id: uuid.UUID, store: Store | None) -> None:
    """Remember the answer of the access query for (`user`, `store_id`): `store` as `STORE_FOR_USER` returned
    it (None when unreadable), fetched in the same statement as the caller's credential (issue 17).

    The next `get_store_for(user, store_id)` uses it instead of querying; it is used once. It lives on the
    `user` instance, which the authentication builds afresh for every request, so it never outlives it.
    """
    user.__dict__[_PREFETCHED] = (store_id, store)


def get_store_for(user, store_id: object, *, need: Need = "read") -> Store:
    """Return the store `store_id` if `user` may read it, annotated with `can_write` and `is_owner`.

    need: "read" | "write" | "owner". Raises StoreNotFound (404) when the store is missing or unreadable
    (identical bodies), StoreWriteForbidden / StoreOwnerRequired (403) when readable but the right is
    missing. One query, or none when the authentication fetched it (`prefetch_store`). Archived state is
    checked by the write services, under the store lock.
    """
    pk = parse_store_id(store_id)
    prefetched = getattr(user, "__dict__", {}).pop(_PREFETCHED, None)
    if prefetched is not None and prefetched[0] == pk and _authenticated(user):
        store = prefetched[1]
    elif _authenticated(user):
        store = _STORE_FOR_USER.first(user_id=user.pk, pk=pk)
    else:
        store = _STORE_FOR_ANONYMOUS.first(pk=pk)
    if store is None:
        raise StoreNotFound()
    return judged(_require(store, need), user, need)


def judged(store: Store, user, need: Need) -> Store:
    """Record on `store` that it was judged for `user` with `need` ("read" | "write" | "owner") and return it:
    `judge_again` re-runs that judgement when the store's rights change before a write lands. Set by
    `get_store_for`; a caller that checks a right itself on top of a weaker `get_store_for` (a per-work
    credential's write) records the right it checked."""
    store.__dict__[_JUDGED] = (user, need)
    return store


def _require(store: Store, need: Need) -> Store:
    if need == "write" and not store.can_write:
        raise StoreWriteForbidden()
    if need == "owner" and not store.is_owner:
        raise StoreOwnerRequired()
    return store


def parent_rights(store: Store) -> dict:
    """The rights a write to `store` compares under its locks: ``{"project": id | None, "section": id | None,
    "parent_rights": version | None}`` — the project's or section's `rights_version` as `store` was read with
    it (`get_store_for` selects the parent in the same statement), None for a user store (whose own
    `rights_version` is on the store row). Parameters of the note's and the file writes' statements."""
    if store.project_id is not None:
        return {"project": store.project_id, "section": None, "parent_rights": store.project.rights_version}
    if store.section_id is not None:
        return {"project": None, "section": store.section_id, "parent_rights": store.section.rights_version}
    return {"project": None, "section": None, "parent_rights": None}


# The parent's version under `FOR KEY SHARE`: it waits for a change that holds the parent's row (`FOR UPDATE`,
# `accounts.services._lock_parent`) and then returns the row's newest version; held until the write commits,
# so such a change waits for the write in turn. The statement every write runs (or embeds) for it.
PARENT_RIGHTS_CTES = f"""project_row AS MATERIALIZED (
    SELECT p.rights_version FROM {Project._meta.db_table} p WHERE p.id = %(project)s::uuid FOR KEY SHARE
), section_row AS MATERIALIZED (
    SELECT b.rights_version FROM {Section._meta.db_table} b WHERE b.id = %(section)s::uuid FOR KEY SHARE
), parent AS MATERIALIZED (
    SELECT COALESCE((SELECT rights_version FROM project_row), (SELECT rights_version FROM section_row)) AS rights
)"""  # noqa: S608 - table names are module constants, never input
_PARENT_RIGHTS_SQL = f"WITH {PARENT_RIGHTS_CTES} SELECT rights FROM parent"  # noqa: S608 - as above


def hold_parent_rights(*, project_id: object = None, section_id: object = None) -> int | None:
    """Lock the row of project `project_id` or section `section_id` `FOR KEY SHARE` until the caller's
    transaction ends, and return its `rights_version` of now (None when neither is given — no query — or the
    row is gone).

    The lock waits for a membership, visibility or posting change in progress (it holds the row `FOR UPDATE`,
    `accounts.services._lock_parent`) and makes a later one wait for the caller's commit: statements the
    caller runs after it see every such change committed before, and none can commit before the caller's
    own writes do (docs/access.md "Writes racing a removal").
    """
    if project_id is None and section_id is None:
        return None
    with prepared_cursor() as cursor:
        cursor.execute(_PARENT_RIGHTS_SQL, {"project": project_id, "section": section_id})
        return cursor.fetchone()[0]


def judge_again(locked: Store, judged: Store) -> None:
    """Judge the caller's right on a store again when its rights changed since it was judged (docs/access.md
    "Writes racing a removal"). Call it with the store row locked, inside the write's transaction.

    locked: the store row as the lock returned it (its newest version); judged: the store `get_store_for`
    returned to this request. The rights moved when the store's `rights_version` differs (a user store made
    private, a reader revoked) or — for a project or board store — its parent's, read under `FOR KEY SHARE`
    (one more statement; it waits for a membership, visibility or posting change in progress and holds the
    row until the write commits). Then the access query runs again, for the same user and need, and sees
    every change committed before: raises what `get_store_for` raises, StoreNotFound (404) once unreadable,
    StoreWriteForbidden / StoreOwnerRequired (403). Nothing when `judged` was not judged for a caller (an
    operator's or a test's store instance).
    """
    judgement = judged.__dict__.get(_JUDGED)
    if judgement is None:
        return
    moved = locked.rights_version != judged.rights_version
    if not moved and (locked.project_id is not None or locked.section_id is not None):
        now = hold_parent_rights(project_id=locked.project_id, section_id=locked.section_id)
        moved = now != parent_rights(judged)["parent_rights"]
    if moved:
        user, need = judgement
        getattr(user, "__dict__", {}).pop(_PREFETCHED, None)  # never the answer fetched with the credential
        get_store_for(user, locked.pk, need=need)


def permissions_of(store: Store, scopes: frozenset[str] | None = None) -> dict[str, bool]:
    """The caller's rights on a store fetched through `get_store_for`/`readable_stores`, as its credential can
    use them: `write` needs the `memories:write` scope too (`scopes`: the token's; None: judge the user
    alone). An `agent:read` token of the owner reads `write: false` — every write with it is 403 (a breaker
    saw `true`); an archived store is read-only (`write: false`). `owner` is the user's owner right:
    owner-only reads (readers, export) work with any token."""
    from accounts.permissions import WRITE_SCOPES

    writes = (scopes is None or scopes >= WRITE_SCOPES) and store.archived_at is None  # archived: read-only
    return {"read": True, "write": bool(store.can_write) and writes, "owner": bool(store.is_owner)}


# --- subjects: resolve and ensure -------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """The subject of a canonical store: exactly one of `user`, `project`, `section` is set (per `scope`)."""

    scope: str
    user: User | None = None
    project: Project | None = None
    section: Section | None = None

    @property
    def subject_id(self):
        """The subject's id (UUID): the user's, project's or section's."""
        return (self.user or self.project or self.section).pk

    def store_filter(self) -> dict:
        """Keyword filter selecting this subject's stores."""
        return {
            Scope.USER: {"owner": self.user},
            Scope.PROJECT: {"project": self.project},
            Scope.BOARD: {"section": self.section},
        }[self.scope]


def canonical_store_id(*, scope: str, subject_id):
    """The id (UUID) of the canonical store of the subject `subject_id` (a user, project or section id) in
    `scope`, or None. One lookup on the subject-keyed `CanonicalStore` (a reference table on Citus, read
    on the node that serves the request); the store itself is then fetched by id (one shard)."""
    return CanonicalStore.objects.filter(scope=scope, subject_id=subject_id).values_list("store_id", flat=True).first()


def _me(user) -> User:
    if not _authenticated(user):
        raise AuthenticationError('subject "me" needs a bearer token; name a handle instead.')
    return user


def _by_uuid_or_slug(model, value: str):
    """Find a project/section by UUID (preferred) or by slug, case-insensitively; None when absent. A query's
    `subject` takes a UUID in any spelling `uuid.UUID` reads (tests/stores/test_resolve.py); only ids in URL
    paths must be canonical (docs/decisions.md "One rule each")."""
    try:
        pk = uuid.UUID(value)
    except ValueError:
        pk = None
    if pk is not None:
        found = model.objects.filter(pk=pk).first()
        if found is not None:
            return found
    return account_selectors.by_slug(model.objects.all(), value)


def find_subject(user, *, scope: str, subject: str) -> Subject | None:
    """Look up the subject named `subject` in `scope` ("me", a handle, a UUID or a slug); None when unknown.

    Does not check access. Handles and slugs match case-insensitively (`--board NeedHelp`). "me" is the
    caller (user scope only: 400 elsewhere; 401 for anonymous callers). Inactive users are unknown.
    """
    if scope == Scope.USER:
        if subject.lower() == ME:
            return Subject(scope=scope, user=_me(user))
        found = User.objects.filter(handle__iexact=subject, is_active=True).first()
        return Subject(scope=scope, user=found) if found else None
    if subject.lower() == ME:
        raise InvalidRequest(f'subject: "me" names a user; scope {quoted(scope)} needs a UUID or slug.')
    if scope == Scope.PROJECT:
        project = _by_uuid_or_slug(Project, subject)
        return Subject(scope=scope, project=project) if project else None
    section = _by_uuid_or_slug(Section, subject)
    return Subject(scope=scope, section=section) if section else None


def resolve_store(user, *, scope: str, subject: str) -> Store:
    """Return the canonical store of (`scope`, `subject`) if `user` may read it (SPEC §4 resolve).

    Never creates. Raises StoreNotFound (404) — the same body — when the subject is unknown, has no
    canonical store, or its store is unreadable; AuthenticationError (401) for "me" without a token.
    Returns the store annotated with `can_write`/`is_owner`.
    """
    found = find_subject(user, scope=scope, subject=subject)
    if found is None:
        raise StoreNotFound()
    store_id = canonical_store_id(scope=scope, subject_id=found.subject_id)
    store = (
        None
        if store_id is None
        else Store.objects.with_permissions(user)
        .select_related("owner", "project", "section")
        .filter(pk=store_id)
        .first()
    )
    if store is None:
        raise StoreNotFound()
    return store


def _subject_rights(user, subject: Subject) -> tuple[bool, bool]:
    """(read, write) of `user` on a subject's canonical store, whether or not it exists yet (SPEC §3).

    Mirrors `stores.models.read_q`/`write_q` (the access-matrix tests hold both to the same table).
    """
    authenticated = _authenticated(user)
    if subject.scope == Scope.USER:
        mine = authenticated and subject.user.pk == user.pk
        return mine, mine
    if subject.scope == Scope.PROJECT:
        is_member = (
            authenticated and ProjectMembership.objects.filter(project=subject.project, user=user, active=True).exists()
        )
        read = subject.project.visibility == Visibility.PUBLIC or is_member
        return read, read and is_member
    membership = (
        SectionMembership.objects.filter(section=subject.section, user=user, active=True).first()
        if authenticated
        else None
    )
    read = subject.section.visibility == Visibility.PUBLIC or membership is not None
    poster = membership is not None and (membership.can_post or membership.role == Role.OWNER)
    write = authenticated and read and (poster or subject.section.posting == Posting.OPEN)
    return read, write


def subject_for_ensure(user, *, scope: str, subject: str) -> Subject:
    """Return the subject whose canonical store `user` may ensure (SPEC §4 ensure: needs the write right).

    Raises SubjectNotFound (404, naming what was asked for, identical for unknown and unreadable
    subjects) and SubjectWriteForbidden (403) when the subject is readable but not writable. Someone
    else's user store is always 403, whether or not it exists or is readable, so the answer reveals
    nothing about it (docs/access.md).
    """
    found = find_subject(user, scope=scope, subject=subject)
    if found is None:
        raise _subject_not_found(scope, subject)
    read, write = _subject_rights(user, found)
    if found.scope == Scope.USER and not write:
        raise SubjectWriteForbidden("Only a user can ensure their own user store.")
    if not read:
        raise _subject_not_found(scope, subject)
    if not write:
        raise SubjectWriteForbidden()
    return found


def subject_for_import(user, *, scope: str, subject: str) -> Subject:
    """Return the subject whose new store `user` may import (SPEC §8b: needs the owner right on it).

    A user store can only be imported by that user, a project store by a project owner, a board store
    by a section owner. Raises SubjectNotFound (404, also for subjects the caller cannot see) and
    SubjectWriteForbidden (403) when the subject is visible but the caller does not own it.
    """
    found = find_subject(user, scope=scope, subject=subject)
    if found is None:
        raise _subject_not_found(scope, subject)
    read, _ = _subject_rights(user, found)
    if found.scope == Scope.USER:
        if not (_authenticated(user) and found.user.pk == user.pk):
            raise SubjectWriteForbidden("Only a user can import their own user store.")
        return found
    if not read:
        raise _subject_not_found(scope, subject)
    memberships = (
        ProjectMembership.objects.filter(project=found.project)
        if found.scope == Scope.PROJECT
        else SectionMembership.objects.filter(section=found.section)
    )
    if not memberships.filter(user=user, active=True, role=Role.OWNER).exists():
        raise SubjectWriteForbidden("Only an owner of the project or section can import its store.")
    return found


def _subject_not_found(scope: str, subject: str) -> SubjectNotFound:
    noun = {"user": "user", "project": "project", "board": "section"}[scope]
    message = f"No {noun} {quoted(subject, 80)} that you can see."
    return SubjectNotFound(message, details={"scope": scope, "subject": subject})


# --- readers ----------------------------------------------------------------------------------------


def reader_grants(store: Store) -> QuerySet[ReaderGrant]:
    """The explicit reader grants of `store` (active and revoked), newest first, with users; one query."""
    grants = ReaderGrant.objects.filter(store=store).select_related("user", "granted_by")
    return grants.order_by("-created_at", "-user_id")


def grant_keys(grant: ReaderGrant) -> list:
    """The keyset of a grant in `reader_grants` order: ``[created_at ISO 8601, reader's user id]`` (unique in
    the store; never the row's serial id, which told cursor readers the server's grant count — a breaker)."""
    return [grant.created_at.isoformat(), str(grant.user_id)]


def after_grant(grants: QuerySet[ReaderGrant], keys: list | None) -> QuerySet[ReaderGrant]:
    """Grants strictly after the cursor keys `keys` (raises InvalidRequest for malformed keys)."""
    if keys is None:
        return grants
    created_at = parse_datetime(keys[0]) if isinstance(keys[0], str) else None
    user_id = canonical_uuid(keys[1]) if isinstance(keys[1], str) else None
    if created_at is None or user_id is None:
        raise InvalidRequest("cursor: invalid or tampered cursor; use meta.next_cursor as returned.")
    return grants.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, user_id__lt=user_id))


# --- search -----------------------------------------------------------------------------------------


def search_stores(user, *, text: str) -> QuerySet[Store]:
    """Readable stores whose name or description match `text` (SPEC §8 universal search), best first.

    PostgreSQL full-text search (`websearch_to_tsquery`, config `SEARCH_CONFIG`) over the same weighted
    vector as the GIN index `store_search_gin` (name weight A, description weight B). Annotated with
    `rank` (a float8) plus `can_write`/`is_owner`; ordered by rank, then newest. Entries are never searched.
    """
    query = SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")
    return (
        Store.objects.with_permissions(user)
        .select_related("owner", "project", "section")
        .alias(search=SEARCH_VECTOR)
        .filter(search=query)
        # ts_rank is float4, which the driver reads back as its shortest decimal: not the same number,
        # so keyset comparisons on it would fail. As float8 it round-trips exactly.
        .annotate(rank=Cast(SearchRank(SEARCH_VECTOR, query), FloatField()))
        .order_by("-rank", "-created_at", "-id")
    )


def search_keys(store: Store) -> list:
    """The keyset of a search hit: ``[rank, created_at ISO 8601, id]`` (rank is a float8: JSON keeps it exact)."""
    return [store.rank, store.created_at.isoformat(), str(store.pk)]


def after_search_hit(stores: QuerySet[Store], keys: list | None) -> QuerySet[Store]:
    """Hits strictly after the cursor keys in ``ORDER BY rank DESC, created_at DESC, id DESC``."""
    if keys is None:
        return stores
    rank = keys[0]
    if not isinstance(rank, (int, float)) or isinstance(rank, bool):
        raise InvalidRequest("cursor: invalid or tampered cursor; use meta.next_cursor as returned.")
    created_at, pk = parse_newest_first_keys(keys[1:])
    return stores.filter(
        Q(rank__lt=rank) | Q(rank=rank, created_at__lt=created_at) | Q(rank=rank, created_at=created_at, id__lt=pk)
    )
