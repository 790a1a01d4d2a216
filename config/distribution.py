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

from dataclasses import dataclass, field

from django.db import migrations

# Store content: table → distribution column. `stores_store` first: the others are colocated with it.
DISTRIBUTED: dict[str, str] = {
    "stores_store": "id",
    "stores_readergrant": "store_id",
    "memories_entry": "store_id",
    "memories_summary": "store_id",
    "memories_claim": "store_id",
    "memories_watermark": "store_id",
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
    "accounts_idempotentrequest": "stored answers of creates made under an Idempotency-Key: per user, read by key",
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


# ------------------------------------------------------------------------------ manage.py citus_distribute

SAVED_FK_TABLE = "citus_distribute_saved_fk"
# Foreign-key DDL on distributed tables that reference reference tables must not run over parallel
# connections inside one transaction (Citus refuses); plain PostgreSQL accepts the setting as a no-op.
SEQUENTIAL = "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key as the catalog has it: its name, its table and `pg_get_constraintdef` (re-addable)."""

    name: str
    table: str
    definition: str

    def drop(self) -> str:
        return f'ALTER TABLE "{self.table}" DROP CONSTRAINT "{self.name}"'

    def add(self) -> str:
        return f'ALTER TABLE "{self.table}" ADD CONSTRAINT "{self.name}" {self.definition}'


@dataclass
class Plan:
    """What `citus_distribute` runs, step by step (each step a list of SQL statements, in order)."""

    save_and_drop: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    distribute: list[str] = field(default_factory=list)
    restore: list[str] = field(default_factory=list)

    def statements(self) -> list[str]:
        return [*self.save_and_drop, *self.reference, *self.distribute, *self.restore]


def foreign_keys(cursor, tables) -> list[ForeignKey]:
    """Every foreign key from or to one of `tables` (names), in a stable order."""
    cursor.execute(
        "SELECT conname, conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE contype = 'f' AND connamespace = current_schema()::regnamespace "
        "AND (conrelid::regclass::text = ANY(%s) OR confrelid::regclass::text = ANY(%s)) "
        "ORDER BY conrelid::regclass::text, conname",
        [list(tables), list(tables)],
    )
    return [ForeignKey(*row) for row in cursor.fetchall()]


def saved_foreign_keys(cursor) -> list[ForeignKey]:
    """The foreign keys an interrupted run dropped and has not restored yet (empty when none)."""
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [SAVED_FK_TABLE])
    if not cursor.fetchone()[0]:
        return []
    cursor.execute(f"SELECT name, table_name, definition FROM {SAVED_FK_TABLE} ORDER BY table_name, name")  # noqa: S608
    return [ForeignKey(*row) for row in cursor.fetchall()]


def _quote(value: str) -> str:
    """A SQL string literal (standard_conforming_strings, PostgreSQL's default since 9.1)."""
    return "'" + value.replace("'", "''") + "'"


def _fk_steps(fks: list[ForeignKey], saved: list[ForeignKey]) -> tuple[list[str], list[str]]:
    save = [SEQUENTIAL, f"CREATE TABLE IF NOT EXISTS {SAVED_FK_TABLE} (name text, table_name text, "
            "definition text NOT NULL, PRIMARY KEY (table_name, name))"]  # fmt: skip
    for fk in fks:
        values = ", ".join(_quote(v) for v in (fk.name, fk.table, fk.definition))  # catalog text, quoted
        save.append(f"INSERT INTO {SAVED_FK_TABLE} VALUES ({values}) ON CONFLICT DO NOTHING")  # noqa: S608
        save.append(fk.drop())
    every = {(fk.table, fk.name): fk for fk in [*saved, *fks]}
    restore = [SEQUENTIAL, *(fk.add() for _, fk in sorted(every.items()))]
    restore.append(f"DROP TABLE {SAVED_FK_TABLE}")
    return save, restore


def distribute_plan(cursor, state: dict[str, str], shard_count: int | None = None) -> Plan:
    """The statements that make the schema distributed, skipping what `state` says is done.

    state: table → "reference" | "distributed" | "local" (a Citus local table), from `citus_state`; an
    empty dict on plain PostgreSQL (the dry run). Order (what Citus needs): save and drop every foreign key
    from or to a table of the plan (else making `accounts_user` a reference table pulls every table that
    references it into Citus's metadata as a local table, which can then not be distributed); undistribute
    Citus local tables of the plan; create the reference tables; distribute `stores_store` by id and every
    other store-content table by store_id, colocated with it; re-add the foreign keys.
    """
    plan = Plan()
    todo_reference = [t for t in REFERENCE if state.get(t) != "reference"]
    todo_distributed = [t for t in DISTRIBUTED if state.get(t) != "distributed"]
    saved = saved_foreign_keys(cursor)
    if not todo_reference and not todo_distributed and not saved:
        return plan
    plan.save_and_drop, plan.restore = _fk_steps(foreign_keys(cursor, [*REFERENCE, *DISTRIBUTED]), saved)
    # A plan table already in Citus's metadata as a local table (pulled in by a foreign key to a reference
    # table) goes back to plain; Citus may have done so itself once the keys were dropped, hence the check.
    plan.reference = [
        f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = {_quote(t)}::regclass) "  # noqa: S608 - our table names
        f"THEN PERFORM undistribute_table({_quote(t)}); END IF; END $$"
        for t in [*REFERENCE, *DISTRIBUTED]
        if state.get(t) == "local"
    ]
    plan.reference += [f"SELECT create_reference_table({_quote(t)})" for t in todo_reference]
    if shard_count is not None and todo_distributed:
        plan.distribute.append(f"SET citus.shard_count = {int(shard_count)}")
    for table in todo_distributed:
        column = DISTRIBUTED[table]
        colocate = "" if table == "stores_store" else ", colocate_with => 'stores_store'"
        plan.distribute.append(f"SELECT create_distributed_table({_quote(table)}, {_quote(column)}{colocate})")
    return plan


def undistribute_plan(cursor, state: dict[str, str]) -> Plan:
    """The reverse (for tests and a way back): every table of the plan becomes a plain local table again."""
    plan = Plan()
    done = [t for t in [*reversed(DISTRIBUTED), *reversed(REFERENCE)] if state.get(t)]
    if not done and not saved_foreign_keys(cursor):
        return plan
    plan.save_and_drop, plan.restore = _fk_steps(
        foreign_keys(cursor, [*REFERENCE, *DISTRIBUTED]), saved_foreign_keys(cursor)
    )
    plan.distribute = [f"SELECT undistribute_table({_quote(t)})" for t in done]
    return plan


def citus_installed(cursor) -> bool:
    """True when the `citus` extension is installed in the current database."""
    cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
    return cursor.fetchone() is not None


def citus_state(cursor) -> dict[str, str]:
    """table → "reference" / "distributed" / "local" for the tables in Citus's metadata (needs Citus)."""
    cursor.execute(
        "SELECT logicalrelid::regclass::text, CASE WHEN partmethod = 'h' THEN 'distributed' "
        "WHEN repmodel = 't' THEN 'reference' ELSE 'local' END FROM pg_dist_partition"
    )
    return dict(cursor.fetchall())
