"""`memories-worker tools`: the agent's file tools over MCP stdio (SPEC §5 "File tools").

The tools are the SDK's agent toolset (`anthropic.lib.tools.agent_toolset.beta_agent_toolset_20260401`:
bash, read, write, edit, glob, grep) bound to an `AgentToolContext` whose `workdir` is the work directory,
`allowed_roots` the mounts and `read_only_roots` the read-only mounts — exactly how the SDK's own worker
configures them. So the file tools confine every path to those roots and `write`/`edit` refuse a path inside
a read-only root with a tool error. `bash` is an ordinary shell with the process's own access: inside the
worker container that is an agent-tool policy, not a kernel-enforced mount (seed 000); the worker also makes
read-only mounts' files read-only and never pushes them.

Served with the official `mcp` SDK's low-level server; each tool's name, description and input schema are
the SDK tool's own. A `ToolError` (or any failure inside a tool) is a tool result with `isError: true`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anthropic.lib.tools._beta_functions import ToolError
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool


def build_server(workdir: Path, roots: list[Path], read_only_roots: list[Path]) -> tuple[Server, AgentToolContext]:
    """The MCP server for one agent: `workdir`, `roots` and `read_only_roots` reachable, `read_only_roots`
    refusing writes (a read-only root is readable whether or not it is also listed in `roots`).

    Returns the server and the tool context (whose bash session the caller closes).
    """
    read_only = [Path(p).resolve() for p in read_only_roots]
    reachable = [Path(p).resolve() for p in roots]
    ctx = AgentToolContext(
        workdir=str(workdir),
        allowed_roots=[*reachable, *(p for p in read_only if p not in reachable)],
        read_only_roots=read_only,
    )
    toolset = {tool.name: tool for tool in beta_agent_toolset_20260401(ctx)}

    async def list_tools(_ctx, _params) -> ListToolsResult:
        return ListToolsResult(
            tools=[
                Tool(name=tool.name, description=tool.description, input_schema=dict(tool.input_schema))
                for tool in toolset.values()
            ]
        )

    async def call_tool(_ctx, params) -> CallToolResult:
        tool = toolset.get(params.name)
        if tool is None:
            return _error(f"unknown tool: {params.name}")
        try:
            result = await tool.call(dict(params.arguments or {}))
        except ToolError as e:
            return _error(_text_of(e.content))
        except Exception as e:  # a tool's own failure is the agent's to see, not a protocol error
            return _error(f"{params.name}: {e}")
        return CallToolResult(content=[TextContent(type="text", text=_text_of(result))], is_error=False)

    server = Server(
        "memories-worker-tools",
        instructions="File tools for this session: the work directory and the mounted memory stores.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    return server, ctx


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _text_of(result: Any) -> str:
    if isinstance(result, str):
        return result
    parts = []
    for block in result or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'block')} content]")
        else:
            parts.append(str(block))
    return "\n".join(parts)


async def serve(workdir: Path, roots: list[Path], read_only_roots: list[Path]) -> None:
    """Serve the tools on stdin/stdout until the client closes stdin."""
    server, ctx = build_server(workdir, roots, read_only_roots)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await ctx.__aexit__(None, None, None)
