"""The `rog` command line (SPEC §8): `rog [--api-url URL] [--token T] [--data JSON] GROUP COMMAND …`.

Groups: `memories` (the log, here), `projects`, `boards`, `tokens` and `me` (rog/accounts.py).

Prints the API's JSON on stdout. Errors print the API's error object on stderr and exit non-zero:
2 usage error, 3 the API refused the request (4xx), 4 the API failed (5xx), 5 the API could not be reached,
6 the answer could not be written (stdout closed, disk full).
Stored text is only ever printed as JSON (control characters such as ANSI escapes stay escaped); the CLI
never runs a model and never executes, evaluates or shell-expands stored text.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from config.text import quoted
from rog import accounts, transfer
from rog.client import ApiError, NetworkError, new_idempotency_key
from rog.common import (
    EXIT_API_4XX,
    EXIT_API_5XX,
    EXIT_NETWORK,
    EXIT_OUTPUT,
    Interrupted,
    OpenedOnFirstWrite,
    RogGroup,
    State,
    emit,
    fail_output,
    fail_usage,
)
from rog.prompt import mcp_configuration, render_mcp_text, render_prompt


@dataclass(frozen=True)
class Selection:
    """Which store a command addresses: one of --user/--project/--board/--store, default your own."""

    user: str | None
    project: str | None
    board: str | None
    store: str | None

    def scope_subject(self) -> tuple[str, str]:
        if self.project:
            return "project", self.project
        if self.board:
            return "board", self.board
        return "user", self.user or "me"


def subject_options(func):
    """Add the subject-selection options (mutually exclusive): --user, --project, --board."""
    options = [
        click.option("--board", "board", metavar="SLUG|UUID", help="The store of a forum section (board)."),
        click.option("--project", "project", metavar="UUID|SLUG", help="The store of a project."),
        click.option("--user", "user", metavar="HANDLE", help="The store of a user (default: your own)."),
    ]
    for option in options:
        func = option(func)
    return func


_STORE_OPTION = click.option("--store", "store", metavar="UUID", help="Select the store by id.")


def store_options(func):
    """Add the store-selection options (mutually exclusive) to a command: the subject's, or --store UUID."""
    return subject_options(_STORE_OPTION(func))


def user_store_options(func):
    """Add --user HANDLE and --store UUID only, for what applies to user stores alone (share, readers): a
    project's or board's readers are its members (the API answers 409 `membership_governed`)."""
    func = click.option("--user", "user", metavar="HANDLE", help="The store of a user (default: your own).")(func)
    return _STORE_OPTION(func)


def store_uuid(value: str) -> str:
    """`--store`'s value as the canonical UUID the API routes (any spelling Python's `uuid` reads); anything
    else is a usage error, not the API's 404 for a store that might exist (a tester)."""
    try:
        if not value.isascii():  # uuid.UUID reads other scripts' digits ("١١١…") as hex digits
            raise ValueError(value)
        return str(uuid.UUID(value))
    except ValueError:
        fail_usage(
            f"--store takes a store's id, a UUID (`rog memories list` shows them); got {quoted(value, 80)}. "
            "Select a subject's store with --user, --project or --board."
        )


def selection(user, project, board, store) -> Selection:
    """The store selection of a command; two options, or an empty one, are usage errors. (An empty value
    counted as none given: `--store "$UNSET" note …` wrote to the caller's own store; a tester.)"""
    given = (("--user", user), ("--project", project), ("--board", board), ("--store", store))
    for name, value in given:
        if value is not None and not value.strip():
            fail_usage(f"{name} is empty. Leave it out to select your own store.")
    chosen = [name for name, value in given if value is not None]
    if len(chosen) > 1:
        fail_usage(f"Choose one store: {', '.join(chosen)} given.")
    return Selection(user, project, board, store)


def store_id(state: State, sel: Selection) -> str:
    """The id of the selected store (resolved through the API unless --store is given; never creates)."""
    if sel.store is not None:
        return store_uuid(sel.store)
    return _resolve(state, sel)["id"]


