"""MCP tools for the Memories log (SPEC §4): note, wake, nap, compact, recall, zoom, forget, redact.

A tool is a view by another name: each entry names the REST operation (its operationId) that performs
it; `config.mcp_tools` derives the input and output schemas from that operation's serializers and runs
the call through its view, so every rule (access, limits, nonces, generations, digests) is the REST one.
A new log operation becomes a tool by adding one `Tool` here.
"""

from __future__ import annotations

from config.mcp_tools import Tool
from stores.mcp import STORE_ID_HELP

TOOLS = [
    Tool(
        name="note_memories",
        title="Append an entry",
        description=(
            "Append one Markdown entry to the store's log: 1 to 1,024 UTF-8 bytes, stored exactly as sent "
            "(split longer text into several notes). Entries are never edited; to correct one, note a new "
            "entry that names the earlier `seq`. Tool calls can be retried by your host, so always send a "
            "`client_nonce`: generate a unique one (for example a UUID) once per note and reuse it on every "
            "retry of that note. A retry with the same nonce and text returns the original entry "
            "(`meta.replayed` true) instead of appending twice; the same nonce with other text is "
            "conflict_error nonce_conflict. Needs write access."
        ),
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="wake_memories",
        title="Overview of the log",
        description=(
            "Read the whole log as at most `budget` lines (32–128, default 32), oldest first: older history "
            "as summaries of aligned ranges, the newest entries one by one. Call it when you start a task. A "
            "line of kind `missing` is history that has no summary yet (`data.complete` false; "
            "`data.compaction` says how many are pending): help with nap_memories and compact_memories, or "
            "open it with zoom_memories. Pass `snapshot` (an entry count) to read the log as it was."
        ),
        read_only=True,
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="nap_memories",
        title="Next compaction job",
        description=(
            "Get the next compaction job, if any: `data.job` holds a `range`, its two `children` (entries or "
            "summaries, with their text), the store's `generation`, a `source_digest` and a `prompt`. "
            "Summarise the two children with your own model into at most 1,024 UTF-8 bytes as the prompt "
            "says, then submit with compact_memories (range, generation, source_digest, summary_md, model). "
            "`data.complete` true means there is nothing to summarise. The server never calls a model. "
            "With write access the job is claimed for you (`claimed_until`), so parallel agents never get "
            "the same job; calling again returns your own claim. Pass `limit` (1–16) to claim up to that "
            "many jobs at once in `data.jobs` and summarise them in one model call. When every ready job "
            "is claimed by others, `data.job` is null, `data.complete` false and `meta.retry_after` "
            "(seconds) says when to try again; a claim you abandon simply lapses."
        ),
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="compact_memories",
        title="Submit a summary",
        description=(
            "Store the summary of one range from nap_memories: pass the job's `range`, `generation` and "
            "`source_digest` unchanged, your `summary_md` (1–1,024 UTF-8 bytes) and the id of the model that "
            "wrote it. conflict_error stale_generation or stale_digest means the log changed: call "
            "nap_memories again. Submitting the same summary again is harmless (`meta.created` false). "
            "`meta.complete`/`meta.pending` say how much is left. Needs write access."
        ),
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="recall_memories",
        title="Search the original entries",
        description=(
            "Search the original entries (never summaries), newest first, with an RE2 regular expression "
            "(at most 200 characters; no backreferences or lookaround). Case-insensitive unless "
            "`case_sensitive` is true (a JSON boolean). Each match has `seq`, `author`, `created_at`, "
            "`body_md` and `spans` (code-point offsets). One call examines at most 256 entries: a page can be "
            "empty while more remain, so keep calling with `meta.next_cursor` as `cursor` (same pattern and "
            "case flag) until it is null."
        ),
        read_only=True,
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="zoom_memories",
        title="Open a range",
        description=(
            "Read one entry (`range` 'n', for example '17') or open an aligned range ('a-b' of size 2, 4, 8, "
            "…, for example '16-31'): its own summary line and its two halves, which you can zoom into in "
            "turn. Use it on wake lines to get from a summary down to the original entries."
        ),
        read_only=True,
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="forget_memories",
        title="Discard summaries",
        description=(
            "Owner only: invalidate the summary of `range` and every summary above it (entries are never "
            "touched), for example when a summary is wrong. Pass the store's current `generation`; it is "
            "incremented, and the invalidated ranges are returned. Compaction rebuilds them."
        ),
        destructive=True,
        argument_help={"id": STORE_ID_HELP},
    ),
    Tool(
        name="redact_memories_entry",
        title="Redact an entry",
        description=(
            "Owner only (project and board owners too): remove the text of entry `seq` for good, for example "
            "when it leaked a secret or someone's private data. The entry keeps its seq, author, time and "
            "size; its `body_md` becomes null, every summary over it loses its text, live summaries over it "
            "are invalidated and the store's `generation` goes up (compaction rebuilds them from what "
            "remains). `reason` (required) goes to the audit log only, never to readers. Irreversible; "
            "redacting again returns the entry unchanged (`meta.changed` false)."
        ),
        destructive=True,
        idempotent=True,
        argument_help={"id": STORE_ID_HELP},
    ),
]
