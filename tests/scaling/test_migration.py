"""The issue-21 migrations on existing data: migrate back, write rows in the old shape, migrate forward.

Checks the re-keyed primary keys, that every canonical store reached `stores_canonicalstore`, that the
head reference of a file memory became the composite foreign key, and that going back works too.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("stores", "0003_store_importing"), ("memories", "0004_claim"), ("versions", "0001_initial")]
AFTER = [("stores", "0004_distributable"), ("memories", "0005_distributable"), ("versions", "0002_distributable")]


def _pk(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.attname FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY k(attnum, n) "
            "JOIN pg_attribute a ON a.attnum = k.attnum WHERE c.conrelid = %s::regclass AND c.contype = 'p' "
            "AND a.attrelid = c.conrelid ORDER BY k.n",
            (table,),
        )
        return [name for (name,) in cursor.fetchall()]


def _old_shape(apps) -> dict:
    User = apps.get_model("accounts", "User")
    Project = apps.get_model("accounts", "Project")
    Store = apps.get_model("stores", "Store")
    Entry = apps.get_model("memories", "Entry")
    Version = apps.get_model("versions", "Version")
    Memory = apps.get_model("versions", "Memory")
    ReaderGrant = apps.get_model("stores", "ReaderGrant")
    ann = User.objects.create(handle="ann", password="!")
    bob = User.objects.create(handle="bob", password="!")
    project = Project.objects.create(slug="apollo", name="Apollo", visibility="private")
    mine = Store.objects.create(scope="user", owner=ann, canonical=True, name="Ann", visibility="private")
    other = Store.objects.create(scope="user", owner=ann, canonical=False, name="Ann 2", visibility="public")
    shared = Store.objects.create(scope="project", project=project, canonical=True, name="Apollo")
    for seq in range(3):
        Entry.objects.create(store=mine, seq=seq, author=ann, body_md=f"e{seq}", size_bytes=2)
    ReaderGrant.objects.create(store=mine, user=bob)
    memory_id = uuid.uuid4()
    version = Version.objects.create(
        store=shared, memory_id=memory_id, operation="created", path="/a.md", content="x", content_sha256="0" * 64,
        content_size_bytes=1,
    )  # fmt: skip
    Memory.objects.create(
        id=memory_id, store=shared, path="/a.md", content="x", content_sha256="0" * 64, content_size_bytes=1,
        current_version=version,
    )  # fmt: skip
    return {"ann": ann.pk, "project": project.pk, "mine": mine.pk, "other": other.pk, "shared": shared.pk}


@pytest.mark.django_db(transaction=True)
def test_migrations_rekey_existing_rows_and_move_the_canonical_rule():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        assert _pk("memories_entry") == ["id"]
        ids = _old_shape(executor.loader.project_state(BEFORE).apps)
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        apps = executor.loader.project_state(AFTER).apps
        for table in ("memories_entry", "memories_summary", "memories_claim", "memories_storeimport"):
            assert _pk(table) == ["store_id", "id"], table
        for table in ("stores_readergrant", "versions_version", "versions_memory"):
            assert _pk(table) == ["store_id", "id"], table
        CanonicalStore = apps.get_model("stores", "CanonicalStore")
        assert set(CanonicalStore.objects.values_list("scope", "subject_id", "store_id")) == {
            ("user", ids["ann"], ids["mine"]),
            ("project", ids["project"], ids["shared"]),
        }
        Entry = apps.get_model("memories", "Entry")
        assert list(Entry.objects.filter(store_id=ids["mine"]).order_by("seq").values_list("body_md", flat=True)) == [
            "e0",
            "e1",
            "e2",
        ]
        # The head reference is (store_id, current_version_id) → versions_version (store_id, id), deferred.
        Memory = apps.get_model("versions", "Memory")
        with pytest.raises(IntegrityError), transaction.atomic():
            Memory.objects.filter(store_id=ids["shared"]).update(current_version_id=uuid.uuid4())
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        # And back: the partial unique indexes return (the data still satisfies them).
        executor = MigrationExecutor(connection)
        executor.migrate(BEFORE)
        assert _pk("memories_entry") == ["id"]
        assert _pk("versions_version") == ["id"]
        Store = executor.loader.project_state(BEFORE).apps.get_model("stores", "Store")
        with pytest.raises(IntegrityError), transaction.atomic():
            Store.objects.filter(pk=ids["other"]).update(canonical=True)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