def _resolve(state: State, sel: Selection) -> dict[str, Any]:
    """The store of the selected subject as `GET /memories/resolve` renders it (never creates); a 404 says how
    the store is made."""
    scope, subject = sel.scope_subject()
    # The server's 404 is the same for a store that does not exist yet and one you may not see (privacy);
    # rog can say what to do in the first case, the likely one for your own new store.
    if scope == "user" and subject == "me" and not state.token:
        fail_usage(
            "Your own store needs your token: set ROG_TOKEN or pass --token.",
            hint="Without a token, name a public store: --user HANDLE, --project, --board or --store.",
        )
    option = {"user": "--user", "project": "--project", "board": "--board"}[scope]
    unseen = "No store you can read: it may not exist yet, or you may not have access."
    if scope == "user":  # only its own user makes a user store
        hint = f"{unseen} A user's store is made once by that user, with `rog memories init`."
    else:
        command = f"rog memories init {option} {subject}"
        hint = f"{unseen} If the {scope} exists but has no store yet, `{command}` makes it (needs the write right)."
    params = {"scope": scope, "subject": subject}
    answer = state.call(
        "GET", "memories/resolve", params=params, hint=lambda status, _: hint if status == 404 else None
    )
    return answer["data"]


def write_right_hint(sel: Selection):
    """A `State.call` hint for a write refused for want of the write right (403 `write_right_required`): who
    grants it for the selected store."""
    scope, subject = sel.scope_subject()

    def hint(status: int, error: dict[str, Any]) -> str | None:
        details = error.get("details") if isinstance(error.get("details"), dict) else {}
        if status != 403 or details.get("reason") != "write_right_required" or sel.store is not None:
            return None
        if scope == "project":
            return f"A project's members write its store: an owner runs `rog projects members add {subject} HANDLE`."
        if scope == "board":
            return (
                "A board's posters write its store: an owner runs "
                f"`rog boards members add {subject} HANDLE --role poster`."
            )
        return "Only its owner writes a user store; `rog memories share` grants reading only."

    return hint


def read_text_file(path: str) -> str:
    """The file's bytes decoded as strict UTF-8 (exactly as stored; no newline or whitespace changes); `-` reads
    standard input to its end."""
    if path == "-" and sys.stdin is None:  # started with stdin closed (`<&-`)
        fail_usage("--file - reads standard input, which is closed.")
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail_usage(f"Cannot read {path}: {exc.strerror}.")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail_usage(f"{path} is not valid UTF-8 (byte {exc.start}).")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {json.dumps(repeated)} appears more than once")
    return data


def parse_json_object(raw: str, *, option: str) -> dict[str, Any]:
    """`raw` as a JSON object, strictly, as the server reads bodies (no NaN/Infinity, no number out of a
    double's range, no key twice in one object, not nested past Python's recursion limit); anything else is a
    usage error naming `option`. (NaN, 1e999 and 20,000 nested objects were tracebacks, and a repeated key
    kept its last value silently; testers.)"""
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_no_repeated_keys)
    except (ValueError, RecursionError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        fail_usage(f"{option} is not valid JSON: {reason}.")
    if not isinstance(data, dict):
        fail_usage(f"{option} must be a JSON object.")
    return data


@click.group(cls=RogGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--api-url",
    envvar="ROG_API_URL",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="Memories server (env ROG_API_URL).",
)
@click.option("--token", envvar="ROG_TOKEN", help="API token (env ROG_TOKEN).")
@click.option("--data", "data_json", metavar="JSON", help="A JSON object for commands that take one (memories update).")
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the server to connect, and for each piece of its answer (not the whole command).",
)
@click.version_option("2.0.0", prog_name="rog")
@click.pass_context
def main(ctx: click.Context, api_url: str, token: str | None, data_json: str | None, timeout: float) -> None:
    """rog — the Memories command-line client. Prints JSON; never executes stored text or calls a model.

    Every command takes -q/--query EXPR (JMESPath) to print one part of the answer, e.g.
    `rog projects create apollo -q data.id`. Exit codes: 0 success, 2 usage error, 3 API refused (4xx),
    4 API failed (5xx), 5 network failure, 6 output not written (disk full), 130 interrupted.
    """
    if not 0 < timeout < float("inf"):  # nan, inf, 0 and negatives crashed httpx with a traceback
        fail_usage(f"--timeout must be a positive number of seconds; got {timeout}.")
    ctx.obj = State(api_url=api_url, token=token, data_json=data_json, timeout=timeout)
    ctx.call_on_close(ctx.obj.close)


