"""What every `rog` command shares: the API state, JSON output (with `--query`), errors and exit codes.

Exit codes: 0 success, 2 usage error, 3 the API refused the request (4xx), 4 the API failed (5xx),
5 the API could not be reached, 6 the answer could not be written (stdout closed, disk full).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn
from urllib.parse import quote

import click
import httpx
import jmespath
from jmespath.exceptions import JMESPathError

from config.text import quoted
from rog.client import ApiError, Client, NetworkError

EXIT_USAGE, EXIT_API_4XX, EXIT_API_5XX, EXIT_NETWORK = 2, 3, 4, 5
EXIT_OUTPUT = 6  # the answer could not be written (stdout closed, disk full)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)


def fail_output(exc: OSError | None, *, to: str | None = None) -> NoReturn:
    """The answer could not be written to stdout or the output file (closed, disk full): say so on stderr, as
    JSON when stderr takes it, and exit 6 (they were tracebacks with exit 1; a tester). A closed pipe
    (`| head`) is not a failure: click exits quietly, as for any command line tool. `to`: the file named by
    the user (`-o FILE`), named in the message."""
    reason = exc.strerror if exc is not None and exc.strerror else "standard output is closed"
    where = f" to {quoted(to)}" if to is not None else ""  # a file name as JSON, as every value in a message
    _say_error({"type": "output_error", "message": f"Could not write the answer{where}: {reason}."})
    sys.exit(EXIT_OUTPUT)


def _say_error(error: dict[str, Any]) -> None:
    """Write ``{"type": "error", "error": error}`` on stderr, when there is one that takes it (never raises)."""
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.write(_json({"type": "error", "error": error}))
            sys.stderr.flush()


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C (or a SIGTERM/SIGHUP taken as one) that a command has answered for: `outcome` says what became
    of its work ("The import was abandoned; nothing was imported.")."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def fail_interrupted(outcome: str | None) -> NoReturn:
    """Say on stderr, as an error object like every other (`{"type": "interrupted", "message": …}`), that the
    command was interrupted and what became of its work (`outcome`; it printed a bare "Interrupted." and,
    for an import, its outcome as plain text before it: helper-100), and exit 130."""
    _say_error({"type": "interrupted", "message": f"Interrupted. {outcome}" if outcome else "Interrupted."})
    sys.exit(EXIT_INTERRUPTED)


def _write(text: str, stream) -> None:
    if stream is None:  # started with stdout closed (`>&-`)
        fail_output(None)
    buffer = getattr(stream, "buffer", None)
    try:
        if buffer is not None:
            buffer.write(text.encode("utf-8"))
            buffer.flush()
        else:
            stream.write(text)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise  # click's main exits quietly on a closed pipe
        fail_output(exc)


# Characters a terminal acts on, breaks lines at or that reorder text, which the JSON encoder writes raw with
# ensure_ascii=False: DEL, the C1 controls (U+0080–U+009F: CSI, OSC…), the line and paragraph separators
# and the bidirectional formatting characters. Escaped as \uXXXX (still valid JSON: they can only occur
# inside strings). C0 controls are the encoder's own escapes.
_TERMINAL_UNSAFE = re.compile("[\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _json(payload: Any) -> str:
    text = json.dumps(payload, ensure_ascii=False, indent=2) + "\n"
    return _TERMINAL_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _plain(text: str) -> bool:
    """Whether `text` may reach a terminal as it is: printable characters, line breaks and tabs only."""
    return text.replace("\n", "").replace("\t", "").isprintable()


def emit(payload: Any, *, stream=None) -> None:
    """Write `payload` as indented JSON (UTF-8; control characters escaped by the JSON encoder).

    On stdout, a command's `--query EXPR` (JMESPath) selects part of it first: a string result is written
    as plain text (so `$(rog … --query data.id)` captures it, and a nap job's prompt reaches a model as the
    text it is, line breaks and all — a tester got it JSON-quoted), anything else as JSON. A string holding
    a control character other than a line break or tab (an escape sequence, a bidi control) is still written
    as JSON, so stored text never reaches a terminal raw.
    """
    if stream is not None:
        _write(_json(payload), stream)
        return
    state = _current_state()
    expression = state.query if state is not None else None
    if expression:
        try:
            payload = jmespath.search(expression, payload)
        except JMESPathError as exc:
            fail_usage(f"--query {quoted(expression, 200)} is not a valid JMESPath expression: {exc}")
        if isinstance(payload, str) and _plain(payload):
            _write(payload if payload.endswith("\n") else payload + "\n", sys.stdout)
            return
    _write(_json(payload), sys.stdout)


def fail_usage(message: str, *, hint: str | None = None) -> NoReturn:
    """Print a `usage_error` object on stderr (with `hint`, what to do, when given) and exit 2."""
    error = {"type": "usage_error", "message": message, **({"hint": hint} if hint else {})}
    emit({"type": "error", "error": error}, stream=sys.stderr)
    sys.exit(EXIT_USAGE)


def fail_click_usage(exc: click.UsageError, *, path: str = "rog") -> NoReturn:
    """click's own usage errors (an unknown option, a bad choice, a missing argument) as rog's JSON
    `usage_error`, like every other error rog prints (they were click's text, so a script reading stderr as
    JSON broke on half of them; a tester). `rog` or a group without a command still prints its help. The
    hint names the command whose help to read: the error's own, else `path` (the command being parsed)."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        exc.show()
        sys.exit(exc.exit_code)
    path = exc.ctx.command_path if exc.ctx is not None else path
    fail_usage(exc.format_message(), hint=f"See `{path} --help`.")


