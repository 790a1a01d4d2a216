"""`rog memories export` and `rog memories import` (SPEC §8b): move a whole store through the HTTP API.

Export streams `GET /memories/{id}/export` to stdout (or `--output`) without holding it in memory and
checks that the stream ended with its end line. Import sends the file to the resumable import endpoints in
chunks of whole lines, resuming after a dropped connection (`GET /memories/imports/{id}` says where), and
abandons the import (`DELETE`) when the server refuses a line. A progress bar is drawn on stderr when it
is a terminal.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import click

from config.text import quoted
from memories.exchange.format import Chain
from rog.client import ApiError, Client, NetworkError, new_idempotency_key
from rog.common import Interrupted

CHUNK_BYTES = 768 * 1024  # under the server's default 1 MiB body ceiling
RETRIES = 5
JSONL = "application/jsonl"


class TransferFailed(Exception):
    """The transfer cannot go on; `body` is the error object to print, `status` the HTTP status (0: network)."""

    def __init__(self, body: dict[str, Any], status: int = 0) -> None:
        super().__init__(body.get("error", {}).get("message", "transfer failed"))
        self.body, self.status = body, status


def _failure(message: str, *, kind: str = "transfer_error", status: int = 0, **extra: Any) -> TransferFailed:
    """A TransferFailed of our own; `status` 0 is a network failure (rog's exit 5), 400 a bad file (exit 3)."""
    return TransferFailed({"type": "error", "error": {"type": kind, "message": message, **extra}}, status)


@contextlib.contextmanager
def _bar(total: int | None, label: str):
    """A click progress bar on stderr when it is a terminal; otherwise a no-op ``update(n)``."""
    if total and sys.stderr.isatty():
        with click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True) as bar:
            yield bar.update
    else:
        yield lambda n: None


def export_store(client: Client, store_id: str, out: BinaryIO) -> dict[str, Any]:
    """Stream the export of `store_id` into `out`; returns the end line (parsed). TransferFailed if cut short."""
    last = b""
    lines = 0
    started = False  # whether any byte of the export arrived: before that, nothing was cut short
    try:
        with client.stream(f"memories/{store_id}/export", accept=JSONL) as response:
            chunks = response.iter_bytes()
            pending = b""
            total = None
            update = None
            with contextlib.ExitStack() as stack:
                for chunk in chunks:
                    started = True
                    out.write(chunk)
                    if total is None:  # the header line tells how many lines follow
                        pending += chunk
                        if b"\n" in pending:
                            header = json.loads(pending.split(b"\n", 1)[0])
                            total = 2 + sum(header.get("counts", {}).values())
                            update = stack.enter_context(_bar(total, "exporting"))
                            pending = b""
                    newlines = chunk.count(b"\n")
                    lines += newlines
                    if update:
                        update(newlines)
                    last = (last + chunk)[-4096:]
    except ApiError as exc:
        raise TransferFailed(exc.body, exc.status) from None
    except NetworkError as exc:
        if not started:  # a dead server or a refused connection ("cut short after 0 lines" said otherwise)
            raise _failure(f"The export could not start: {exc}", kind="network_error") from None
        raise _failure(f"The export was cut short after {lines} lines: {exc}", kind="network_error") from None
    out.flush()
    end = _end_line(last.rstrip(b"\n").rpartition(b"\n")[2])
    if end is None:
        raise _failure(f"The export ended after {lines} lines without its end line: it is incomplete.")
    return end


def _chunks(path: Path, first_line: int) -> Iterator[tuple[int, bytes, int]]:
    """``(first line number, whole lines ≤ CHUNK_BYTES, bytes read so far)`` from line `first_line` on."""
    with path.open("rb") as stream:
        number, start, buffer, size, done = 0, first_line, [], 0, 0
        for raw in stream:
            number += 1
            done += len(raw)
            if number < first_line:
                continue
            line = raw if raw.endswith(b"\n") else raw + b"\n"
            if buffer and size + len(line) > CHUNK_BYTES:
                yield start, b"".join(buffer), done - len(raw)
                start, buffer, size = number, [], 0
            buffer.append(line)
            size += len(line)
        if buffer:
            yield start, b"".join(buffer), done