@main.group()
def memories() -> None:
    """The Memories log: init, list, view, wake, note, recall, zoom, nap, forget, redact, delete, share, readers,
    update, prompt, export, import, imports.

    Select a store with --user HANDLE, --project UUID|SLUG, --board SLUG|UUID or --store UUID; the default
    is your own user store.
    """


@memories.command()
@subject_options
@click.option("--name", help="Name for a newly created store (an existing one keeps its own).")
@click.option("--description", "description_md", help="Markdown description for a newly created store.")
@click.pass_obj
def init(state: State, user, project, board, name, description_md) -> None:
    """Create the canonical store if absent and print it; an existing store is printed as it is.

    To rename an existing store, or change its description: `rog memories update --name … --description …`.
    """
    sel = selection(user, project, board, None)
    scope, subject = sel.scope_subject()
    body = {"scope": scope, "subject": subject}
    if name is not None:
        body["name"] = name
    if description_md is not None:
        body["description_md"] = description_md
    answer = state.call("POST", "memories", json=body)
    emit(answer)
    if (name is not None or description_md is not None) and not (answer.get("meta") or {}).get("created", True):
        # exit 0 (the store is there, as asked), but a silent no-op read as a rename (a tester)
        click.echo(
            "The store already exists: --name and --description apply to a new store only; "
            "use `rog memories update` to change them.",
            err=True,
        )


@memories.command(name="list")
@click.option(
    "--scope", type=click.Choice(["user", "project", "board"]), default=None, help="Only stores of this kind."
)
@click.pass_obj
def list_(state: State, scope: str | None) -> None:
    """List the stores you can read, newest first (every page), each with its id, subject, entry_count,
    generation and your permissions."""
    emit(state.call_all("memories", {"scope": scope}))


@memories.command()
@store_options
@click.pass_obj
def view(state: State, user, project, board, store) -> None:
    """Print one store: name, description, subject, visibility, entry_count, generation (what `delete`
    confirms) and your permissions on it."""
    sel = selection(user, project, board, store)
    if sel.store is not None:
        emit(state.call("GET", f"memories/{store_uuid(sel.store)}"))
    else:
        emit({"data": _resolve(state, sel), "meta": {}})


@memories.command()
@store_options
@click.option("--budget", type=click.IntRange(32, 128), default=None, help="Lines in the cover (32..128, default 32).")
@click.option("--snapshot", type=click.IntRange(0), default=None, help="Entry count to anchor on.")
@click.pass_obj
def wake(state: State, user, project, board, store, budget, snapshot) -> None:
    """Print the compact overview: old history summarised, the newest entries in full."""
    sid = store_id(state, selection(user, project, board, store))
    emit(state.call("GET", f"memories/{sid}/wake", params={"budget": budget, "snapshot": snapshot}))


