"""The agent's system context: a Markdown block about the session's stores, never their contents (SPEC §5)."""

from __future__ import annotations

CONTEXT_FILE = "MEMORY_CONTEXT.md"


def system_context(resources) -> str:
    """Render the system context for `resources` (the session's memory-store resources, mount paths already
    relocated to where the files are): each store's name, description, mount path, access and instructions.

    Returns Markdown text. Never reads a file: the agent finds the contents at the mount paths itself. Each
    store's description is quoted (``  > …`` per line): only this function writes the context's own lines.
    """
    stores = [r for r in resources if r.type == "memory_store"]
    lines = ["# Memory stores", ""]
    if not stores:
        lines.append("This session has no memory stores attached.")
        return "\n".join(lines) + "\n"
    lines += [
        "These memory stores are mounted as folders of files. Read them before you start; write what later "
        "sessions should know into the read-write ones (changes sync back while you run and when you finish). "
        "Read-only stores refuse writes.",
        "",
    ]
    for resource in stores:
        access = "read-only" if resource.access == "read_only" else "read-write"
        # Names are one line (the server refuses line breaks since 2026-12-06); older ones are joined here.
        lines.append(f"## {' '.join((resource.name or resource.memory_store_id).splitlines())}")
        lines.append("")
        lines.append(f"- mount path: `{resource.mount_path}`")
        lines.append(f"- access: {access}")
        if resource.description:
            # The store owner's text (another person's, on a shared or public store): quoted line by line, so
            # it cannot pose as a section or a "- mount path:" line of this context (a breaker).
            lines.append("- description:")
            lines += [f"  > {line}".rstrip() for line in resource.description.splitlines()]
        if resource.instructions:
            lines += ["", "Instructions:", "", resource.instructions]
        lines.append("")
    return "\n".join(lines)