# More than an end line takes: the line count and the chain's digest.
END_LINE_BYTES = 4096


def _ending_problem(path: Path) -> str | None:
    """What is wrong with how `path` ends (a lowercase phrase), or None: an export's last line is its end line,
    a JSON object of type ``end``, followed by one newline or none — what `export_store` checks of a stream.
    A file cut short (in the middle of a line or at a line's end) or with blank lines after its end line
    (which the server refuses only after the whole upload; helper-107) is found before anything is sent."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        stream.seek(max(0, size - END_LINE_BYTES))
        tail = stream.read()
    if _end_line(tail.removesuffix(b"\n").rpartition(b"\n")[2]) is not None:
        return None
    if _end_line(tail.rstrip(b"\n").rpartition(b"\n")[2]) is not None:
        return "has blank lines after its end line, the export's last"
    return "ends before its end line (its last line is cut short or missing): it is not a whole export"


def _end_line(line: bytes) -> dict[str, Any] | None:
    """`line` parsed when it is an export's end line (a JSON object of type ``end``), else None."""
    try:
        end = json.loads(line)
    except ValueError:
        return None
    return end if isinstance(end, dict) and end.get("type") == "end" else None


def _check_same_file(path: Path, upload: dict[str, Any], label: str) -> None:
    """Raise TransferFailed (status 400: exit 3) when the import `upload` received other lines than `path`'s
    first ones: `--resume` with another file's import id sent the rest of this file after that one's lines,
    or — for a committed import — said "committed" and exited 0 (a tester). Compares the export format's
    chain (`memories.exchange.format.Chain`, every line but the end line) with the server's. `label`: the
    file as the user named it."""
    expected, count = upload.get("chain"), int(upload.get("lines_received") or 0)
    if not expected:  # a server that does not say
        return
    chained = count - (1 if upload.get("status") == "committed" else 0)  # the end line is not chained
    chain, seen = Chain(), 0
    with path.open("rb") as stream:
        for raw in stream:
            if seen == chained:
                break
            chain.update(raw[:-1] if raw.endswith(b"\n") else raw)
            seen += 1
    if seen < chained or chain.state != expected:
        raise _failure(
            f"Import {upload.get('id')} received other lines than the first {count} of {label}: resume it with "
            "the file it was started with.",
            status=400,
        )


def _send(
    client: Client, upload_id: str | None, first: int, body: bytes, params: dict, *, start_key: str | None = None
) -> dict[str, Any]:
    """Send one chunk: the first opens the import, under `start_key` (an `Idempotency-Key` kept for the whole
    import: a start whose answer was lost is replayed by the server on the retry, instead of opening a second
    import while the first holds the file's store id); later ones go to its lines from `first`."""
    if upload_id is None:
        return client.send_bytes(
            "POST", "memories/imports", body, content_type=JSONL, params=params, idempotency_key=start_key
        )["data"]
    path = f"memories/imports/{upload_id}/lines"
    return client.send_bytes("POST", path, body, content_type=JSONL, params={"from_line": first})["data"]


@contextlib.contextmanager
def _interrupt_after_answer() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives while a chunk is in flight until its answer is in, then raise
    KeyboardInterrupt: interrupted mid-request, rog could not know the import the first chunk opened (the
    server went on and left it open, holding the file's store id, while rog said nothing was imported — a
    tester), nor whether the last chunk committed it. A second Ctrl-C interrupts at once. SIGTERM and SIGHUP
    reach it through `termination_as_interrupt` and are held alike. A SIGINT the caller ignored (a background
    job of a script) stays ignored — while SIGTERM is still held (helper-105: skipping the hold for an ignored
    SIGINT let a SIGTERM cut the request and leave the import open). Outside the main thread (no signal
    handlers there) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN

    def hold(signum, frame):
        if ignored and signum == signal.SIGINT:
            return
        if held:
            raise KeyboardInterrupt
        held.append(signum)
        click.echo(
            "Interrupted: waiting for the server's answer to the chunk in flight (Ctrl-C again to quit now).", err=True
        )

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:  # also when the chunk failed (a 503, a network error): its retry must not go out (a tester)
            raise KeyboardInterrupt