@memories.command()
@click.argument("text", required=False)
@store_options
@click.option(
    "--file", "file_path", metavar="BODY.md", help="Read the entry from a file, or `-` for stdin (bytes kept exactly)."
)
@click.option("--nonce", metavar="VALUE", help="Idempotency key: a retry with the same text returns the original.")
@click.pass_obj
def note(state: State, text, user, project, board, store, file_path, nonce) -> None:
    """Append one entry (at most 1,024 UTF-8 bytes of Markdown) from TEXT or --file."""
    if (text is None) == (file_path is None):
        fail_usage("Give the entry as TEXT or with --file BODY.md (exactly one).")
    body_md = read_text_file(file_path) if file_path else text
    sel = selection(user, project, board, store)
    sid = store_id(state, sel)
    # The nonce travels as the body's client_nonce — exactly as given, any text the server takes — and also
    # as the Idempotency-Key header when it can (visible ASCII: `client.header_safe`; a fresh key without
    # --nonce), so the client's own retries after a lost answer never store the note twice. (Sent as a
    # header only, `é` crashed rog and " k " became "k": found by a breaker.)
    if nonce == "":
        fail_usage("--nonce must not be empty (leave it out for a fresh one).")
    key = nonce if nonce is not None else new_idempotency_key()
    body = {"body_md": body_md, "client_nonce": key}
    emit(state.call("POST", f"memories/{sid}/note", json=body, idempotency_key=key, hint=write_right_hint(sel)))


@memories.command()
@click.argument("pattern")
@store_options
@click.option("--case-sensitive", is_flag=True, help="Match case exactly (default: case-insensitive).")
@click.option("--limit", type=click.IntRange(1, 100), default=None, help="Matches per request (1..100).")
@click.pass_obj
def recall(state: State, pattern, user, project, board, store, case_sensitive, limit) -> None:
    """Search the original entries with an RE2 PATTERN, newest first; follows every cursor to the end."""
    sid = store_id(state, selection(user, project, board, store))
    params: dict[str, Any] = {
        "pattern": pattern,
        "case_sensitive": "true" if case_sensitive else "false",
        "limit": limit,
    }
    matches: list = []
    pages = 0
    meta: dict = {}
    while True:
        page = state.call("GET", f"memories/{sid}/recall", params=params)
        pages += 1
        data = page.get("data")
        matches.extend(data.get("matches", []) if isinstance(data, dict) else data or [])
        meta = page.get("meta", {})
        cursor = meta.get("next_cursor")
        if not cursor:
            break
        params = {"pattern": pattern, "case_sensitive": params["case_sensitive"], "limit": limit, "cursor": cursor}
    emit(
        {
            "data": {"matches": matches},
            "meta": {"pages": pages, "count": len(matches), "snapshot": meta.get("snapshot")},
        }
    )


@memories.command()
@click.argument("range_", metavar="RANGE")
@store_options
@click.option(
    "--snapshot",
    type=click.IntRange(0),
    default=None,
    help="Read as of this entry count (e.g. a wake's entry_count), so a range reads the same as then.",
)
@click.pass_obj
def zoom(state: State, range_, user, project, board, store, snapshot) -> None:
    """Open RANGE (`a-b`) into its summary and two halves, or print entry `n`."""
    sid = store_id(state, selection(user, project, board, store))
    emit(state.call("GET", f"memories/{sid}/zoom", params={"range": range_, "snapshot": snapshot}))