def path_part(value: str) -> str:
    """`value` as one URL path segment: a slug, handle or id can never reach another endpoint.

    Percent-encoding alone is not enough (servers decode `%2F` back to `/` before routing), so a value with
    `/`, or `.`/`..`, is a usage error; everything else is encoded.
    """
    if "/" in value or value in (".", "..") or not value:
        fail_usage(f"{quoted(value, 80)} is not a name or id (no '/', '.' or '..').")
    return quote(value, safe="")


@dataclass
class State:
    """The global options of one `rog` run and its API client."""

    api_url: str
    token: str | None
    data_json: str | None
    timeout: float
    query: str | None = None
    _client: Client | None = None

    @property
    def client(self) -> Client:
        """The API client, made on first use; a token or URL it cannot use is a usage error (exit 2) that
        never prints the token."""
        if self._client is None:
            problem = _url_problem(self.api_url)
            if problem:
                fail_usage(f"--api-url / ROG_API_URL {problem}")
            try:
                self._client = Client(self.api_url, self.token, self.timeout)
            except httpx.InvalidURL as exc:
                fail_usage(f"--api-url / ROG_API_URL is not a URL: {exc}.")
            except ValueError as exc:
                fail_usage(f"--token / ROG_TOKEN: {exc}.")
        return self._client

    def close(self) -> None:
        """Close the API client's connections, if one was made (at the end of every command)."""
        if self._client is not None:
            self._client.close()

    def call(
        self, method: str, path: str, *, hint: Callable[[int, dict], str | None] | None = None, **kwargs
    ) -> dict[str, Any]:
        """One API call; on failure print the error object on stderr and exit with the matching code.
        `hint(status, error)`: what rog knows that the server cannot say (the command to run next), added to
        the error object as `error.hint` when it returns text."""
        try:
            return self.client.request(method, path, **kwargs)
        except ApiError as exc:
            body = exc.body
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                text = (
                    self.credential_hint(exc.status, body)
                    or self.url_path_hint(exc.status, body)
                    or (hint(exc.status, body["error"]) if hint else None)
                )
                if text:
                    body = {**body, "error": {**body["error"], "hint": text}}
            emit(body, stream=sys.stderr)
            sys.exit(EXIT_API_4XX if exc.status < 500 else EXIT_API_5XX)
        except NetworkError as exc:
            error = {"type": "network_error", "message": str(exc), "hint": self.network_hint()}
            emit({"type": "error", "error": error, "api_url": self.api_url}, stream=sys.stderr)
            sys.exit(EXIT_NETWORK)

    def credential_hint(self, status: int, body: dict[str, Any]) -> str | None:
        """What to do about the token when `status` may be its doing: none was sent (401, 403, or a 404 —
        anonymous callers see public stores only, and the server cannot say that a store exists), or the one
        sent was refused (401). Only for a Memories server's answer (it carries a `req_…` request id): a 404
        from another server, or from a wrong URL in front of ours, is no token's doing (a tester). None
        otherwise: then a command's own hint applies."""
        from_memories = str(body.get("request_id") or "").startswith("req_")
        if not self.token and status in (401, 403, 404) and from_memories:
            return "No token was sent: set ROG_TOKEN or pass --token (anonymous callers see public stores only)."
        if status == 401:
            return (
                "The server refused the token (expired, revoked or mistyped): make a new one with "
                "`rog tokens create` and a token that works, or ask your operator (`python manage.py create_token`)."
            )
        return None

    def url_path_hint(self, status: int, body: dict[str, Any]) -> str | None:
        """For a 404 when the API URL has a path: every call lands under it, and a server at its root answers
        each one 404 — the same answer as for a store you may not see, so rog's other hints would mislead
        (`http://127.0.0.1:8195/xyz`, a tester). Not when a Memories server answered from a route it has (its
        404 names what is missing, "Store not found."; an unknown route is a bare "Not found."): then the
        path is right, as on a deployment under a path prefix, and the command's own hint applies (helper-93).
        The path is shown as written in the URL (`/%2e%2e`, not `/..`). None otherwise."""
        path = httpx.URL(self.api_url).raw_path.decode("ascii").partition("?")[0].rstrip("/")
        from_memories = str(body.get("request_id") or "").startswith("req_")
        if status != 404 or not path or (from_memories and body["error"].get("message") != "Not found."):
            return None
        return (
            f"ROG_API_URL / --api-url has the path {path}: rog calls {self.api_url.rstrip('/')}/api/v1/…. If every "
            "command answers 404, the server is likely at the root: drop the path."
        )

    def network_hint(self) -> str:
        """What to check when the server could not be reached."""
        text = f"Is the server running at {self.api_url} (`bin/serve` starts one), and is that URL right?"
        if self.api_url.lower().startswith("https://"):
            text += " A server that speaks plain http needs an http:// URL."
        return text

    def call_all(
        self, path: str, params: dict[str, Any] | None = None, *, hint: Callable[[int, dict], str | None] | None = None
    ) -> dict[str, Any]:
        """GET every page of a list (following `meta.next_cursor`); ``{data: [...], meta: {count, pages}}``."""
        params = dict(params or {})
        rows: list = []
        pages = 0
        while True:
            page = self.call("GET", path, params=params, hint=hint)
            pages += 1
            rows.extend(page.get("data") or [])
            cursor = (page.get("meta") or {}).get("next_cursor")
            if not cursor:
                return {"data": rows, "meta": {"count": len(rows), "pages": pages}}
            params["cursor"] = cursor


