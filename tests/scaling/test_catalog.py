"""The schema stays distributable by store (issue 21): read PostgreSQL's catalog, fail on any regression.

Citus's rules for a table distributed by a column: its primary key and every unique constraint or unique
index include the column; a foreign key to another distributed table includes it on both sides (colocated
tables); no reference or local table references a distributed one. `config.distribution` names the tables;
any table with a `store_id` column must be named there, so a new store-content table cannot slip past.
"""

from __future__ import annotations

import pytest
from django.db import connection

from config.distribution import DISTRIBUTED, REFERENCE, STORE_KEYED_LOCAL

pytestmark = pytest.mark.django_db

# Tables with a `store_id` column that are not store content, and why.
NOT_STORE_CONTENT = {
    "backoffice_auditevent": "audit events copy the store id and name; they outlive the store (no key on it)",
    "stores_canonicalstore": "keyed by the subject: a reference table naming each subject's canonical store",
}

KEYED = {**DISTRIBUTED, **STORE_KEYED_LOCAL}


def _rows(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _columns(table: str, attnums) -> list[str]:
    names = dict(_rows("SELECT attnum, attname FROM pg_attribute WHERE attrelid = %s::regclass", (table,)))
    return [names[n] for n in attnums]


def test_every_table_with_a_store_id_is_classified():
    tables = {
        table
        for (table,) in _rows(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND a.attname = 'store_id' AND NOT a.attisdropped"
        )
    }
    unclassified = tables - set(KEYED) - set(NOT_STORE_CONTENT)
    assert not unclassified, f"add these to config.distribution (or NOT_STORE_CONTENT, saying why): {unclassified}"
    assert set(KEYED) - {"stores_store"} <= tables


@pytest.mark.parametrize("table", sorted(KEYED))
def test_primary_key_leads_with_the_distribution_column(table):
    (pk,) = _rows("SELECT conkey FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'", (table,))
    assert KEYED[table] in _columns(table, pk[0]), f"{table}: primary key {_columns(table, pk[0])}"


@pytest.mark.parametrize("table", sorted(KEYED))
def test_every_unique_constraint_and_index_includes_the_distribution_column(table):
    rows = _rows(
        "SELECT i.indexrelid::regclass::text, i.indkey::int2[], i.indexprs IS NOT NULL FROM pg_index i "
        "WHERE i.indrelid = %s::regclass AND i.indisunique",
        (table,),
    )
    assert rows
    for name, keys, has_expressions in rows:
        columns = _columns(table, [k for k in keys if k != 0])
        assert KEYED[table] in columns, f"{table}: unique index {name} on {columns} lacks {KEYED[table]}"
        assert not has_expressions or KEYED[table] in columns


def test_store_content_has_no_exclusion_constraint_or_trigger():
    for table in DISTRIBUTED:
        assert not _rows("SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'x'", (table,))
        assert not _rows("SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal", (table,))


def test_foreign_keys_between_store_tables_include_the_store_on_both_sides():
    rows = _rows(
        "SELECT conname, conrelid::regclass::text, confrelid::regclass::text, conkey, confkey "
        "FROM pg_constraint WHERE contype = 'f' AND connamespace = current_schema()::regnamespace"
    )
    checked = 0
    for name, source, target, keys, target_keys in rows:
        if target not in DISTRIBUTED:
            continue  # to a reference or local table: allowed from anywhere
        assert source in DISTRIBUTED, f"{name}: {source} (not distributed) references distributed {target}"
        pairs = list(zip(_columns(source, keys), _columns(target, target_keys), strict=True))
        assert (DISTRIBUTED[source], DISTRIBUTED[target]) in pairs, f"{name}: {source}{pairs} → {target}"
        checked += 1
    assert checked >= len(DISTRIBUTED) - 1  # every content table references its store at least


def test_reference_tables_exist_and_reference_nothing_distributed():
    for table in REFERENCE:
        targets = _rows(
            "SELECT confrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND conrelid = %s::regclass",
            (table,),
        )
        assert not {t for (t,) in targets} & set(DISTRIBUTED), table


def test_the_canonical_rule_is_keyed_by_the_subject():
    """One canonical store per (scope, subject): the primary key of stores_canonicalstore, a reference table."""
    (pk,) = _rows(
        "SELECT conkey FROM pg_constraint WHERE conrelid = 'stores_canonicalstore'::regclass AND contype = 'p'"
    )
    assert _columns("stores_canonicalstore", pk[0]) == ["scope", "subject_id"]
    assert "stores_canonicalstore" in REFERENCE
