"""The real-input demo, end to end (issue 9): Debian changelogs → the Memories log and file memories.

`run_demo(options, console)` does, in order:

1. finds ``<source>/*/changelog.Debian.gz``, picks `packages` of them (seeded shuffle) and parses every
   entry (`demo.changelogs`); entries over 1,024 UTF-8 bytes are cut with the 0041 splitter;
2. sets up — through services, not the API — a project, `agents` users with memberships and one token each;
3. starts gunicorn on a free loopback port (unless `api_url` is given) and, from here on, talks HTTP only:
   ensures the project store (``POST /api/v1/memories``), loads every note with the agents in parallel
   (nonce on every note, a rich progress bar), then compacts to `complete` with the extractive STAND-IN
   summariser (`demo.summariser`; the product never calls a model) paused like an LLM call
   (`llm_latency`): first one agent alone compacts what the half-way snapshot needs (the baseline), then
   all agents together compact the rest, each napping `nap_limit` claimed jobs at a time — so the output
   shows the speed-up of parallel agents and how much LLM work was wasted on identical resubmissions;
4. prints a wake cover, a recall across the whole store (following ``next_cursor`` to the end), a zoom;
5. mirrors `mirror` changelogs as ``/debian/<package>/changelog.md`` through the `anthropic` SDK and
   prints the depth-1 listing of ``/debian/``.

It returns a `DemoResult` with every figure the output shows (the tests assert on it).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from accounts import services as account_services
from demo.agents import Agent
from demo.changelogs import DEFAULT_SOURCE, Changelog, discover, note_nonce, read_changelog, unique_changelogs
from demo.mirror import MIRROR_PREFIX, MirrorResult, mirror_changelogs, sdk_client
from demo.server import gunicorn_server
from demo.summariser import SimulatedLatency, StandInSummariser

DEFAULT_PACKAGES = 30
DEFAULT_AGENTS = 4
DEFAULT_MIRROR = 300
DEFAULT_PATTERN = r"CVE-\d{4}-\d+"
DEFAULT_PROJECT = "debian-changelogs"
DEFAULT_NAP_LIMIT = 4
DEFAULT_LLM_LATENCY_MS = (50.0, 150.0)


@dataclass
class DemoOptions:
    """Demo knobs (the management command's options). `api_url` None: start our own gunicorn.

    packages: changelogs loaded into the log; mirror: changelogs mirrored as file memories (the loaded
    ones first); budget: wake lines (32..128); show: recall matches printed (all are counted);
    progress: show rich progress bars (the command disables them off a terminal); nap_limit: jobs an agent
    naps (and claims) at once, 1..16; llm_latency: ``(low, high)`` milliseconds the stand-in pauses per
    batch, like an LLM call (``(0, 0)``: no pause).
    """

    packages: int = DEFAULT_PACKAGES
    agents: int = DEFAULT_AGENTS
    api_url: str | None = None
    seed: int = 0
    source: Path = DEFAULT_SOURCE
    project: str = DEFAULT_PROJECT
    mirror: int = DEFAULT_MIRROR
    budget: int = 32
    pattern: str = DEFAULT_PATTERN
    show: int = 12
    progress: bool = True
    nap_limit: int = DEFAULT_NAP_LIMIT
    llm_latency: tuple[float, float] = DEFAULT_LLM_LATENCY_MS


@dataclass
class Parsed:
    """The input: the chosen changelogs, entry and note counts, and what the parser skipped."""

    changelogs: list[Changelog]
    entries: int
    notes: int
    split_entries: int
    malformed: int
    skipped_nul: int
    latin1_files: int


@dataclass
class DemoResult:
    """Every figure the demo prints; `ok` is true when every check held."""

    store_id: str = ""
    packages: int = 0
    parsed_entries: int = 0
    parsed_notes: int = 0
    split_entries: int = 0
    notes_created: int = 0
    notes_replayed: int = 0
    note_retries: int = 0
    entry_count: int = 0
    load_seconds: float = 0.0
    summaries_created: int = 0
    summaries_already: int = 0
    compact_conflicts: int = 0
    naps: int = 0
    nap_waits: int = 0
    llm_calls: int = 0
    compact_seconds: float = 0.0
    baseline_snapshot: int = 0
    baseline_summaries: int = 0
    baseline_seconds: float = 0.0
    parallel_summaries: int = 0
    parallel_seconds: float = 0.0
    complete: bool = False
    wake: dict = field(default_factory=dict)
    missing_lines: int = 0
    recall_matches: list[dict] = field(default_factory=list)
    recall_pages: int = 0
    zoom: dict = field(default_factory=dict)
    mirror: MirrorResult | None = None
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    @property
    def wasted(self) -> int:
        """Compacts whose LLM work was thrown away: identical resubmissions (200) and conflicts (409)."""
        return self.summaries_already + self.compact_conflicts

    @property
    def speedup(self) -> float | None:
        """Summaries per second of all agents together over one agent alone (None without both phases)."""
        if not (self.baseline_summaries and self.baseline_seconds and self.parallel_summaries):
            return None
        alone = self.baseline_summaries / self.baseline_seconds
        return (self.parallel_summaries / self.parallel_seconds) / alone if self.parallel_seconds else None


def choose_changelogs(options: DemoOptions) -> tuple[list[Changelog], list[Changelog], int]:
    """``(log changelogs, mirror changelogs, left out)``: every changelog under `source` parsed, copies
    with the same entries counted once (under the first package name in alphabetical order), then a
    seeded shuffle; the log takes the first `packages`, the mirror the first `mirror` (so the loaded
    packages are mirrored first). `left out` counts the copies and the files without entries."""
    changelogs, left_out = unique_changelogs([read_changelog(path) for path in discover(options.source)])
    random.Random(options.seed).shuffle(changelogs)
    return changelogs[: options.packages], changelogs[: options.mirror], left_out


def parse_all(changelogs: list[Changelog]) -> Parsed:
    """Count the entries of `changelogs`, their notes (parts after splitting) and what was skipped."""
    entries = [entry for changelog in changelogs for entry in changelog.entries]
    notes = [len(entry.notes()) for entry in entries]
    return Parsed(
        changelogs=changelogs,
        entries=len(entries),
        notes=sum(notes),
        split_entries=sum(1 for count in notes if count > 1),
        malformed=sum(c.malformed for c in changelogs),
        skipped_nul=sum(c.skipped_nul for c in changelogs),
        latin1_files=sum(1 for c in changelogs if c.encoding != "utf-8"),
    )


def assign(changelogs: list[Changelog], agents: int) -> list[list[Changelog]]:
    """Deal packages to `agents` work lists by a hash of the package name (stable whatever else is chosen).

    A package always goes to the same one of K agents, which writes its entries oldest first, so a re-run
    with the same `agents` — even with more or other packages — sends each note with the same author and
    nonce (a replay). Nonces are scoped to (store, author), so a balancing scheme that moved packages
    between agents would store them again.
    """
    lists: list[list[Changelog]] = [[] for _ in range(agents)]
    for changelog in changelogs:
        slot = int.from_bytes(hashlib.sha256(changelog.package.encode("utf-8")).digest()[:8], "big") % agents
        lists[slot].append(changelog)
    return lists


def set_up_agents(*, project_slug: str, agents: int) -> list[tuple[str, str]]:
    """Project, users, memberships and tokens through services (SPEC §3; not part of the API).

    Returns ``[(handle, token secret)]``; agent 1 owns the project, the others are members. Idempotent
    except for tokens: each run issues new ones (secrets are never stored).
    """
    project, _ = account_services.ensure_project(
        slug=project_slug, name=f"Debian changelogs ({project_slug})", visibility="private"
    )
    issued = []
    for number in range(1, agents + 1):
        handle = f"{project_slug}-agent-{number}"[:64]
        user, _ = account_services.ensure_user(handle=handle, display_name=f"Demo agent {number}")
        account_services.ensure_project_membership(
            project=project, user=user, role="owner" if number == 1 else "member"
        )
        token = account_services.issue_token(user=user, name="demo_real_input")
        issued.append((handle, token.secret))
    return issued


class Demo:
    """One run: holds the options, the console and the result while the steps print as they go."""

    def __init__(self, options: DemoOptions, console: Console):
        self.options = options
        self.console = console
        self.result = DemoResult()
        low, high = options.llm_latency
        self.summariser = SimulatedLatency(StandInSummariser(), low_ms=low, high_ms=high, seed=options.seed)

    # ---- helpers -------------------------------------------------------------------------------

    def progress(self, label: str, unit: str) -> Progress:
        return Progress(
            TextColumn(f"[bold]{label}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.options.progress,
        )

    def heading(self, text: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]{escape(text)}")

    def check(self, name: str, held: bool) -> None:
        self.result.checks[name] = held
        mark = "[green]ok[/]" if held else "[red]FAILED[/]"
        self.console.print(f"  check: {escape(name)} … {mark}")

    @contextmanager
    def server(self) -> Iterator[str]:
        if self.options.api_url:
            yield self.options.api_url.rstrip("/")
            return
        workers = max(2, self.options.agents + 1)
        with ExitStack() as stack:
            with self.console.status(f"starting gunicorn ({workers} workers) on a free loopback port…"):
                url = stack.enter_context(gunicorn_server(workers=workers))
            self.console.print(f"  server: gunicorn at {url} ({workers} workers), stopped at the end")
            yield url

    # ---- steps ---------------------------------------------------------------------------------

    def run(self) -> DemoResult:
        options, console, result = self.options, self.console, self.result
        self.heading("Real input: Debian package changelogs")
        started = time.monotonic()
        chosen, to_mirror, left_out = choose_changelogs(options)
        if not chosen:
            console.print(f"  no */changelog.Debian.gz under {escape(str(options.source))}: nothing to do")
            result.checks["changelogs found"] = False
            return result
        parsed = parse_all(chosen)
        result.packages = len(parsed.changelogs)
        result.parsed_entries, result.parsed_notes, result.split_entries = (
            parsed.entries,
            parsed.notes,
            parsed.split_entries,
        )
        console.print(
            f"  {len(chosen)} packages (seed {options.seed}) from {escape(str(options.source))} "
            f"({left_out} copies of another package's changelog or empty files left out): "
            f"{parsed.entries:,} changelog entries → {parsed.notes:,} notes "
            f"({parsed.split_entries:,} entries over 1,024 bytes split with the 0041 splitter)"
        )
        if parsed.malformed or parsed.skipped_nul or parsed.latin1_files:
            console.print(
                f"  skipped: {parsed.malformed} entries without a trailer, {parsed.skipped_nul} with NUL; "
                f"{parsed.latin1_files} files decoded as Latin-1"
            )
        agents_tokens = set_up_agents(project_slug=options.project, agents=options.agents)
        console.print(
            f"  project '{escape(options.project)}' with {options.agents} agents (separate users and tokens): "
            + ", ".join(handle for handle, _ in agents_tokens)
        )
        with self.server() as base_url:
            agents = [Agent(handle, token, base_url) for handle, token in agents_tokens]
            try:
                self.load(agents, parsed)
                self.compact(agents)
                self.wake(agents[0])
                self.recall(agents[0])
                self.zoom(agents[0])
                self.mirror(base_url, agents_tokens[0][1], to_mirror)
            finally:
                for agent in agents:
                    agent.close()
        self.heading("Result")
        failed = [name for name, held in result.checks.items() if not held]
        console.print("  every check held" if not failed else f"  [red]failed checks: {escape(', '.join(failed))}[/]")
        console.print(f"  demo finished in {time.monotonic() - started:.0f} s")
        return result

    def load(self, agents: list[Agent], parsed: Parsed) -> None:
        result = self.result
        self.heading("Loading notes through POST /api/v1/memories/{id}/note")
        ensured, _ = agents[0].call(
            "POST",
            "memories",
            json={
                "scope": "project",
                "subject": self.options.project,
                "name": "Debian changelogs",
                "description_md": "Release notes of Debian packages, one note per changelog entry (demo).",
            },
        )
        store_id = result.store_id = ensured["data"]["id"]
        before = ensured["data"]["entry_count"]
        self.console.print(f"  project store {store_id} (ensured over HTTP; {before:,} entries before this run)")
        work = assign(parsed.changelogs, len(agents))
        started = time.monotonic()
        with self.progress("loading", "notes") as progress:
            task = progress.add_task("notes", total=parsed.notes)

            def run(agent: Agent, changelogs: list[Changelog]) -> None:
                for changelog in changelogs:
                    for entry in changelog.chronological():
                        for part, body in enumerate(entry.notes()):
                            agent.note(store_id, body, note_nonce(entry, part))
                            progress.advance(task)

            with ThreadPoolExecutor(max_workers=len(agents)) as pool:
                for future in [pool.submit(run, agent, todo) for agent, todo in zip(agents, work, strict=True)]:
                    future.result()
        result.load_seconds = time.monotonic() - started
        result.notes_created = sum(a.load.created for a in agents)
        result.notes_replayed = sum(a.load.replayed for a in agents)
        result.note_retries = sum(a.load.retries for a in agents)
        store, _ = agents[0].call("GET", f"memories/{store_id}")
        result.entry_count = store["data"]["entry_count"]
        rate = parsed.notes / result.load_seconds if result.load_seconds else 0.0
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        for column in ("agent", "created (201)", "replayed (200)", "retries"):
            table.add_column(column, justify="right" if column != "agent" else "left")
        for agent in agents:
            table.add_row(agent.handle, f"{agent.load.created:,}", f"{agent.load.replayed:,}", f"{agent.load.retries}")
        self.console.print(table)
        self.console.print(
            f"  {parsed.notes:,} notes in {result.load_seconds:.1f} s ({rate:,.0f} notes/s); "
            f"store entry_count {result.entry_count:,}"
        )
        self.check(
            "every parsed note stored exactly once (created + replayed = parsed, entry_count = before + created)",
            result.notes_created + result.notes_replayed == parsed.notes
            and result.entry_count == before + result.notes_created,
        )

    def compact(self, agents: list[Agent]) -> None:
        result, store_id, options = self.result, self.result.store_id, self.options
        self.heading("Compacting to complete: one agent alone, then all agents with nap claims")
        low, high = options.llm_latency
        latency = f"paused {low:g}–{high:g} ms per call like an LLM" if high else "no simulated LLM latency"
        self.console.print(
            f"  summariser: {self.summariser.model} — a deterministic extractive STAND-IN for the agents' "
            f"LLMs (first lines of the two children), {latency}; the Memories service itself never calls a "
            f"model. Each nap claims up to {options.nap_limit} jobs (nap?limit={options.nap_limit}) that "
            "the agent summarises in one call; other agents skip claimed jobs."
        )
        pending = self.pending(agents[0])
        half = result.entry_count // 2
        started = time.monotonic()
        with self.progress("compacting", "summaries") as progress:
            task = progress.add_task("summaries", total=pending)
            # The baseline: what the half-way snapshot needs, by one agent; then the rest, by all of them.
            result.baseline_snapshot = half
            before = agents[0].compact.created
            phase = time.monotonic()
            self.race(agents[:1], progress, task, snapshot=half)
            result.baseline_seconds = time.monotonic() - phase
            result.baseline_summaries = agents[0].compact.created - before
            before = sum(a.compact.created for a in agents)
            phase = time.monotonic()
            self.race(agents, progress, task)
            result.parallel_seconds = time.monotonic() - phase
            result.parallel_summaries = sum(a.compact.created for a in agents) - before
        result.compact_seconds = time.monotonic() - started
        result.summaries_created = sum(a.compact.created for a in agents)
        result.summaries_already = sum(a.compact.already for a in agents)
        result.compact_conflicts = sum(a.compact.conflicts for a in agents)
        result.naps = sum(a.compact.naps for a in agents)
        result.nap_waits = sum(a.compact.waits for a in agents)
        result.llm_calls = sum(a.compact.llm_calls for a in agents)
        final, _ = agents[0].call("GET", f"memories/{store_id}/nap")
        result.complete = final["data"]["complete"]
        for label, count, seconds in (
            (f"1 agent alone (what snapshot {half:,} needs)", result.baseline_summaries, result.baseline_seconds),
            (f"{len(agents)} agents together (the rest)", result.parallel_summaries, result.parallel_seconds),
        ):
            rate = f"{count / seconds:,.1f}/s" if seconds and count else "—"
            self.console.print(f"  {label}: {count:,} summaries in {seconds:.1f} s ({rate})")
        speedup = f"{result.speedup:.1f}×" if result.speedup else "n/a (nothing left to compare)"
        self.console.print(
            f"  {pending:,} summaries were pending; written {result.summaries_created:,} (201) in "
            f"{result.compact_seconds:.1f} s with {result.llm_calls:,} summariser calls; speed-up of "
            f"{len(agents)} agents over 1: {speedup}"
        )
        self.console.print(
            f"  wasted resubmissions: {result.wasted:,} ({result.summaries_already:,} identical, 200; "
            f"{result.compact_conflicts:,} conflicts, 409); {result.naps:,} naps, {result.nap_waits:,} of them "
            "found every ready job claimed by another agent and waited"
        )
        self.check("store complete (nap: complete, nothing pending)", result.complete and final["meta"]["pending"] == 0)
        self.check(
            "wasted resubmissions at most 1 % of summaries written",
            result.wasted * 100 <= max(result.summaries_created, 1),
        )

    def pending(self, agent: Agent) -> int:
        """Summaries the store still needs, read from wake (a read: it claims nothing)."""
        body, _ = agent.call("GET", f"memories/{self.result.store_id}/wake")
        compaction = body["data"]["compaction"]
        return compaction["pending"] if compaction else 0

    def race(self, agents: list[Agent], progress: Progress, task, *, snapshot: int | None = None) -> None:
        """Run every agent's nap/compact loop in parallel until the store (or `snapshot`) is complete."""
        with ThreadPoolExecutor(max_workers=len(agents)) as pool:
            futures = [
                pool.submit(
                    agent.compact_until_complete,
                    self.result.store_id,
                    self.summariser,
                    lambda: progress.advance(task),
                    limit=self.options.nap_limit,
                    snapshot=snapshot,
                )
                for agent in agents
            ]
            for future in futures:
                future.result()

    def wake(self, agent: Agent) -> None:
        result = self.result
        self.heading(f"wake (budget {self.options.budget})")
        body, _ = agent.call("GET", f"memories/{result.store_id}/wake", params={"budget": self.options.budget})
        wake = result.wake = body["data"]
        lines = wake["lines"]
        result.missing_lines = sum(1 for line in lines if line["kind"] == "missing")
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
        table.add_column("range", justify="right", no_wrap=True)
        table.add_column("kind", no_wrap=True)
        table.add_column("text (first line)", overflow="ellipsis", no_wrap=True)
        for line in lines:
            text = (line["text"] or "").split("\n", 1)[0]
            extra = f"  [dim]({line['text'].count(chr(10)) + 1} lines)[/]" if line["kind"] == "summary" else ""
            table.add_row(line["range"], line["kind"], escape(text) + extra)
        self.console.print(table)
        covered = _covers(lines, wake["snapshot"])
        self.console.print(
            f"  {len(lines)} lines cover entries 0..{wake['snapshot'] - 1}: "
            f"{sum(1 for ln in lines if ln['kind'] == 'summary')} summaries, "
            f"{sum(1 for ln in lines if ln['kind'] == 'entry')} entries, {result.missing_lines} missing"
        )
        self.check(
            "wake cover has no missing line and covers every entry in order", result.missing_lines == 0 and covered
        )

    def recall(self, agent: Agent) -> None:
        result, pattern = self.result, self.options.pattern
        self.heading(f"recall /{pattern}/ across the whole store (following next_cursor to the end)")
        params: dict = {"pattern": pattern}
        examined = 0
        while True:
            body, _ = agent.call("GET", f"memories/{result.store_id}/recall", params=params)
            result.recall_pages += 1
            result.recall_matches.extend(body["data"])
            examined += body["meta"]["examined"]
            cursor = body["meta"]["next_cursor"]
            if not cursor:
                break
            params = {"pattern": pattern, "cursor": cursor}
        matches = result.recall_matches
        found = [m["body_md"][a:b] for m in matches for a, b in m["spans"]]
        for match in matches[: self.options.show]:
            spans = ", ".join(f"[{a},{b}) {escape(match['body_md'][a:b])}" for a, b in match["spans"])
            header = escape(match["body_md"].split("\n", 1)[0][:70])
            self.console.print(f"  #{match['seq']:<6} {escape(match['author'])}  {header}")
            self.console.print(f"          spans: {spans}")
        if len(matches) > self.options.show:
            self.console.print(f"  … {len(matches) - self.options.show:,} more matching entries")
        self.console.print(
            f"  {len(matches):,} matching entries, {len(found):,} matches ({len(set(found)):,} distinct), "
            f"{examined:,} entries examined in {result.recall_pages} pages"
        )
        self.check("recall examined every entry of its snapshot", examined == result.entry_count)

    def zoom(self, agent: Agent) -> None:
        result = self.result
        summaries = [line for line in result.wake.get("lines", []) if line["kind"] == "summary"]
        if summaries:
            target = summaries[-1]["range"]  # the newest summary in the cover: recent, and its halves are small
        elif result.entry_count >= 2:
            size = 1 << (result.entry_count.bit_length() - 1)  # small store: wake shows entries only
            target = f"0-{size - 1}"
        else:
            self.heading("zoom")
            self.console.print("  (a store needs two entries before any range has a summary)")
            return
        self.heading(f"zoom range={target}")
        body, _ = agent.call("GET", f"memories/{result.store_id}/zoom", params={"range": target})
        zoom = result.zoom = body["data"]
        for label, line in [("summary", zoom["line"])] + [(f"half {i + 1}", h) for i, h in enumerate(zoom["halves"])]:
            self.console.print(f"  [bold]{label}[/] {line['range']} ({line['kind']})")
            for text_line in (line["text"] or "").split("\n")[:6]:
                self.console.print(f"    {escape(text_line)}", overflow="ellipsis", no_wrap=True)
        self.check("zoom returned the range's summary and its two halves", len(zoom["halves"]) == 2)

    def mirror(self, base_url: str, token: str, changelogs: list[Changelog]) -> None:
        if not changelogs:
            return
        self.heading(f"Mirror {len(changelogs)} changelogs as file memories through the anthropic SDK")
        client = sdk_client(base_url, token)
        started = time.monotonic()
        try:
            with self.progress("mirroring", "files") as progress:
                task = progress.add_task("files", total=len(changelogs))
                mirrored = mirror_changelogs(
                    client,
                    changelogs,
                    store_name=f"Debian changelogs mirror ({self.options.project})",
                    workers=self.options.agents,
                    on_file=lambda: progress.advance(task),
                )
        finally:
            client.close()
        self.result.mirror = mirrored
        self.console.print(
            f"  memory store {mirrored.store_id} '{escape(mirrored.store_name)}': wrote {len(mirrored.paths)} "
            f"paths in {time.monotonic() - started:.1f} s ({len(mirrored.truncated)} cut after the last whole "
            "entry under 102,400 bytes)"
        )
        self.console.print(
            f'  memories.list(path_prefix="{MIRROR_PREFIX}", depth=1): '
            + ", ".join(f"{count} {kind}" for kind, count in sorted(mirrored.item_types.items()))
        )
        for prefix in mirrored.prefixes[:8]:
            self.console.print(f"    {escape(prefix)}")
        if len(mirrored.prefixes) > 8:
            self.console.print(f"    … {len(mirrored.prefixes) - 8} more prefixes")
        self.console.print(
            f'  memories.list(path_prefix="{MIRROR_PREFIX}"): {mirrored.listed_memories} memories, '
            f"{mirrored.listed_bytes:,} bytes"
        )
        wanted = {f"{MIRROR_PREFIX}{c.package}/" for c in changelogs}
        self.check("SDK listing shows every mirrored package as a prefix", wanted <= set(mirrored.prefixes))


def _covers(lines: list[dict], snapshot: int) -> bool:
    """Whether wake `lines` cover ``[0, snapshot)`` exactly, in order (ranges ``n`` or ``a-b``)."""
    position = 0
    for line in lines:
        start, _, end = line["range"].partition("-")
        first, last = int(start), int(end or start)
        if first != position:
            return False
        position = last + 1
    return position == snapshot


def run_demo(options: DemoOptions, console: Console | None = None) -> DemoResult:
    """Run the whole demo (see the module docstring) and return its figures; prints to `console`.

    Raises ServerError when the embedded gunicorn does not start, rog ApiError/NetworkError or the SDK's
    APIError when the API answers something the demo cannot handle (every such answer is a bug to report).
    """
    return Demo(options, console or Console()).run()
