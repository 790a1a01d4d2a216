"""`manage.py citus_distribute [--dry-run] [--undo] [--shard-count N]`: distribute the schema on Citus.

Issue 21, docs/scaling.md. Run on the coordinator of a Citus cluster after `migrate`: the platform tables
become reference tables, every store-content table is distributed by store and colocated with
`stores_store` (`config.distribution` has the plan and the order). Idempotent: what is done is skipped,
and a run interrupted after dropping the foreign keys restores them on the next run (they are saved in a
table first). `--undo` turns everything back into plain local tables. `--dry-run` prints the statements
and changes nothing (it needs no Citus). Without the citus extension it refuses and changes nothing.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from config import distribution
from config.text import quoted


class Command(BaseCommand):
    help = "Distribute the store-content tables by store and make the platform tables reference tables (Citus)."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Print the statements; change nothing.")
        parser.add_argument("--undo", action="store_true", help="Turn every table back into a local table.")
        parser.add_argument("--shard-count", type=int, help="citus.shard_count for the new distributed tables.")
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS, help="The database alias (default: default).")

    def handle(self, *args, dry_run: bool, undo: bool, shard_count: int | None, database: str, **options):
        connection = connections[database]
        with connection.cursor() as cursor:
            installed = distribution.citus_installed(cursor)
            if not installed and not dry_run:
                raise CommandError(
                    f"The citus extension is not installed in database {quoted(connection.settings_dict['NAME'])}; "
                    "nothing was changed. On the coordinator: CREATE EXTENSION citus; add the workers "
                    "(SELECT citus_add_node(…)); then run this again. `--dry-run` prints the plan without Citus."
                )
            state = distribution.citus_state(cursor) if installed else {}
            plan = (
                distribution.undistribute_plan(cursor, state)
                if undo
                else distribution.distribute_plan(cursor, state, shard_count=shard_count)
            )
        if not plan.statements():
            self.stdout.write("Nothing to do: " + ("no table is distributed." if undo else "already distributed."))
            return
        if dry_run:  # grouped as `_run` executes them, so the printed plan can be run as it stands in psql
            for group, atomic in (
                (plan.save_and_drop, True),
                ([*plan.reference, *plan.distribute], False),
                (plan.restore, True),
            ):
                if not group:
                    continue
                if atomic:
                    self.stdout.write("BEGIN;")
                for statement in group:
                    self.stdout.write(statement + ";")
                if atomic:
                    self.stdout.write("COMMIT;")
            return
        self._run(connection, plan)
        self.stdout.write(self.style.SUCCESS("Undistributed." if undo else "Distributed by store."))

    def _run(self, connection, plan: distribution.Plan) -> None:
        # The foreign keys are saved and dropped in one transaction, so an interruption later loses none;
        # Citus's table conversions each run on their own (they copy data, and cannot share a transaction
        # with DDL on the same tables); the keys come back in one last transaction.
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for statement in plan.save_and_drop:
                cursor.execute(statement)
        with connection.cursor() as cursor:
            for statement in [*plan.reference, *plan.distribute]:
                self.stdout.write(statement)
                cursor.execute(statement)
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for statement in plan.restore:
                cursor.execute(statement)
