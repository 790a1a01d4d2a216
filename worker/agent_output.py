"""The agent's stdout and stderr, logged by the worker as its own records (SPEC §5, docs/worker.md "The log is
one line per record").

The agent writes into two pipes; one thread reads both as they fill and logs every line through the logger
``memories_worker.agent`` (``… INFO memories_worker.agent: stdout: <line>``), so it passes through the
worker's `OneLineFormatter` like every other record: a line the agent prints cannot pass for one of the
worker's (``… INFO memories_worker: item ended … outcome=completed``, helper-100) nor send the terminal an
escape sequence, and the worker's stdout still carries only summary lines.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import selectors
import threading
import time

log = logging.getLogger("memories_worker.agent")

# A line longer than this many characters is logged in pieces of this size (a run of output without a
# newline — a progress bar, a binary dump — must not grow the worker's memory without bound).
MAX_LINE_CHARS = 8192
READ_BYTES = 65536


class AgentOutput:
    """Two pipes for an agent's stdout and stderr, and the thread that logs what arrives on them.

    Use: ``output = AgentOutput()``; pass ``output.stdout`` / ``output.stderr`` (write ends, file descriptors)
    to `subprocess.Popen`; call `started()` right after it (the worker's copies of the write ends are
    closed, so the pipes end when the agent and everything it started have closed theirs); call
    `close(idle, limit)` after the agent's process group is gone. Bytes are decoded as UTF-8 per stream
    (incrementally: a character split across two reads is kept whole); bytes that are not UTF-8 appear as
    ``\\xff``. Lines end at ``\\n`` (a ``\\r\\n`` ending is dropped with it); a line longer than
    `MAX_LINE_CHARS` characters is logged in pieces; an unfinished last line is logged when its pipe ends.

    The thread waits only on the pipes and on the worker's stderr, where the agent wrote directly before:
    an agent is held up by a stalled stderr no more than it was.
    """

    def __init__(self) -> None:
        self._read_out, self.stdout = os.pipe()
        try:
            self._read_err, self.stderr = os.pipe()
        except OSError:
            os.close(self._read_out)
            os.close(self.stdout)
            raise
        self._stop = threading.Event()
        # Since when the pump has been waiting for the pipes with nothing to read, or None while it reads and
        # logs (which a slow stderr can make take seconds: that is no silence; helper-104).
        self._idle_since: float | None = None
        self._stopped_by = ""  # why `close` stopped the reading: "silence" or "limit"
        self._thread = threading.Thread(target=self._pump, name="agent-output", daemon=True)

    def started(self) -> None:
        """The agent has its copies of the write ends: close the worker's and start logging."""
        for fd in (self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._thread.start()

    def close(self, idle: float, limit: float) -> None:
        """Read on until both pipes end (every writer closed them), until nothing has arrived for `idle`
        seconds, or for at most `limit` seconds; log what was read and close the read ends. A backlog the
        agent left in its pipes (a traceback after a burst, a pipe it enlarged) is read while it flows
        (helper-102: a fixed second dropped the tail of a 1 MiB backlog); a process that left the agent's
        process group and holds the pipes ends the reading after `idle` seconds of silence or `limit`
        seconds of chatter, with a WARNING, and its next write fails (EPIPE). Silence is time the reader spent
        waiting on empty pipes, not logging: a slow stderr never reads as silence. Blocks: call it from a
        thread when an event loop must go on meanwhile."""
        if self._thread.ident is None:  # never started (the agent did not start): the write ends are ours
            for fd in (self.stdout, self.stderr):
                with contextlib.suppress(OSError):
                    os.close(fd)
        else:
            deadline = time.monotonic() + limit
            while self._thread.is_alive():
                now, idle_since = time.monotonic(), self._idle_since
                if now >= deadline:
                    self._stopped_by = "limit"
                    break
                if idle_since is not None and now - idle_since >= idle:
                    self._stopped_by = "silence"
                    break
                self._thread.join(0.05)
            self._stop.set()
            self._thread.join()
        for fd in (self._read_out, self._read_err):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _pump(self) -> None:
        names = {self._read_out: "stdout", self._read_err: "stderr"}
        pending = {fd: "" for fd in names}
        decoders = {fd: codecs.getincrementaldecoder("utf-8")("backslashreplace") for fd in names}
        with selectors.DefaultSelector() as selector:
            for fd in names:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map() and not self._stop.is_set():
                if self._idle_since is None:
                    self._idle_since = time.monotonic()
                ready = selector.select(timeout=0.2)
                if ready:
                    self._idle_since = None
                for key, _ in ready:
                    if self._stop.is_set():  # what this pipe holds is the salvage's, below
                        break
                    fd = key.fd
                    try:
                        chunk = os.read(fd, READ_BYTES)
                    except OSError:
                        chunk = b""
                    ended = not chunk
                    text = pending[fd] + decoders[fd].decode(chunk, final=ended)
                    pending[fd] = _log_lines(names[fd], text, ended=ended, stop=self._stop)
                    if ended:
                        selector.unregister(fd)
            still_open = [fd for fd in names if fd in selector.get_map()]
        if not still_open:
            return
        # Stopped with pipes still open: what each holds at hand is read once more, and its last lines logged
        # (a traceback on stderr behind a flood on stdout; helper-106 lost it), the rest of the backlog not.
        for fd in still_open:
            os.set_blocking(fd, False)
            try:
                chunk = os.read(fd, READ_BYTES)
            except OSError:
                chunk = b""
            text = pending[fd] + decoders[fd].decode(chunk, final=True)
            _log_lines(names[fd], "\n".join(text.split("\n")[-SALVAGED_LINES:]), ended=True)
        streams = " and ".join(names[fd] for fd in still_open)
        if self._stopped_by == "silence":
            log.warning(
                "no longer reading the agent's %s: a process that left its process group still holds %s; "
                "what it writes from now on is not logged",
                streams,
                "it" if len(still_open) == 1 else "them",
            )
        else:
            log.warning(
                "stopped reading the agent's %s after the time allowed once the agent ended: a process that "
                "left its process group still writes, or the worker's stderr is too slow for the agent's "
                "output; its last lines at hand were logged, the rest of it is not",
                streams,
            )


# Lines logged of what each pipe still holds when the reading is stopped (`AgentOutput.close`).
SALVAGED_LINES = 20


def _log_lines(stream: str, text: str, *, ended: bool, stop: threading.Event | None = None) -> str:
    """Log the complete lines of `text`, and pieces of `MAX_LINE_CHARS` characters of a longer one; return
    the unfinished rest, or log it too when the stream `ended`. Once `stop` is set nothing more is logged (the
    rest of `text` is dropped): one read can hold 65,536 lines, minutes of a slow stderr (helper-106)."""
    *lines, rest = text.split("\n")
    if ended and rest:
        lines.append(rest)
        rest = ""
    for line in lines:
        line = line.removesuffix("\r")
        for start in range(0, max(len(line), 1), MAX_LINE_CHARS):
            if stop is not None and stop.is_set():
                return ""
            log.info("%s: %s", stream, line[start : start + MAX_LINE_CHARS])
    # A long run without a newline is logged in pieces as it comes; a "\r" right after a piece waits for the
    # "\n" it may belong to (it logged an empty record; helper-106).
    while len(rest.removesuffix("\r")) > MAX_LINE_CHARS:
        if stop is not None and stop.is_set():
            return ""
        log.info("%s: %s", stream, rest[:MAX_LINE_CHARS])
        rest = rest[MAX_LINE_CHARS:]
    return rest
