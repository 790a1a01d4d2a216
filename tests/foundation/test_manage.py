"""`manage.py` itself: what an operator meets before any command runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.databases import database_url
from tests.interrupted import run_with_import_interrupted

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_database():
    """A database with no tables on the test server, dropped after the test."""
    name = f"{connection.settings_dict['NAME']}_unmigrated"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


CREATE_TOKEN = ["create_token", "--handle", "bob", "--create-user", "--name", "laptop"]


def manage(database_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url}
    argv = [sys.executable, "manage.py", *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def test_a_command_on_a_database_never_migrated_says_so_in_one_line(empty_database):
    """A tester ran `create_token` with another database than their server's: ~60 lines of traceback
    ending in `relation "accounts_user" does not exist`."""
    done = manage(empty_database, *CREATE_TOKEN)
    assert done.returncode == 1 and done.stdout == ""
    assert "lacks" in done.stderr and "migrations" in done.stderr and "manage.py migrate" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_partly_migrated_database_is_named_too(empty_database):
    """Django's own migration table alone (one app migrated) passed the first version of the check."""
    assert manage(empty_database, "migrate", "contenttypes", "-v", "0").returncode == 0
    done = manage(empty_database, *CREATE_TOKEN)
    assert done.returncode == 1 and "lacks" in done.stderr and "Traceback" not in done.stderr


def test_a_database_that_cannot_be_reached_is_one_line(empty_database):
    missing = empty_database.replace("_unmigrated", "_absent")
    done = manage(missing, *CREATE_TOKEN)
    assert done.returncode == 1 and done.stderr.startswith("Cannot reach the database (DATABASE_URL): ")
    assert "_absent" in done.stderr and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_ctrl_c_while_django_starts_is_one_line_and_130():
    """A Ctrl-C in the few tenths of a second Django takes to load printed a KeyboardInterrupt traceback
    (helper-102: 13 of 80 `export_store` runs interrupted early)."""
    manage = str(ROOT / "manage.py")
    program = f"import runpy, sys\nsys.argv = ['manage.py', 'check']\nrunpy.run_path({manage!r}, run_name='__main__')\n"
    done = run_with_import_interrupted("django.core.management", program, cwd=ROOT)
    assert (done.returncode, done.stderr) == (130, b"Interrupted.\n")