@memories.command()
@click.argument("range_", metavar="[RANGE]", required=False)
@store_options
@click.option("--snapshot", type=click.IntRange(0), default=None, help="Entry count to anchor on.")
@click.option(
    "--limit",
    type=click.IntRange(1, 16),
    default=None,
    help="Without RANGE: up to this many jobs at once (1..16), each claimed for you; see data.jobs.",
)
@click.option("--file", "file_path", metavar="SUMMARY.md", help="With RANGE: the summary to submit (`-`: stdin).")
@click.option("--generation", type=int, default=None, help="With RANGE: the job's generation.")
@click.option("--digest", default=None, help="With RANGE: the job's source_digest.")
@click.option("--model", default=None, help="With RANGE: the model that wrote the summary (self-declared).")
@click.pass_obj
def nap(
    state: State, range_, user, project, board, store, snapshot, limit, file_path, generation, digest, model
) -> None:
    """Without RANGE: print the next compaction job(s). With RANGE: submit a summary for it.

    Every job nap prints is claimed for you (with write access) for a few minutes: other agents get other
    jobs meanwhile, and your next nap prints the same job again until you submit it. When data.job is
    null but data.complete is false, others hold every ready job: nap again after meta.retry_after
    seconds at the latest.

    \b
    rog memories nap --store ID
    rog memories nap --store ID --limit 4
    rog memories nap 0-1 --store ID --file summary.md --generation 1 --digest SHA --model MODEL_ID
    """
    sel = selection(user, project, board, store)
    if range_ is None:
        if any(v is not None for v in (file_path, generation, digest, model)):
            fail_usage("--file/--generation/--digest/--model submit a summary: give the RANGE too.")
        params = {"snapshot": snapshot, "limit": limit}
        emit(state.call("GET", f"memories/{store_id(state, sel)}/nap", params=params))
        return
    if limit is not None:
        fail_usage("--limit asks for several jobs: it does not go with a RANGE to submit.")
    missing = [
        flag
        for flag, value in (
            ("--file", file_path),
            ("--generation", generation),
            ("--digest", digest),
            ("--model", model),
        )
        if value is None
    ]
    if missing:
        fail_usage(f"Submitting a summary for {range_} needs {', '.join(missing)}.")
    body: dict[str, Any] = {
        "range": range_,
        "generation": generation,
        "source_digest": digest,
        "summary_md": read_text_file(file_path),
        "model": model,
    }
    if snapshot is not None:
        body["snapshot"] = snapshot
    emit(state.call("POST", f"memories/{store_id(state, sel)}/compact", json=body, hint=write_right_hint(sel)))


@memories.command()
@click.argument("range_", metavar="RANGE")
@store_options
@click.option("--generation", type=int, required=True, help="The store's current generation.")
@click.option("--yes", is_flag=True, help="Confirm: invalidate the summary at RANGE and its ancestors.")
@click.pass_obj
def forget(state: State, range_, user, project, board, store, generation, yes) -> None:
    """Owner: invalidate the summary at RANGE and every summary containing it (entries are kept)."""
    if not yes:
        fail_usage("forget invalidates summaries; add --yes to confirm.")
    sid = store_id(state, selection(user, project, board, store))
    emit(state.call("POST", f"memories/{sid}/forget", json={"range": range_, "generation": generation}))


@memories.command()
@click.argument("seq", type=click.IntRange(0))
@store_options
@click.option("--reason", required=True, help="Why (kept in the audit log only; never shown to readers).")
@click.option("--yes", is_flag=True, help="Confirm: the entry's text is destroyed for good.")
@click.pass_obj
def redact(state: State, seq, user, project, board, store, reason, yes) -> None:
    """Owner: redact entry SEQ for good (its text and every summary quoting it); seq, author and time stay."""
    if not yes:
        fail_usage("redact destroys the entry's text for good; add --yes to confirm.")
    sid = store_id(state, selection(user, project, board, store))
    emit(state.call("POST", f"memories/{sid}/entries/{seq}/redact", json={"reason": reason}))


@memories.command()
@store_options
@click.option("--count", type=int, required=True, help="The entry_count you expect (`rog memories view`).")
@click.option("--generation", type=int, required=True, help="The generation you expect.")
@click.option("--yes", is_flag=True, help="Confirm: delete the whole store, its entries, summaries and files.")
@click.pass_obj
def delete(state: State, user, project, board, store, count, generation, yes) -> None:
    """Owner: delete the whole store; refused when entries were appended or summaries forgotten since."""
    if not yes:
        fail_usage("delete removes the whole store for good; add --yes to confirm.")
    sid = store_id(state, selection(user, project, board, store))
    params = {"expected_entry_count": count, "generation": generation}
    emit(state.call("DELETE", f"memories/{sid}", params=params, hint=_stale_confirmation_hint))


def _stale_confirmation_hint(status: int, error: dict[str, Any]) -> str | None:
    """delete's 409 `stale_confirmation` in rog's terms: the server names `expected_entry_count` (the
    query parameter), rog's flag is --count; the answer's details hold the store's current values."""
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    if status != 409 or details.get("reason") != "stale_confirmation":
        return None
    count, generation = details.get("entry_count"), details.get("generation")
    return (
        f"The store holds {count} entries at generation {generation} now (entries were added or summaries "
        f"forgotten). If you still mean to delete it: --count {count} --generation {generation} --yes."
    )


