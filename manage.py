#!/usr/bin/env python
"""Django's command-line utility."""

import os
import sys


def main() -> None:
    """Run a management command. A database that cannot be reached, or that lacks migrations, is one line
    saying what to do, not a traceback ending in `relation "accounts_user" does not exist` (a tester ran
    `create_token` against the embedded database while their server used DATABASE_URL). A Ctrl-C — while
    Django loads too, which takes a few tenths of a second — is "Interrupted." and exit 130 (128 + SIGINT),
    not a traceback (helper-102); a command that says more of its own interruption (`export_store`) does."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    try:
        _run()
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        sys.exit(130)


def _run() -> None:
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError, ProgrammingError

    where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "the embedded PostgreSQL (DATABASE_URL is not set)"
    try:
        execute_from_command_line(sys.argv)
    except OperationalError:
        problem = _unreachable()
        if problem is None:  # connected fine: a fault inside the command, whose traceback is worth reading
            raise
        sys.exit(f"Cannot reach the database ({where}): {problem}")
    except ProgrammingError:
        if sys.argv[1:2] == ["migrate"]:  # a migration's own fault: its traceback is the one to read
            raise
        missing = _unapplied_migrations()
        if not missing:
            raise
        sys.exit(
            f"The database ({where}) lacks {missing} of this checkout's migrations. Migrate it with "
            "`python manage.py migrate` (bin/serve does), or run this command with the DATABASE_URL your "
            "server uses."
        )


def _unreachable() -> str | None:
    """Why a connection to the database cannot be made (its first line), or None when it can."""
    from django.db import connection

    try:
        connection.close()
        connection.ensure_connection()
    except Exception as exc:  # whatever the driver says, in one line
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return None


def _unapplied_migrations() -> int:
    """How many of the checkout's migrations the database lacks (0 when it cannot be asked)."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    try:
        connection.close()  # the failed statement may have left the connection in an aborted transaction
        executor = MigrationExecutor(connection)
        return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    except Exception:  # the database went away meanwhile: let the original error stand
        return 0


if __name__ == "__main__":
    main()
