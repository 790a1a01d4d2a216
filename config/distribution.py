"""The distribution plan of the schema on Citus (issue 21; docs/scaling.md), one place for the migrations,
`manage.py citus_distribute` and the catalog test.

Every store's content lives on one shard: the store-content tables are distributed by `store_id` (the
store table by its `id`) and colocated with `stores_store`, so every query of one store runs on one node.
Their primary keys, unique constraints and foreign keys to other store-content tables all include the
distribution column (Citus's rule); tests/scaling/test_catalog.py fails when a table breaks it. The platform
tables (users, tokens, projects, sections, memberships, the canonical-store table) are reference tables,
copied to every node. Everything else stays a local table on the coordinator (see `LOCAL`).
"""

from __future__ import annotations

from django.db import migrations

# Store content: table → distribution column. `stores_store` first: the others are colocated with it.
DISTRIBUTED: dict[str, str] = {
    "stores_store": "id",
    "stores_readergrant": "store_id",
    "memories_entry": "store_id",
    "memories_summary": "store_id",
    "memories_claim": "store_id",
    "memories_storeimport": "store_id",
    "versions_version": "store_id",
    "versions_memory": "store_id",
}

# Platform tables: small, read on every request, joined with store content → reference tables. Order:
# referenced before referencing.
REFERENCE: tuple[str, ...] = (
    "accounts_user",
    "accounts_project",
    "accounts_section",
    "accounts_apitoken",
    "accounts_projectmembership",
    "accounts_sectionmembership",
    "stores_canonicalstore",
)

# Tables keyed by store first that stay local for now, and why (the catalog test checks their keys too).
STORE_KEYED_LOCAL: dict[str, str] = {
    # A session's attachments are read and written with the session (agent-access control plane, local on
    # the coordinator with its sessions, work items and claims); store_id leads its primary key so it can
    # be distributed with the store content once sessions are.
    "agent_sessions_attachment": "store_id",
}

# Local on the coordinator, and why. Citus adds a local table that references a reference table to its
# metadata by itself (a "Citus local table"); nothing here is joined with distributed tables on a hot path.
LOCAL: dict[str, str] = {
    "django_*, auth_*": "Django internals (migrations, content types, permissions, admin log, sessions)",
    "agent_sessions_*": "agent-access control plane: environments, keys, sessions, work items, leases",
    "backoffice_auditevent": "audit events: copies of store ids and names, no foreign key, outlive stores",
    "legacy_*": "legacy archives and the 0041 records: read-only history, one machine's worth",
}


def rekey(table: str, columns: tuple[str, ...], old: tuple[str, ...] = ("id",)) -> migrations.RunSQL:
    """A migration operation that replaces `table`'s primary key by one over `columns` (reversible).

    The constraint keeps PostgreSQL's default name `<table>_pkey`, so Django's introspection and later
    migrations find it where they expect it; the model's `id` stays Django's primary key (docs/decisions.md,
    "Store content is keyed by store").
    """

    def sql(cols: tuple[str, ...]) -> str:
        return (
            f'ALTER TABLE "{table}" DROP CONSTRAINT "{table}_pkey", '
            f'ADD CONSTRAINT "{table}_pkey" PRIMARY KEY ({", ".join(cols)})'
        )

    return migrations.RunSQL(sql(columns), reverse_sql=sql(old))
