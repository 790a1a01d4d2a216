"""Seeded data for the contract run: one fuzz user with a store that has a log, files and versions."""

from __future__ import annotations

from accounts import services as account_services
from accounts.models import Project, User
from memories import services as log_services
from stores import services as store_services
from tests.contract.schemathesis_hooks import FUZZ_HANDLE
from versions import services as version_services
from versions.actors import Actor
from versions.models import Memory


def seed() -> dict[str, str]:
    """Create (idempotently) the fuzz user, a project, and a store with 8 entries, 2 memories, 3 versions.

    Returns the ids Schemathesis may start from (``{"store_id": …, "memory_id": …, "project": …}``).
    """
    user, _ = User.objects.get_or_create(handle=FUZZ_HANDLE, defaults={"is_staff": True, "is_superuser": True})
    store, _ = store_services.ensure_canonical_store(scope="user", user=user, created_by=user)
    for seq in range(store.entry_count, 8):
        log_services.append_entry(store=store, author=user, body_md=f"Seeded entry {seq}: PostgreSQL schema.")
    actor = Actor.user(user.pk)
    first = Memory.objects.filter(store=store, path="/notes/a.md").first()
    if first is None:
        first = version_services.create_memory(store=store, path="/notes/a.md", content="one", actor=actor).memory
        version_services.create_memory(store=store, path="/notes/b.md", content="two", actor=actor)
        version_services.update_memory(store=store, memory_id=first.pk, content="one, changed", actor=actor)
    if not Project.objects.filter(slug="fuzzproj").exists():
        account_services.create_project(creator=user, slug="fuzzproj", name="Fuzz project")
    return {"store_id": str(store.pk), "memory_id": str(first.pk)}