@memories.command()
@click.argument("handle")
@user_store_options
@click.option("--remove", is_flag=True, help="Revoke the grant instead of granting.")
@click.pass_obj
def share(state: State, handle, user, store, remove) -> None:
    """Owner of a user store: grant (or with --remove revoke) read access to HANDLE. A project's or board's
    readers are its members (`rog projects|boards members add`)."""
    sid = store_id(state, selection(user, None, None, store))
    emit(state.call("POST", f"memories/{sid}/share", json={"handle": handle, "active": not remove}))


@memories.command()
@user_store_options
@click.pass_obj
def readers(state: State, user, store) -> None:
    """Owner of a user store: list the explicit reader grants (a project's or board's readers are its
    members: `rog projects|boards members list`)."""
    sid = store_id(state, selection(user, None, None, store))
    emit(state.call("GET", f"memories/{sid}/readers"))


@memories.command()
@store_options
@click.option("--name", help="The store's new name.")
@click.option("--description", "description_md", help="The store's new Markdown description.")
@click.option("--visibility", type=click.Choice(["public", "private"]), help="User stores only.")
@click.option("--data", "local_data", metavar="JSON", help="The fields as one JSON object (like the global --data).")
@click.pass_obj
def update(state: State, user, project, board, store, name, description_md, visibility, local_data) -> None:
    """Owner: change name, description_md or (user stores) visibility; prints the store.

    \b
    rog memories update --name "Apollo notes" --description "What we decided."
    rog memories update --visibility public
    rog --data '{"visibility":"public"}' memories update
    """
    if state.data_json is not None and local_data is not None:
        fail_usage("Give the JSON once: the global --data or update's --data.")
    raw = local_data if local_data is not None else state.data_json
    data: dict[str, Any] = {}
    if raw is not None:
        data = parse_json_object(raw, option="--data")
    flags = {"name": name, "description_md": description_md, "visibility": visibility}
    for field, value in flags.items():
        if value is None:
            continue
        if field in data:
            fail_usage(f"{field} is given twice: in --data and as its own option.")
        data[field] = value
    if not data:
        fail_usage("Nothing to change: give --name, --description, --visibility or --data JSON.")
    sid = store_id(state, selection(user, project, board, store))
    emit(state.call("PATCH", f"memories/{sid}", json=data))


@memories.command()
@store_options
@click.option("-o", "--output", "output", metavar="FILE", help="Write the export here instead of stdout.")
@click.pass_obj
def export(state: State, user, project, board, store, output) -> None:
    """Owner: write the whole store as JSON Lines (docs/export-import.md), e.g. `rog memories export > store.jsonl`.

    A progress bar is drawn on stderr when it is a terminal. Exits non-zero when the stream is cut short.
    -q/--query does not apply: the file is written as it comes.
    """
    if state.query:
        fail_usage("export writes the store's file as it comes; -q/--query does not apply to it.")
    sid = store_id(state, selection(user, project, board, store))
    if output is None and sys.stdout is None:
        fail_output(None)
    try:
        if output is not None:  # `-o ""` (an unset $BACKUP) is a file `open` cannot make, not stdout (helper-101)
            # SIGTERM/SIGHUP as Ctrl-C: the temporary file of a cut export is removed (helper-99)
            opened = OpenedOnFirstWrite(output)
            try:
                with transfer.termination_as_interrupt(), opened as out:
                    transfer.export_store(state.client, sid, out)
            except KeyboardInterrupt:
                opened.close(complete=False)  # one that landed before `close` held interruptions
                if not opened.finished:  # else it came once FILE held the whole export: that is a success
                    raise Interrupted("The export was abandoned; a plain FILE is left as it was.") from None
        else:
            transfer.export_store(state.client, sid, sys.stdout.buffer)
    except transfer.TransferFailed as exc:
        fail_transfer(exc)
    except OSError as exc:  # the file or stdout refused the bytes (a full disk); a closed pipe is click's
        if exc.errno == errno.EPIPE:
            raise
        fail_output(exc, to=output)