@contextlib.contextmanager
def termination_as_interrupt() -> Iterator[None]:
    """Take SIGTERM and SIGHUP (a timeout of cron or systemd, a closed terminal) during an import or an `-o`
    export as Ctrl-C: whatever SIGINT does at that moment runs (`_interrupt_after_answer` holds it while a
    chunk is in flight), so the open import is abandoned on the server, `rog memories import -`'s copy of
    stdin is removed and an export's temporary file too; all were left behind (helper-95, helper-99).
    A signal already ignored (`nohup`, `trap '' HUP`) stays ignored. Outside the main thread (no signal
    handlers there) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):
            raise KeyboardInterrupt
        handler(signum, frame)

    # One that is ignored stays ignored: `nohup rog memories export -o …` outlived its terminal only when
    # writing to stdout (helper-104).
    previous = {
        number: signal.signal(number, forward)
        for number in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(number) != signal.SIG_IGN
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def import_store(
    client: Client, path: Path, *, params: dict, resume: str | None = None, label: str | None = None
) -> dict[str, Any]:
    """Send `path` to the import endpoints; returns the committed import (with its `store`).

    params: scope/subject for the new store (empty: the file's). resume: an open import's id to continue.
    label: the file as messages name it (default `path` as a JSON string; "stdin" for `rog memories import -`).
    Network failures and 5xx answers are retried (RETRIES times, asking the server where to resume); a
    refused chunk aborts the import on the server and raises TransferFailed with the server's error; so does
    a file that ends before its end line or holds no line at all (status 400: rog's exit 3), and Ctrl-C aborts
    it before the KeyboardInterrupt goes on: an open import would hold the file's store id until it idles out
    (`IMPORT_IDLE_SECONDS`). Only giving up on the network leaves it open, its id in the error, for `--resume`.
    """
    upload: dict[str, Any] | None = None
    start_key = new_idempotency_key()
    if resume:
        upload = client.request("GET", f"memories/imports/{resume}")["data"]
        _check_same_file(path, upload, label or quoted(str(path)))
    total = path.stat().st_size
    problem = _ending_problem(path) if total else None
    if problem:
        # Before anything is sent: a file cut in the middle of a line was refused for that line ("not valid
        # UTF-8", "not valid JSON"), and `--resume` with it abandoned the import and its progress (helper-103).
        named = label or quoted(str(path))
        kept = f" Import {resume} is still open: resume it with the whole file." if resume else ""
        raise _failure(f"{named} {problem}; nothing was sent.{kept}", status=400)
    failures = 0
    try:
        with _bar(total, "importing") as update:
            shown = 0
            while upload is None or upload["status"] != "committed":
                start = upload["next_line"] if upload else 1
                try:
                    for first, body, done in _chunks(path, start):
                        with _interrupt_after_answer():
                            upload = _send(
                                client, upload["id"] if upload else None, first, body, params, start_key=start_key
                            )
                        update(max(done - shown, 0))  # `done`: the file offset where this chunk ends
                        shown = max(shown, done)
                        failures = 0
                        if upload["status"] == "committed":
                            break
                    else:
                        if upload is None:  # not one line: nothing was sent, so nothing to abort
                            named = label or quoted(str(path))
                            raise _failure(f"{named} is empty: there is no export to import.", status=400)
                        if upload["status"] != "committed":
                            _abort(client, upload)  # else the open import holds the file's store id for a day
                            raise _failure("The file ended before its end line: nothing was imported.", status=400)
                except ApiError as exc:
                    reason = exc.body.get("error", {}).get("details", {}).get("reason")
                    if reason == "import_offset_mismatch" and upload is not None:
                        upload = client.request("GET", f"memories/imports/{upload['id']}")["data"]
                        continue
                    if exc.status >= 500 and failures < RETRIES:
                        failures += 1
                        time.sleep(min(2**failures, 10))
                        upload = _refresh(client, upload)
                        continue
                    if resume and upload is not None and _refuses_the_file(exc):
                        # A resumed import keeps the lines it had: the refused line is this copy's, and was
                        # abandoned with a day's progress (helper-104: a blank line after the end line).
                        raise TransferFailed(_still_open(exc.body, upload), exc.status) from None
                    _abort(client, upload)
                    raise TransferFailed(exc.body, exc.status) from None
                except NetworkError as exc:
                    if failures >= RETRIES:
                        raise _failure(
                            f"Gave up after {RETRIES} retries: {exc}", kind="network_error", import_id=_id(upload)
                        ) from None
                    failures += 1
                    time.sleep(min(2**failures, 10))
                    upload = _refresh(client, upload)
            update(max(total - shown, 0))
    except KeyboardInterrupt:  # Ctrl-C: an open import would hold the file's store id until it idles out
        raise Interrupted(_interrupted(client, upload)) from None
    return upload


def _refuses_the_file(exc: ApiError) -> bool:
    """Whether the server refused a chunk for what the file holds: a line it names (400 with
    ``details.line``) or a line over the size limit (413) — not the caller's rights or the import's state."""
    if exc.status == 413:
        return True
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return exc.status == 400 and isinstance(details, dict) and isinstance(details.get("line"), int)


def _still_open(body: dict[str, Any], upload: dict[str, Any]) -> dict[str, Any]:
    """The server's error object `body` with a hint that the resumed import `upload` is still open."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return body
    hint = (
        f"Import {upload['id']} is still open with the {int(upload.get('next_line', 1)) - 1} lines it had received: "
        f"correct the file and run the same command again (--resume {upload['id']}); an unfinished import idles out."
    )
    return {**body, "error": {**error, "hint": hint}}


def _interrupted(client: Client, upload: dict[str, Any] | None) -> str:
    """Abandon the open import after a Ctrl-C and say what happened, truthfully: the server is asked where
    the import stands when its delete is refused (a second Ctrl-C during the last chunk: that chunk may
    have committed it meanwhile — a tester was told nothing answered)."""
    abandoned = "The import was abandoned; nothing was imported."
    if upload is not None and upload.get("status") != "committed" and not _abort(client, upload):
        try:
            upload = client.request("GET", f"memories/imports/{upload['id']}")["data"]
        except ApiError as exc:
            if exc.status == 404:
                return abandoned
        except NetworkError:
            pass
        if upload.get("status") != "committed":
            return (
                f"The import could not be abandoned (the server did not take the delete): continue it with "
                f"--resume {upload['id']}, or it idles out (IMPORT_IDLE_SECONDS on the server)."
            )
    if upload is not None and upload.get("status") == "committed":
        return f"The last chunk had committed the import: store {upload.get('store_id')} is there."
    if upload is None:
        return (
            "The server had not answered the first chunk: if it stored it, the open import holds the file's "
            "store id until it idles out (IMPORT_IDLE_SECONDS on the server; a day by default)."
        )
    return abandoned


def _id(upload: dict[str, Any] | None) -> str | None:
    return upload["id"] if upload else None


def _refresh(client: Client, upload: dict[str, Any] | None) -> dict[str, Any] | None:
    """Ask the server where an import stands (None: it was never created, start again)."""
    if upload is None:
        return None
    with contextlib.suppress(NetworkError):
        return client.request("GET", f"memories/imports/{upload['id']}")["data"]
    return upload


def _abort(client: Client, upload: dict[str, Any] | None) -> bool:
    """Abandon an open import (`DELETE`); True when none is left open by it (none was, or the server took
    the delete; a 404: it was gone already), False when the server could not be told."""
    if upload is None or upload.get("status") != "open":
        return True
    try:
        client.request("DELETE", f"memories/imports/{upload['id']}")
    except ApiError as exc:
        return exc.status == 404
    except NetworkError:
        return False
    return True