def _url_problem(url: str) -> str | None:
    """Why `url` cannot be rog's server root, or None. Judged by httpx's own parser, which the client uses.

    Refused: what does not parse or names a host no resolver takes (``xn--.com``, ``a..b`` crashed with a
    traceback, a tester); a scheme other than http(s) or no host (``127.0.0.1:8000`` was a network error);
    a query or fragment (the API path would land in it: every call a 404); a path ending in /api or /api/v1
    (rog adds that; the SDK's base URL ends in /api: every call a 404, a tester); a user name or password —
    httpx would send them as Basic credentials in place of the token, every call a 401 (a tester; the
    standard library's parser missed a password with ``[`` or a full-width character, a second tester).
    """
    try:
        parsed = httpx.URL(url)
        parsed.host.encode("idna")
    except (httpx.InvalidURL, UnicodeError) as exc:
        return f"is not a URL: {exc}."
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000."
    if parsed.query or parsed.fragment or "?" in url or "#" in url:  # an empty one too: `http://h/?`
        return "must be the server's root, without a query (?…) or fragment (#…)."
    if parsed.userinfo:
        return (
            "holds a user name or password (user:pass@host); rog authenticates with --token / ROG_TOKEN alone "
            "(the URL's would replace it as Basic credentials): remove them."
        )
    path = parsed.path.rstrip("/")
    if path.lower().endswith(("/api", "/api/v1")):  # the SDK's base ends in /api: a likely mistake, every call a 404
        root = str(parsed.copy_with(path=path[: path.lower().rindex("/api")] or "/"))
        return f"must be the server's root, without /api or /api/v1 (rog adds them): {root}"
    return None


def _current_state() -> State | None:
    ctx = click.get_current_context(silent=True)
    return ctx.find_object(State) if ctx is not None else None