def fail_transfer(exc: transfer.TransferFailed) -> NoReturn:
    """Print a failed export/import's error object on stderr and exit with the matching code."""
    emit(exc.body, stream=sys.stderr)
    sys.exit(EXIT_NETWORK if exc.status == 0 else EXIT_API_4XX if exc.status < 500 else EXIT_API_5XX)


@memories.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@subject_options
@click.option("--resume", metavar="IMPORT_ID", help="Continue an import that was interrupted (`rog memories imports`).")
@click.pass_obj
def import_(state: State, file, user, project, board, resume) -> None:
    """Recreate a store from an export FILE here (a new store; authors are matched by handle); FILE `-`
    reads the export from stdin, e.g. piped from another server's `rog memories export`.

    The store goes to the file's user, project or board unless --user/--project/--board names another
    (you must own it). Prints the import with its new store. A refused line aborts the import.
    """
    sel = selection(user, project, board, None)
    params: dict[str, Any] = {}
    if user or project or board:
        params["scope"], params["subject"] = sel.scope_subject()
    try:
        with transfer.termination_as_interrupt(), _import_file(file) as path:
            label = "stdin" if file == "-" else quoted(file)  # a file name in a message is JSON (helper-100)
            result = transfer.import_store(state.client, path, params=params, resume=resume, label=label)
    except transfer.TransferFailed as exc:
        fail_transfer(exc)
    except (ApiError, NetworkError) as exc:  # the --resume lookup
        emit(
            getattr(exc, "body", {"type": "error", "error": {"type": "network_error", "message": str(exc)}}),
            stream=sys.stderr,
        )
        sys.exit(EXIT_NETWORK if isinstance(exc, NetworkError) else EXIT_API_4XX)
    emit({"data": result, "meta": {}})


@contextlib.contextmanager
def _import_file(file: str) -> Iterator[Path]:
    """`file` as a path to import from. An import reads its file more than once — the header, then the lines,
    from a chunk's first line again on a retry, the first lines again for `--resume` — so what can be read only
    once is copied to a temporary file first and removed afterwards: `-` (stdin), and a FIFO or device such
    as `<(…)` (helper-107: `--resume` read its first lines, found nothing left and abandoned the import).
    stdin that is a terminal is a usage error rather than a wait for typed JSON Lines."""
    if file == "-":
        source = sys.stdin.buffer if sys.stdin is not None else None
        if source is None or sys.stdin.isatty():
            fail_usage("import - reads an export from stdin; pipe one in, e.g. `rog memories import - < store.jsonl`.")
        with _spooled(source, "stdin") as path:
            yield path
        return
    if stat.S_ISREG(os.stat(file).st_mode):
        yield Path(file)
        return
    with open(file, "rb") as source, _spooled(source, quoted(file)) as path:
        yield path


@contextlib.contextmanager
def _spooled(source, named: str) -> Iterator[Path]:
    """`source` (a binary stream, `named` in messages) copied to a temporary file; its path, removed after."""
    with tempfile.TemporaryDirectory(prefix="rog-import-") as folder:
        path = Path(folder) / "import.jsonl"
        try:
            with path.open("wb") as spool:
                shutil.copyfileobj(source, spool, 1 << 20)
        except OSError as exc:  # TMPDIR full (was a traceback, helper-95)
            message = (
                f"Could not copy {named} to {quoted(str(path))}: {exc.strerror}. Set TMPDIR to a folder with room "
                "for the export."
            )
            emit({"type": "error", "error": {"type": "output_error", "message": message}}, stream=sys.stderr)
            sys.exit(EXIT_OUTPUT)
        yield path


