"""`manage.py citus_distribute` on plain PostgreSQL (Citus is not installable here; issue 21).

It refuses clearly and changes nothing without the extension; `--dry-run` prints a plan in the order Citus
needs; and with Citus's three functions stubbed (they log their calls) the command really runs: every
foreign key comes back exactly as it was, an interrupted run loses none, and a finished one is idempotent.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from config import distribution
from config.distribution import DISTRIBUTED, REFERENCE, SAVED_FK_TABLE

pytestmark = pytest.mark.django_db


def _fks() -> set[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        return {
            (fk.table, fk.name, fk.definition) for fk in distribution.foreign_keys(cursor, [*REFERENCE, *DISTRIBUTED])
        }


def _run(*args) -> list[str]:
    from io import StringIO

    out = StringIO()
    call_command("citus_distribute", *args, stdout=out)
    return out.getvalue().splitlines()


def test_without_the_extension_it_refuses_and_changes_nothing():
    before = _fks()
    with pytest.raises(CommandError, match=r"citus extension is not installed.*nothing was changed"):
        call_command("citus_distribute")
    with pytest.raises(CommandError, match="citus extension is not installed"):
        call_command("citus_distribute", "--undo")
    assert _fks() == before
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [SAVED_FK_TABLE])
        assert cursor.fetchone() == (None,)


def test_dry_run_prints_the_plan_in_the_order_citus_needs():
    lines = _run("--dry-run", "--shard-count", "32")
    fks = _fks()
    assert len(fks) > 30  # every key from or to a platform or store-content table
    drops = [i for i, line in enumerate(lines) if "DROP CONSTRAINT" in line]
    adds = [i for i, line in enumerate(lines) if "ADD CONSTRAINT" in line]
    references = [i for i, line in enumerate(lines) if "create_reference_table" in line]
    distributed = [i for i, line in enumerate(lines) if "create_distributed_table" in line]
    assert len(drops) == len(adds) == len(fks)
    assert len(references) == len(REFERENCE) and len(distributed) == len(DISTRIBUTED)
    # Keys off first; reference tables before the store table; the store table before its colocated tables.
    assert max(drops) < min(references) and max(references) < min(distributed) and max(distributed) < min(adds)
    assert lines[distributed[0]] == "SELECT create_distributed_table('stores_store', 'id');"
    for index in distributed[1:]:
        assert "'store_id', colocate_with => 'stores_store'" in lines[index]
    assert "SET citus.shard_count = 32;" in lines
    assert lines[references[0]] == "SELECT create_reference_table('accounts_user');"
    # The composite head key of a file memory is among them, restored as it was.
    assert any('"memory_current_version_fk" FOREIGN KEY (store_id, current_version_id)' in line for line in lines)
    # Printed as the command runs it: the key drops and restores each in one transaction, so the plan can be
    # pasted into psql (the drops' SET LOCAL needs its transaction).
    begins = [i for i, line in enumerate(lines) if line == "BEGIN;"]
    commits = [i for i, line in enumerate(lines) if line == "COMMIT;"]
    assert len(begins) == len(commits) == 2
    assert begins[0] < min(drops) and max(drops) < commits[0] < min(references)
    assert max(distributed) < begins[1] < min(adds) and max(adds) < commits[1]


STUBS = """
CREATE TABLE citus_stub_calls (n serial, call text);
CREATE FUNCTION create_reference_table(t text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO citus_stub_calls (call) VALUES ('reference ' || t) $$;
CREATE FUNCTION create_distributed_table(t text, col text, colocate_with text DEFAULT 'default') RETURNS void
    LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_constraint
                   WHERE contype = 'f' AND (conrelid = t::regclass OR confrelid = t::regclass)) THEN
            RAISE EXCEPTION 'cannot distribute % while it has foreign keys', t;
        END IF;
        IF t = current_setting('stub.fail_on', true) THEN RAISE EXCEPTION 'stub failure on %', t; END IF;
        INSERT INTO citus_stub_calls (call) VALUES ('distributed ' || t || ' by ' || col || ' with ' || colocate_with);
    END $$;
