"""A deterministic, extractive STAND-IN for the agents' LLM summariser. Demo and tests only.

The product never calls a model (SPEC §4 nap/compact): agents summarise with their own LLMs and submit the
text. This demo has no model, so `StandInSummariser` plays that part by *extracting* lines, never writing
new prose: for two entries it keeps each entry's header line (``pkg (version) dist; urgency=…``); for two
summaries it keeps the leading lines of each child, half the byte budget each. Same job in, same text out,
so parallel agents that race on one job submit identical summaries (the server answers 200, not 409).
Its `model` id says what it is: ``stand-in-extractive-v1 (not a model)``.

`SimulatedLatency` wraps it to take as long as an LLM call would (a random pause per batch of jobs), so the
demo and the tests can show what parallel agents gain when the summarising, not the server, is the cost.
"""

from __future__ import annotations

import random
import threading
import time

from legacy.splitting import split_document

STAND_IN_MODEL = "stand-in-extractive-v1 (not a model)"
SUMMARY_MAX_BYTES = 1024
_ELLIPSIS = "…"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _first_line(text: str) -> str:
    """The first non-blank line of `text` without trailing whitespace ("(empty)" if none)."""
    for line in text.split("\n"):
        if line.strip():
            return line.rstrip()
    return "(empty)"


def _trim(line: str, max_bytes: int) -> str:
    """`line` cut to at most `max_bytes` UTF-8 bytes at a grapheme boundary, with "…" when cut."""
    if _size(line) <= max_bytes:
        return line
    return split_document(line, limit=max(4, max_bytes - _size(_ELLIPSIS)))[0] + _ELLIPSIS


def _sample_lines(lines: list[str], max_bytes: int) -> list[str]:
    """An evenly spaced, order-keeping sample of `lines` that fits in `max_bytes` joined by newlines.

    All lines when they fit; otherwise the largest k for which lines ``⌊i·n/k⌋`` (i < k) fit; at least the
    first line, trimmed.
    """
    if not lines:
        return []
    if _size("\n".join(lines)) <= max_bytes:
        return lines
    count = len(lines)
    for k in range(count - 1, 0, -1):
        sample = [lines[i * count // k] for i in range(k)]
        if _size("\n".join(sample)) <= max_bytes:
            return sample
    return [_trim(lines[0], max_bytes)]


class StandInSummariser:
    """Extractive stand-in: ``summarise(job) -> summary_md`` (1..1,024 UTF-8 bytes). Not a model.

    job: a `nap` job (SPEC §4) with exactly two `children`, each ``{range, kind: "entry"|"summary", text}``.
    """

    model = STAND_IN_MODEL

    def __init__(self, *, max_bytes: int = SUMMARY_MAX_BYTES):
        self.max_bytes = max_bytes

    def summarise_all(self, jobs: list[dict]) -> list[str]:
        """The summary of each job of a `nap?limit=` batch, in order (what one LLM call would return)."""
        return [self.summarise(job) for job in jobs]

    def summarise(self, job: dict) -> str:
        """The summary text for `job`: extracted lines of its two children, at most `max_bytes` bytes."""
        left, right = job["children"]
        if left["kind"] == "entry":
            half = (self.max_bytes - 1) // 2  # one newline joins the two header lines
            return "\n".join(_trim(_first_line(child["text"]), half) for child in (left, right))
        lines = [line for child in (left, right) for line in child["text"].split("\n") if line.strip()]
        return "\n".join(_sample_lines(lines, self.max_bytes))


class SimulatedLatency:
    """A summariser that pauses like an LLM call: uniform ``low_ms..high_ms`` milliseconds per batch.

    Wraps `inner` (``summarise_all(jobs)`` and `model`); one pause per `summarise_all` call, whatever the
    batch size (an agent sends a `nap?limit=K` batch in one call). Thread-safe; `seed` fixes the pauses;
    `paused` is the total of the pauses so far (seconds).
    """

    def __init__(self, inner, *, low_ms: float, high_ms: float, seed: int = 0):
        if not 0 <= low_ms <= high_ms:
            raise ValueError("latency: need 0 <= low_ms <= high_ms")
        self.inner, self.low_ms, self.high_ms = inner, low_ms, high_ms
        self.model = inner.model
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.paused = 0.0

    def summarise_all(self, jobs: list[dict]) -> list[str]:
        with self._lock:
            pause = self._random.uniform(self.low_ms, self.high_ms) / 1000
            self.paused += pause
        time.sleep(pause)
        return self.inner.summarise_all(jobs)