def _remember_query(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    state = ctx.find_object(State)
    if state is not None and value:
        state.query = value


def query_option() -> click.Option:
    return click.Option(
        ["-q", "--query"],
        metavar="EXPR",
        expose_value=False,
        callback=_remember_query,
        help="Print only this part of the answer (JMESPath, e.g. data.id); strings print as plain text.",
    )


_PRINTS_AND_EXITS = ("--help", "-h", "--version")


def parse_args_of(parse: Callable[[click.Context, list[str]], list[str]], ctx: click.Context, args: list[str]):
    """A command's own option parsing (`parse`, click's), where click also prints --help and --version: a
    usage error is rog's JSON `usage_error`, and help that cannot be written (a full disk, stdout closed) is
    exit 6 like any other answer (a subcommand's help was a traceback; with stdout closed, help and version
    printed nothing and exited 0; testers)."""
    if sys.stdout is None and any(arg in _PRINTS_AND_EXITS for arg in args):
        fail_output(None)
    try:
        return parse(ctx, args)
    except click.UsageError as exc:
        fail_click_usage(exc, path=ctx.command_path)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise
        fail_output(exc)


class RogCommand(click.Command):
    """A leaf command whose option parsing reports like the rest of rog (`parse_args_of`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return parse_args_of(super().parse_args, ctx, args)


class RogGroup(click.Group):
    """A command group whose every command takes `--query` (and whose subgroups and commands do the same)."""

    group_class = type  # subgroups made with `@group.group()` are RogGroups too
    command_class = RogCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse this group's own options (`parse_args_of`)."""
        return parse_args_of(super().parse_args, ctx, args)

    def invoke(self, ctx: click.Context):
        """Run the command; an argument or variable holding bytes that are not UTF-8 (which the shell passes
        through as lone surrogates) is a usage error, not a traceback (found by a breaker); so is any of
        click's usage errors (`fail_click_usage`); Ctrl-C exits 130 (128 + SIGINT, as shells report it) with an
        error object (`fail_interrupted`), not click's "Aborted!" with 1."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # an unknown subcommand (the subcommands' own options: parse_args_of)
            fail_click_usage(exc, path=ctx.command_path)
        except UnicodeEncodeError:
            fail_usage("An argument, option or variable holds bytes that are not valid UTF-8.")
        except KeyboardInterrupt as exc:  # Ctrl-C, and SIGTERM/SIGHUP where a command takes them so
            fail_interrupted(getattr(exc, "outcome", None))

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        if not isinstance(cmd, click.Group) and not any(p.name == "query" for p in cmd.params):
            cmd.params.append(query_option())
        super().add_command(cmd, name)


# Ctrl-C, and the signals an export takes as one (`rog.transfer.termination_as_interrupt`).
_INTERRUPTIONS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def _interruptions_held():
    """Hold SIGINT, SIGTERM and SIGHUP back for the block: one that arrives meanwhile is noted, and raised
    again when the block ends, for the handler in place before (KeyboardInterrupt, or the default action).

    Python-level handlers, not the thread's signal mask: a signal sent to the process is delivered to any
    thread that does not block it, and Python runs its handler in the main thread at once — a mask set by
    one thread held nothing in a process with other threads (found by the suite under pytest-xdist). Only in
    the main thread (the only one that may set handlers); elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for number in _INTERRUPTIONS:  # noted before it is replaced: a signal between the two is put back right
            previous[number] = signal.getsignal(number)
            if previous[number] != signal.SIG_IGN:  # ignored (`nohup`): it stays ignored
                signal.signal(number, lambda signum, frame: arrived.append(signum))
        yield
    finally:
        for number, handler in previous.items():  # None: one set outside Python, which cannot be put back
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        if arrived:
            signal.raise_signal(arrived[0])


class OpenedOnFirstWrite:
    """A binary file at `path` written by an export (`rog memories export -o`, `manage.py export_store -o`):
    opened by its first write, not before, and — where it is a plain file — replaced only when the export is
    complete, so a failed export never costs the previous file.

    - Nothing happens before the first bytes: a wrong store id or a refused export leaves FILE as it was (it
      was truncated before the request).
    - A plain file — missing, or a writable regular file with one link that the caller owns, in one of the
      caller's groups (any, as root) — is written to a temporary file in the folder `path` really lies in
      (``.<name>.<random>.part``, with the mode, owner and group of the file it replaces, or what `open` would
      give a new file) that is synced and renamed over `path` when the `with` block ends without an
      exception, and removed when it ends with one: an export cut after its first bytes (rog exits 5) leaves
      yesterday's backup whole, not a file without its end line (2026-12-07). When no temporary file can be
      made there (a read-only folder), `write` raises and `path` is left as it was — never written in place.
    - Anything else is written in place, as `open(path, "wb")` writes it, from the first bytes on: through a
      symlink (`/dev/stdout`, `/proc/self/fd/1`), a FIFO or device, a file with hard links (a rename would
      split them), another user's file the caller may write but not own (a rename would take it over), one
      whose group the caller cannot give, and a read-only one (which `open` refuses).
      A first version renamed over every `path`: it replaced the `/dev/stdout` link itself, reset a 0600
      file's mode and split hard links (helper-95). Such a file cut short has no end line, which every
      import refuses.

    Raises OSError from `write` (the file or its folder cannot be written) and from leaving the block (the
    sync or the rename failed; the temporary file is then removed). `finished` is True once a complete
    export is closed (and renamed over `path`): Ctrl-C, SIGTERM and SIGHUP are held during that last step,
    so one that lands then is raised after it, and a caller can tell "interrupted, FILE as it was" from
    "interrupted after the export was whole" (which exited 130 saying the export was abandoned; helper-101).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self.finished = False
        self._file: BinaryIO | None = None
        self._temporary: str | None = None
        self._final = self.path  # where the temporary file is renamed to: `path` in its real folder

    def _replaceable(self) -> tuple[int, int, int] | None:
        """``(mode, uid, gid)`` for a temporary file that may be renamed over `path`, or None: write in place."""
        try:
            found = os.lstat(self.path)
        except FileNotFoundError:
            umask = os.umask(0)  # read it: `open` creates 0666 less the umask
            os.umask(umask)
            return 0o666 & ~umask, os.geteuid(), os.getegid()
        except OSError:
            return None
        root = os.geteuid() == 0
        # A new file must get FILE's owner and group: a group the caller is not in could not be given (and the
        # caller's own might let others read it), so such a file is written in place.
        owned = root or (found.st_uid == os.geteuid() and found.st_gid in {os.getegid(), *os.getgroups()})
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or not owned:
            return None
        if not os.access(self.path, os.W_OK):  # a read-only FILE stays refused: `open` says so (helper-99)
            return None
        return stat.S_IMODE(found.st_mode), found.st_uid, found.st_gid

    def _open(self) -> None:
        """Open `path` in place, or a temporary file beside it (`self._temporary`), as `self._file`."""
        like = self._replaceable()
        head, name = os.path.split(self.path)
        if like is None or not name:  # no name ("", "folder/"): `open` says what is wrong (helper-101)
            # Never with interruptions held: a FIFO without a reader blocks here until one comes (helper-104).
            # Unbuffered: an abandoned export must not flush a buffer into a pipe whose reader stalls, which
            # blocked again after the first signal (helper-105: `timeout`'s one SIGTERM was swallowed).
            self._file = open(self.path, "wb", buffering=0)  # noqa: SIM115 (closed by `close`)
            return
        if not os.path.isdir(head or "."):  # as the kernel sees it: `missing/..` is no folder (ENOENT, as `open`)
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.path)
        # The folder `path` really lies in: `a/link/..` is the parent of the link's target, not `a` (helper-99).
        folder = os.path.realpath(head or ".")
        prefix = "." + os.fsdecode(os.fsencode(name)[:200]) + "."  # a 255-byte name leaves room for the rest
        # Held until `close` knows of the temporary file: one made as a signal landed leaked (helper-102).
        with _interruptions_held():
            try:
                descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".part")
            except OSError as exc:  # never fall back to writing in place: a cut export would cost the old FILE
                reason = f"no temporary file could be made beside it ({exc.strerror}); it is left as it was"
                raise OSError(exc.errno, reason, self.path) from None
            try:
                mode, uid, gid = like
                os.fchmod(descriptor, mode)
                if (uid, gid) != (os.geteuid(), os.getegid()):
                    os.fchown(descriptor, uid, gid)
                self._file = os.fdopen(descriptor, "wb")
            except OSError:
                os.close(descriptor)
                os.unlink(temporary)
                raise
            self._temporary, self._final = temporary, os.path.join(folder, name)

    def write(self, data: bytes) -> int:
        """Write all of `data` (bytes); returns its length. Raises OSError as the file does."""
        if self._file is None:
            self._open()
        view = memoryview(data)
        while view:  # an unbuffered write may take part of it (a pipe, a signal that did not interrupt)
            view = view[self._file.write(view) :]
        return len(data)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self, *, complete: bool = True) -> None:
        """Close the file; a temporary one is renamed over `path` when `complete`, else removed. For a temporary
        file interruptions are held for all of it (a regular file: its flush, sync and rename end): one that
        lands meanwhile is raised when FILE is either whole or as it was. A file written in place is closed
        without holding them — it may be a pipe whose reader stalls (helper-104: only SIGKILL stopped rog).
        Safe to call again (a caller that caught an interruption calls ``close(complete=False)`` to be sure)."""
        if self._file is None:
            return
        with _interruptions_held() if self._temporary is not None else contextlib.nullcontext():
            out, temporary = self._file, self._temporary
            try:
                if complete and temporary is not None:
                    out.flush()
                    os.fsync(out.fileno())  # the backup is on disk before it replaces the previous one
                out.close()
                if complete and temporary is not None:
                    os.replace(temporary, self._final)
                    temporary = None
                self.finished = complete
            finally:
                self._file = self._temporary = None
                if not out.closed:
                    out.close()
                if temporary is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temporary)

    def __enter__(self) -> OpenedOnFirstWrite:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self.close(complete=exc_type is None)
