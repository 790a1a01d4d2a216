"""Fixtures for the legacy tests: a realistic legacy data set and a way to run the 0041 command."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from factory.random import reseed_random

from tests.legacy.factories import legacy_world


@pytest.fixture
def world(db):
    """Several authors and projects, multilingual records from empty to 50 KB, assessments, revisions."""
    reseed_random("legacy-0041")
    return legacy_world()


@pytest.fixture
def run_0041():
    """Return ``run(*args) -> str``: run `migrate_0041_memories` with `args`, return its stdout."""

    def run(*args: str) -> str:
        out = io.StringIO()
        call_command("migrate_0041_memories", *args, stdout=out, stderr=io.StringIO())
        return out.getvalue()

    return run
