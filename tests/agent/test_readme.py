"""The README's "Agent access" example runs as pasted against a live server (the brief: every example runs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sessions.models import Session
from versions.models import Version

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"


def agent_access_example() -> str:
    section = README.read_text().split("## Agent access", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_agent_access_example_runs_as_pasted(live_server, owner_token):
    env = {**os.environ, "ROG_API_URL": live_server.url, "ROG_TOKEN": owner_token.secret}
    result = subprocess.run(
        [sys.executable, "-c", agent_access_example()], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "idle /mnt/memory/team-notes",
        "active 60",
        "created session_actor",
        "terminated",
    ]
    session = Session.objects.get()
    assert session.archived_at is not None
    assert Version.objects.get().created_by == {"type": "session_actor", "session_id": str(session.pk)}
