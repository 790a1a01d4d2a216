"""`memories-worker tools` (SPEC §5 "File tools"): the real console script over MCP stdio, driven by the
official `mcp` client. No server needed: the tools touch only the work directory and the mounts."""

from __future__ import annotations

import json
import os

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.worker.conftest import WORKER


async def _session_call(params: StdioServerParameters, calls):
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await calls(session)


def test_tools_lists_the_agent_toolset_and_refuses_writes_into_a_read_only_root(tmp_path):
    work, notes, prefs = tmp_path / "work", tmp_path / "mnt" / "notes", tmp_path / "mnt" / "prefs"
    for folder in (work, notes, prefs):
        folder.mkdir(parents=True)
    (prefs / "editor.md").write_text("vim")
    (tmp_path / "outside.md").write_text("secret")
    # The roots come from the environment `memories-worker run` gives its agent.
    params = StdioServerParameters(
        command=str(WORKER),
        args=["tools"],
        cwd=str(work),
        env={
            **os.environ,
            "MEMORIES_TOOL_ROOTS": os.pathsep.join([str(notes), str(prefs)]),
            "MEMORIES_TOOL_READ_ONLY_ROOTS": str(prefs),
        },
    )

    async def calls(session: ClientSession):
        listed = await session.list_tools()
        results = {
            "write_notes": await session.call_tool("write", {"file_path": str(notes / "a.md"), "content": "hello"}),
            "write_prefs": await session.call_tool("write", {"file_path": str(prefs / "editor.md"), "content": "x"}),
            "edit_prefs": await session.call_tool(
                "edit", {"file_path": str(prefs / "editor.md"), "old_string": "vim", "new_string": "emacs"}
            ),
            "read_prefs": await session.call_tool("read", {"file_path": str(prefs / "editor.md")}),
            "read_outside": await session.call_tool("read", {"file_path": str(tmp_path / "outside.md")}),
            "write_work": await session.call_tool("write", {"file_path": "scratch.txt", "content": "in workdir"}),
            "grep": await session.call_tool("grep", {"pattern": "hello", "path": str(notes)}),
        }
        return listed, results

    listed, results = anyio.run(_session_call, params, calls)

    by_name = {tool.name: tool for tool in listed.tools}
    assert set(by_name) == {"bash", "read", "write", "edit", "glob", "grep"}
    assert sorted(by_name["write"].input_schema["required"]) == ["content", "file_path"]

    def text(name: str) -> str:
        return "\n".join(block.text for block in results[name].content)

    assert not results["write_notes"].is_error and (notes / "a.md").read_text() == "hello"
    for refused in ("write_prefs", "edit_prefs"):
        assert results[refused].is_error, text(refused)
        assert "read-only" in text(refused)
    assert (prefs / "editor.md").read_text() == "vim"
    assert not results["read_prefs"].is_error and "vim" in text("read_prefs")
    assert results["read_outside"].is_error and "secret" not in text("read_outside")
    assert not results["write_work"].is_error and (work / "scratch.txt").read_text() == "in workdir"
    assert "a.md" in text("grep")
    json.dumps(text("grep"))  # plain text, serialisable


def test_a_read_only_root_given_on_the_command_line_is_readable_but_not_writable(tmp_path):
    """Standalone (`--root A --read-only-root B`, no environment): B is read, never written."""
    work, notes, prefs = tmp_path / "work", tmp_path / "notes", tmp_path / "prefs"
    for folder in (work, notes, prefs):
        folder.mkdir(parents=True)
    (prefs / "editor.md").write_text("vim")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORIES_TOOL_")}
    params = StdioServerParameters(
        command=str(WORKER),
        args=["tools", "--root", str(notes), "--read-only-root", str(prefs)],
        cwd=str(work),
        env=env,
    )

    async def calls(session: ClientSession):
        read = await session.call_tool("read", {"file_path": str(prefs / "editor.md")})
        globbed = await session.call_tool("glob", {"pattern": "*.md", "path": str(prefs)})
        write = await session.call_tool("write", {"file_path": str(prefs / "editor.md"), "content": "x"})
        return read, globbed, write

    read, globbed, write = anyio.run(_session_call, params, calls)
    assert not read.is_error and "vim" in read.content[0].text
    assert not globbed.is_error and "editor.md" in globbed.content[0].text
    assert write.is_error and (prefs / "editor.md").read_text() == "vim"
