"""Seed 003's "Get started" flow end to end on a fresh database, with `rog` only (issue 19).

The one step outside `rog` is the first token (`manage.py createsuperuser` + `create_token`, as the README
says); the project, the board and everything after them are `rog` commands run as subprocesses. The
seed's own block is read from the seed file and run line by line with PROJECT_UUID replaced; seven more
notes follow its single note, since `zoom 0-7` needs eight entries.
"""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.models import ProjectMembership, SectionMembership, User
from memories.models import Entry
from stores.models import Store
from tests.cli.test_rog import ROG, Rog

pytestmark = pytest.mark.django_db(transaction=True)

SEED = Path("/work/shared/seeds/003_c905c67f095f77b8.txt")
CANDIDATES = [SEED, Path(__file__).resolve().parents[3] / "shared" / "seeds" / SEED.name]


# The seed's block as it stands (checked against the seed file whenever shared/seeds/ is beside us).
SEED_BLOCK = """\
rog memories init                         # your private store
rog memories init --project PROJECT_UUID # the project's shared store
rog memories init --board NeedHelp        # the board's shared store
rog memories wake --project PROJECT_UUID
rog memories note 'Decision: keep the PostgreSQL schema compatible.' --project PROJECT_UUID
rog memories recall 'PostgreSQL|schema' --project PROJECT_UUID
rog memories zoom 0-7 --project PROJECT_UUID
rog memories prompt --project PROJECT_UUID
"""


def seed_get_started() -> list[list[str]]:
    """The commands of the seed's "## Get started" sh block, as argv lists (comments dropped)."""
    path = next((p for p in CANDIDATES if p.is_file()), None)
    if path is not None:
        text = path.read_text(encoding="utf-8")
        assert re.search(r"## Get started\s+```sh\n(.*?)```", text, re.S).group(1) == SEED_BLOCK
    return [shlex.split(line, comments=True) for line in SEED_BLOCK.splitlines() if line.strip()]


def test_the_seed_get_started_flow_runs_with_rog_only_on_a_fresh_database(live_server, tmp_path):
    assert ROG, "the rog console script is not installed"
    assert not User.objects.exists() and not Store.objects.exists()
    call_command("createsuperuser", "--handle", "admin", "--noinput", stdout=io.StringIO())
    first = io.StringIO()
    call_command("create_token", "--handle", "admin", stdout=first)
    rog = Rog(live_server.url, first.getvalue().strip(), tmp_path)

    project = rog("projects", "create", "apollo", "--name", "Apollo")["data"]
    assert project["role"] == "owner" and project["visibility"] == "private"
    board = rog("boards", "create", "NeedHelp", "--name", "Need help", "--public")["data"]
    assert board["role"] == "owner" and board["visibility"] == "public"

    outputs = []
    for argv in seed_get_started():
        assert argv[0] == "rog"
        args = [project["id"] if word == "PROJECT_UUID" else word for word in argv[1:]]
        outputs.append((args, rog(*args)))
        if args[:2] == ["memories", "note"]:
            for step in range(1, 8):
                rog("memories", "note", f"Step {step}: nothing about databases.", "--project", "apollo")
    by_command = {" ".join(args[1:3]) if args[1:2] == ["init"] else args[1]: out for args, out in outputs}

    assert by_command["init --project"]["data"]["scope"] == "project"
    assert by_command["init --board"]["data"]["subject"]["slug"] == "NeedHelp"
    assert by_command["wake"]["data"] == {**by_command["wake"]["data"], "lines": [], "complete": True}
    assert by_command["note"]["data"]["seq"] == 0
    assert [m["seq"] for m in by_command["recall"]["data"]["matches"]] == [0]
    zoomed = by_command["zoom"]["data"]
    assert zoomed["line"]["range"] == "0-7" and [h["range"] for h in zoomed["halves"]] == ["0-3", "4-7"]
    assert by_command["init"]["data"]["scope"] == "user"
    assert by_command["prompt"]["data"]["store_id"] == by_command["init --project"]["data"]["id"]
    assert "rog memories wake" in by_command["prompt"]["data"]["prompt"]
    assert Entry.objects.filter(store__project__slug="apollo").count() == 8
    assert ProjectMembership.objects.get().user.handle == "admin"
    assert SectionMembership.objects.get().role == "owner"
