"""Helpers for the demo tests: run the demo against a live server, and the notes a folder should give."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from demo.changelogs import discover, note_nonce, read_changelog
from demo.runner import DemoOptions, DemoResult, run_demo


def run(url: str, source: Path, **overrides) -> tuple[DemoResult, str]:
    """Run the demo against the server at `url` on `source` (3 packages, 3 agents, 3 mirrored, no progress
    bars, a 1–5 ms stand-in latency unless overridden); return ``(result, printed text)``."""
    options = dict(api_url=url, source=source, packages=3, mirror=3, agents=3, progress=False, llm_latency=(1, 5))
    options.update(overrides)
    out = io.StringIO()
    result = run_demo(DemoOptions(**options), Console(file=out, width=140))
    return result, out.getvalue()


def expected_notes(source: Path) -> dict[str, str]:
    """nonce → note body for every note of every changelog under `source`."""
    notes = {}
    for path in discover(source):
        for entry in read_changelog(path).entries:
            for part, body in enumerate(entry.notes()):
                notes[note_nonce(entry, part)] = body
    return notes