CREATE FUNCTION undistribute_table(t text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO citus_stub_calls (call) VALUES ('undistribute ' || t) $$;
"""


DROP_STUBS = """
DROP TABLE IF EXISTS citus_stub_calls;
DROP FUNCTION IF EXISTS create_reference_table(text);
DROP FUNCTION IF EXISTS create_distributed_table(text, text, text);
DROP FUNCTION IF EXISTS undistribute_table(text);
"""


@pytest.fixture
def stubbed_citus(transactional_db, monkeypatch):
    """Citus's functions as logging stubs, and the extension check and metadata faked (state: a dict).

    Committed (the command's steps commit on their own); afterwards every saved foreign key is restored.
    """
    state: dict[str, str] = {}
    with connection.cursor() as cursor:
        cursor.execute(STUBS)
    monkeypatch.setattr(distribution, "citus_installed", lambda cursor: True)
    monkeypatch.setattr(distribution, "citus_state", lambda cursor: dict(state))
    try:
        yield state
    finally:
        with connection.cursor() as cursor:
            for fk in distribution.saved_foreign_keys(cursor):
                cursor.execute(fk.add())
            cursor.execute(f"DROP TABLE IF EXISTS {SAVED_FK_TABLE}")
            cursor.execute(DROP_STUBS)


def _calls() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT call FROM citus_stub_calls ORDER BY n")
        return [call for (call,) in cursor.fetchall()]


def test_it_runs_the_plan_and_restores_every_foreign_key_exactly(stubbed_citus):
    before = _fks()
    assert _run()[-1] == "Distributed by store."
    assert _calls() == [
        *(f"reference {t}" for t in REFERENCE),
        "distributed stores_store by id with default",
        *(f"distributed {t} by store_id with stores_store" for t in list(DISTRIBUTED)[1:]),
    ]
    assert _fks() == before
    stubbed_citus.update({t: "reference" for t in REFERENCE} | {t: "distributed" for t in DISTRIBUTED})
    assert _run() == ["Nothing to do: already distributed."]  # idempotent
    assert _run("--undo")[-1] == "Undistributed."
    assert _calls()[-len(DISTRIBUTED) - len(REFERENCE) :] == [
        *(f"undistribute {t}" for t in reversed(DISTRIBUTED)),
        *(f"undistribute {t}" for t in reversed(REFERENCE)),
    ]
    assert _fks() == before


def test_an_interrupted_run_loses_no_foreign_key_and_the_next_run_finishes(stubbed_citus):
    before = _fks()
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('stub.fail_on', 'memories_entry', false)")
    with pytest.raises(Exception, match="stub failure on memories_entry"):
        _run()
    assert _fks() == set()  # dropped; but saved:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {SAVED_FK_TABLE}")  # noqa: S608 - a constant
        assert cursor.fetchone() == (len(before),)
        cursor.execute("SELECT set_config('stub.fail_on', '', false)")
    stubbed_citus.update({t: "reference" for t in REFERENCE} | {"stores_store": "distributed"})
    assert _run()[-1] == "Distributed by store."
    assert _fks() == before
    assert "distributed stores_readergrant by store_id with stores_store" in _calls()


def test_a_table_citus_pulled_in_as_local_goes_back_to_plain_before_anything_else(monkeypatch):
    """The trial's failure: `memories_entry` became a Citus local table (a key to `accounts_user`)."""
    monkeypatch.setattr(distribution, "citus_installed", lambda cursor: True)
    monkeypatch.setattr(distribution, "citus_state", lambda cursor: {"memories_entry": "local"})
    lines = _run("--dry-run")
    undo = next(i for i, line in enumerate(lines) if "undistribute_table('memories_entry')" in line)
    assert "pg_dist_partition" in lines[undo]  # only if Citus has not undone it itself
    assert max(i for i, line in enumerate(lines) if "DROP CONSTRAINT" in line) < undo
    assert undo < min(i for i, line in enumerate(lines) if "create_reference_table" in line)
    assert "SELECT create_distributed_table('memories_entry', 'store_id', colocate_with => 'stores_store');" in lines
