"""accounts 0002: tokens with the retired `records:write` scope get `memories:write` (SPEC §7)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("accounts", "0001_initial")]
AFTER = [("accounts", "0002_records_write_to_memories_write")]

CASES = {
    "writer": (["agent:read", "records:write"], ["agent:read", "memories:write"]),
    "both": (["records:write", "memories:write", "agent:read"], ["memories:write", "agent:read"]),
    "reader": (["agent:read"], ["agent:read"]),
    "only-old": (["records:write"], ["memories:write"]),
    "other": (["records:read", "records:write"], ["records:read", "memories:write"]),
}


@pytest.mark.django_db(transaction=True)
def test_records_write_becomes_memories_write_keeping_other_scopes_without_duplicates():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        apps = executor.loader.project_state(BEFORE).apps
        User = apps.get_model("accounts", "User")
        ApiToken = apps.get_model("accounts", "ApiToken")
        user = User.objects.create(handle="old-client", password="!")
        for name, (scopes, _) in CASES.items():
            ApiToken.objects.create(user=user, name=name, prefix=name[:12], digest=uuid.uuid4().hex * 2, scopes=scopes)
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        apps = executor.loader.project_state(AFTER).apps
        migrated = dict(apps.get_model("accounts", "ApiToken").objects.values_list("name", "scopes"))
        assert migrated == {name: expected for name, (_, expected) in CASES.items()}
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
