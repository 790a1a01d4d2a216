"""The README's MCP section and the client configurations we publish work as written, against a live server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from memories.models import Entry
from rog.prompt import TOKEN_PLACEHOLDER, mcp_configuration
from tests.mcp.conftest import ROOT
from tests.mcp.test_tools import body_of

pytestmark = pytest.mark.django_db(transaction=True)


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    following = re.search(r"\n## ", text[start + 1 :])
    return text[start : start + 1 + following.start()] if following else text[start:]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_readme_python_example_runs_as_pasted(live, alice, tmp_path):
    mcp_section = section((ROOT / "README.md").read_text(), "## MCP")
    (code,) = blocks(mcp_section, "python")
    script = tmp_path / "example.py"
    script.write_text(code)
    runs = [
        subprocess.run(
            [sys.executable, str(script)],
            env={**os.environ, "ROG_API_URL": live.url, "ROG_TOKEN": alice.secret},
            capture_output=True,
            text=True,
            timeout=60,
        )
        for _ in range(2)
    ]
    assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
    assert runs[0].stdout.splitlines() == ["{'replayed': False}", "Decision: MCP clients share this store."]
    assert runs[1].stdout.splitlines()[0] == "{'replayed': True}"  # the nonce made the re-run a replay
    assert Entry.objects.count() == 1


def test_the_readme_client_configuration_is_the_one_rog_prints():
    mcp_section = section((ROOT / "README.md").read_text(), "## MCP")
    (cursor,) = blocks(mcp_section, "json")
    published = mcp_configuration("http://127.0.0.1:8000")
    assert json.loads(cursor.replace("mem_...", TOKEN_PLACEHOLDER)) == published["clients"]["cursor"]
    (shell,) = blocks(mcp_section, "sh")
    assert published["clients"]["claude_code"].replace(TOKEN_PLACEHOLDER, "$ROG_TOKEN") in shell


@pytest.mark.parametrize("client", ["cursor", "vscode"])
def test_a_published_configuration_connects_the_official_client(live, mcp_client, alice, client):
    """URL + headers exactly as configured (the placeholder replaced by a real token) are all a client needs."""
    config = mcp_configuration(live.url)["clients"][client]
    server = (config.get("mcpServers") or config["servers"])["memories"]
    assert server["url"] == live.mcp_url
    header = server["headers"]["Authorization"].replace(TOKEN_PLACEHOLDER, alice.secret)
    with mcp_client(header.removeprefix("Bearer ")) as connected:
        assert body_of(connected.call_tool("ensure_memories", {}))["meta"]["created"] is True


def test_the_guide_documents_the_mcp_configuration():
    guide = (ROOT / "docs" / "memories-guide.md").read_text()
    mcp = section(guide, "## MCP")
    for needle in ("/mcp", "Authorization: Bearer", "claude mcp add", "mcpServers", "client_nonce", "wake_memories"):
        assert needle in mcp, needle
