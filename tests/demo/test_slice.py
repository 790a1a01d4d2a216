"""A small slice of the demo against a live server, run once for this module (a run costs seconds):
three generated changelogs (45 entries, one over 1,024 bytes), three agents, then the same run again."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from demo.runner import DemoResult
from memories.models import Entry, Summary
from stores.models import Store
from tests.demo.conftest import CHANGELOGS, write_changelog
from tests.demo.helpers import expected_notes, run

CVE = re.compile(r"CVE-[0-9]{4}-[0-9]+", re.IGNORECASE)  # RE2's \d is ASCII-only, like [0-9]
PACKAGES = sorted(CHANGELOGS)


@dataclass
class Slice:
    """What the module's two runs produced, captured before the test database is flushed."""

    first: DemoResult
    printed: str
    second: DemoResult
    expected: dict[str, str]  # nonce → body
    stored: list[tuple[int, str, str, str]]  # (seq, author handle, nonce, body) after the first run
    entries_after_second: int
    entry_count: int
    live_summaries: int
    summary_models: set[str]


@pytest.fixture(scope="module")
def demo_slice(django_db_setup, django_db_blocker, live_server, tmp_path_factory) -> Slice:
    source = tmp_path_factory.mktemp("doc")
    for package, entries in CHANGELOGS.items():
        write_changelog(source, package, "\n\n".join(entries) + "\n")
    with django_db_blocker.unblock():
        first, printed = run(live_server.url, source)
        store = Store.objects.get(pk=first.store_id)
        entries = Entry.objects.filter(store=store).select_related("author").order_by("seq")
        stored = [(e.seq, e.author.handle, e.client_nonce, e.body_md) for e in entries]
        summaries = Summary.objects.filter(store=store, invalidated_at=None)
        live, models = summaries.count(), set(summaries.values_list("model", flat=True))
        second, _ = run(live_server.url, source)
        return Slice(
            first=first,
            printed=printed,
            second=second,
            expected=expected_notes(source),
            stored=stored,
            entries_after_second=Entry.objects.filter(store=store).count(),
            entry_count=store.entry_count,
            live_summaries=live,
            summary_models=models,
        )


def test_every_parsed_note_is_stored_once_exactly_as_parsed(demo_slice):
    stored = {nonce: body for _, _, nonce, body in demo_slice.stored}
    assert stored == demo_slice.expected
    assert demo_slice.first.parsed_notes == demo_slice.first.notes_created == demo_slice.entry_count == len(stored)


def test_the_long_entry_is_split_into_several_notes(demo_slice):
    assert demo_slice.first.split_entries == 1
    assert demo_slice.first.parsed_notes > demo_slice.first.parsed_entries == 45


def test_each_package_is_written_by_one_agent_and_agents_are_separate_users(demo_slice):
    authors_of: dict[str, set[str]] = {}
    for _, author, nonce, _ in demo_slice.stored:
        authors_of.setdefault(nonce.split(":")[1], set()).add(author)
    assert sorted(authors_of) == PACKAGES and all(len(authors) == 1 for authors in authors_of.values())
    authors = set().union(*authors_of.values())
    assert len(authors) > 1 and authors <= {f"debian-changelogs-agent-{n}" for n in (1, 2, 3)}


def test_an_agent_writes_its_package_oldest_entry_first(demo_slice):
    versions = [body.split(" ", 2)[1] for _, _, _, body in demo_slice.stored if body.startswith("gamma-daemon (")]
    assert versions == [f"(1.{n}-1)" for n in range(1, 41)]


def test_the_store_is_compacted_to_complete_by_the_stand_in(demo_slice):
    n = demo_slice.entry_count
    assert demo_slice.first.complete
    assert demo_slice.live_summaries == n - bin(n).count("1") == demo_slice.first.summaries_created
    assert demo_slice.summary_models == {"stand-in-extractive-v1 (not a model)"}


def test_one_agent_then_all_agents_compact_with_claims_and_nothing_is_resubmitted(demo_slice):
    first = demo_slice.first
    half = first.entry_count // 2
    assert first.baseline_snapshot == half
    assert first.baseline_summaries == half - bin(half).count("1")  # what the half-way snapshot needs
    assert first.baseline_summaries + first.parallel_summaries == first.summaries_created
    assert first.wasted == 0 and first.summaries_already == first.compact_conflicts == 0
    assert first.speedup is not None and first.llm_calls < first.summaries_created  # batches of nap?limit=4
    assert (
        "wasted resubmissions: 0 (0 identical" in demo_slice.printed
        and "speed-up of 3 agents over 1" in demo_slice.printed
    )


def test_the_wake_cover_has_no_missing_line(demo_slice):
    wake = demo_slice.first.wake
    assert wake["complete"] and demo_slice.first.missing_lines == 0
    assert {line["kind"] for line in wake["lines"]} == {"summary", "entry"}
    assert len(wake["lines"]) == 32 and wake["lines"][-1]["range"] == str(demo_slice.entry_count - 1)
    assert "0 missing" in demo_slice.printed


def test_recall_finds_every_cve_with_its_spans(demo_slice):
    expected = {
        (body, tuple((m.start(), m.end()) for m in CVE.finditer(body)))
        for body in demo_slice.expected.values()
        if CVE.search(body)
    }
    matches = demo_slice.first.recall_matches
    assert {(m["body_md"], tuple(tuple(span) for span in m["spans"])) for m in matches} == expected
    assert len(matches) == len(expected)  # no entry twice across pages
    assert "CVE-2024-1234" in demo_slice.printed and "cve-2023-45678" in demo_slice.printed


def test_zoom_shows_a_summary_and_its_two_halves(demo_slice):
    zoom = demo_slice.first.zoom
    assert zoom["line"]["kind"] == "summary" and len(zoom["halves"]) == 2
    assert "zoom range=" in demo_slice.printed


def test_the_sdk_listing_shows_the_mirrored_paths(demo_slice):
    mirror = demo_slice.first.mirror
    assert sorted(mirror.paths) == sorted(mirror.listed_paths) == [f"/debian/{p}/changelog.md" for p in PACKAGES]
    assert sorted(mirror.prefixes) == [f"/debian/{p}/" for p in PACKAGES]
    assert mirror.item_types == {"memory_prefix": 3}
    assert "depth=1): 3 memory_prefix" in demo_slice.printed


def test_every_check_of_the_run_held(demo_slice):
    assert demo_slice.first.ok and len(demo_slice.first.checks) == 7
    assert "every check held" in demo_slice.printed


def test_a_second_run_replays_every_note_and_adds_nothing(demo_slice):
    first, second = demo_slice.first, demo_slice.second
    assert second.store_id == first.store_id and second.ok
    assert (second.notes_created, second.notes_replayed) == (0, first.parsed_notes)
    assert demo_slice.entries_after_second == first.parsed_notes
    assert second.summaries_created == 0 and second.mirror.store_id == first.mirror.store_id
