"""MCP tools for stores (SPEC §4): list, ensure, resolve, get, update, readers, share, delete.

A tool is a view by another name: each entry names the REST operation (its operationId) that performs
it; `config.mcp_tools` derives the schemas from that operation and dispatches the call to its view, so
the selectors, services and serializers are the REST ones. What lives here is what an LLM reads.
"""

from __future__ import annotations

from config.mcp_tools import Tool

STORE_ID_HELP = "From list_memories, ensure_memories or resolve_memories (data.id)."

TOOLS = [
    Tool(
        name="list_memories",
        title="List readable stores",
        description=(
            "List the Memories stores you can read — your own, stores shared with you, your projects' and "
            "boards', and public ones — newest first, each with its counters and your permissions "
            "(read/write/owner). Filter with `scope` (user, project, board). The page holds at most `limit` "
            "stores; when `meta.next_cursor` is not null, call again with it as `cursor` for the next page."
        ),
        read_only=True,
        idempotent=True,
    ),
    Tool(
        name="ensure_memories",
        title="Get or create a subject's store",
        description=(
            "Return the canonical store of a subject, creating it if it does not exist yet: your own store "
            "(the default: scope user, subject me), a project's (scope project, subject = project UUID or "
            "slug) or a board's (scope board, subject = section slug or UUID). An existing store is returned "
            "unchanged (`meta.created` false; `name`/`description_md` only apply on creation). Needs the "
            "write right on the subject. Use the returned `data.id` as `id` in the other tools."
        ),
        idempotent=True,
    ),
    Tool(
        name="resolve_memories",
        title="Find a store",
        description=(
            "Find a store without creating it: the canonical store of `scope` + `subject` (default: your own "
            "user store; subject is a handle, a project or section UUID or slug, matched case-insensitively), "
            "or a store by `ref` = '^' followed by its UUID. A store that does not exist and one you cannot "
            "read give the same not_found_error."
        ),
        read_only=True,
        idempotent=True,
    ),
    Tool(
        name="get_memories",
        title="Store details",
        description=(
            "A store's metadata: name, description, visibility, `entry_count`, `generation` (compact_memories, "
            "forget_memories and delete_memories need the current value), `memory_count` (files) and your "
            "`permissions`."
        ),
        read_only=True,
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="update_memories",
        title="Rename or describe a store",
        description=(
            "Owner only: change `name` (1–255 characters), `description_md` (Markdown, at most 1,024 "
            "characters) and, on user stores, `visibility` (private or public: public stores are readable by "
            "anyone). Send only the fields to change. Archived stores are read-only (conflict_error "
            "store_archived)."
        ),
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="list_memories_readers",
        title="List a store's readers",
        description=(
            "Owner only, user stores only: the explicit reader grants, active and revoked, newest first. "
            "Project and board stores follow membership instead (conflict_error membership_governed). Follow "
            "`meta.next_cursor` as `cursor` for more."
        ),
        read_only=True,
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="share_memories",
        title="Grant or revoke a reader",
        description=(
            "Owner only, user stores only: let the user `handle` read this store (`active` true, the default) "
            "or take the grant back (`active` false). Revoking does not hide a store that is public. Project "
            "and board stores follow membership (conflict_error membership_governed)."
        ),
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="delete_memories",
        title="Delete a store",
        description=(
            "Owner only, irreversible: delete the store with all its entries, summaries, files and versions. "
            "Confirm what you are deleting: pass the store's current `entry_count` as `expected_entry_count` "
            "and its `generation` (from get_memories). If either has moved on, nothing is deleted "
            "(conflict_error stale_confirmation). Refused while a session has the store attached."
        ),
        destructive=True,
        argument_help={"id": STORE_ID_HELP},
    ),
]
