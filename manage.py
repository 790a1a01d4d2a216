#!/usr/bin/env python
"""Django's command-line utility."""

import os
import sys


def main() -> None:
    """Run a management command; a database that was never migrated is one line saying what to do, not a
    traceback ending in `relation "accounts_user" does not exist` (a tester ran `create_token` against the
    embedded database while their server used DATABASE_URL)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line
    from django.db.utils import ProgrammingError

    try:
        execute_from_command_line(sys.argv)
    except ProgrammingError:
        if _migrated():
            raise
        where = (
            "DATABASE_URL" if os.environ.get("DATABASE_URL") else "the embedded PostgreSQL (DATABASE_URL is not set)"
        )
        sys.exit(
            f"The database ({where}) has no tables yet. Migrate it with `python manage.py migrate` "
            "(bin/serve does), or run this command with the DATABASE_URL your server uses."
        )


def _migrated() -> bool:
    """Whether the database holds Django's migration table (False when it cannot be asked)."""
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    try:
        return MigrationRecorder(connection).has_table()
    except Exception:  # the database went away meanwhile: let the original error stand
        return True


if __name__ == "__main__":
    main()