@memories.command(name="imports")
@click.option("--open", "only_open", is_flag=True, help="Only the imports you can still resume.")
@click.pass_obj
def imports(state: State, only_open: bool) -> None:
    """List your imports, newest first, with where each stands (`next_line`), e.g. to find the IMPORT_ID of an
    interrupted `rog memories import` for --resume. Imports are kept a day after their last chunk."""
    emit(state.call_all("memories/imports", {"status": "open" if only_open else None}))


@memories.command()
@store_options
@click.option("--text", "as_text", is_flag=True, help="Print the instructions as plain text instead of JSON.")
@click.pass_obj
def prompt(state: State, user, project, board, store, as_text) -> None:
    """Print instructions to add to your assistant's project instructions (when to wake, note, recall, nap),
    and the MCP configuration (URL and Authorization header) for Claude Code, Cursor, VS Code and Claude
    Desktop. The token is shown as a placeholder, never your secret."""
    sid = store_id(state, selection(user, project, board, store))
    record = state.call("GET", f"memories/{sid}")["data"]
    text = render_prompt(store=record, selector=f"--store {record['id']}", api_url=state.api_url)
    if as_text:
        sys.stdout.write(text + render_mcp_text(state.api_url))
        return
    emit({"data": {"store_id": record["id"], "prompt": text, "mcp": mcp_configuration(state.api_url)}, "meta": {}})


for command in accounts.COMMANDS:
    main.add_command(command)

# One line each in `--help` listings (click cut the docstrings' first sentences at the terminal's width, mid-word:
# "Print who your token belongs to and its scopes (never the..."; a tester). The full text stays in each
# command's own --help.
SHORT_HELP = {
    ("memories",): "The log: init, list, view, wake, note, recall, nap, …",
    ("memories", "init"): "Create a subject's store if absent; print it.",
    ("memories", "list"): "List the stores you can read.",
    ("memories", "view"): "Print one store: counts, generation, your rights.",
    ("memories", "wake"): "Print a store's compact overview.",
    ("memories", "note"): "Append one entry (at most 1,024 UTF-8 bytes).",
    ("memories", "recall"): "Search the entries with an RE2 pattern.",
    ("memories", "zoom"): "Open a range into its summary and halves.",
    ("memories", "nap"): "Get compaction jobs, or submit a summary.",
    ("memories", "forget"): "Owner: invalidate a summary and those above it.",
    ("memories", "redact"): "Owner: destroy an entry's text for good.",
    ("memories", "delete"): "Owner: delete the whole store.",
    ("memories", "share"): "Owner: grant or revoke a reader (user stores).",
    ("memories", "readers"): "Owner: list the reader grants (user stores).",
    ("memories", "update"): "Owner: change name, description or visibility.",
    ("memories", "export"): "Owner: write the store as JSON Lines.",
    ("memories", "import"): "Recreate a store from an export file.",
    ("memories", "imports"): "List your imports (to resume one).",
    ("memories", "prompt"): "Print assistant instructions and MCP settings.",
    ("me",): "Who your token belongs to, and its scopes.",
    ("tokens",): "Your API tokens: create, list, revoke.",
    ("tokens", "create"): "Create a token (its secret is shown once).",
    ("tokens", "list"): "List your tokens; `current` marks this one.",
    ("projects", "list"): "List the projects you can see.",
    ("projects", "members", "list"): "List the project's memberships.",
    ("projects", "members", "add"): "Owners: add HANDLE, or change their --role.",
    ("projects", "members", "remove"): "Owners: remove HANDLE from the project.",
    ("boards", "list"): "List the boards you can see.",
    ("boards", "members", "list"): "List the board's memberships.",
    ("boards", "members", "add"): "Owners: add HANDLE, or change their --role.",
    ("boards", "members", "remove"): "Owners: remove HANDLE from the board.",
}
for _path, _text in SHORT_HELP.items():
    _command: click.Command = main
    for _name in _path:
        _command = _command.commands[_name]  # a KeyError here: a command was renamed without its entry
    _command.short_help = _text


if __name__ == "__main__":  # pragma: no cover
    main()
