"""recall (SPEC §4): RE2 over original entries, newest first, bounded pages, signed cursors."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from django.utils import timezone

from memories import selectors
from memories.api import serializers as s
from memories.models import Entry
from tests.factories import ReaderGrantFactory, StoreFactory
from tests.log.conftest import fill, put_summary, url

pytestmark = pytest.mark.django_db

BODIES = [
    "Decision: keep the PostgreSQL schema compatible.",
    "Outcome: the migration ran in 4 minutes.",
    "schema v2 drafted by alice",
    "Lunch was good",
    "TODO: postgres vacuum settings",
    "release 2.0.0 shipped",
]


@pytest.fixture
def notes(private_store):
    return fill(private_store, len(BODIES), body=lambda seq: BODIES[seq])


def recall(client, store, **query):
    return client.get(url(store, "recall"), query)


def seqs(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [match["seq"] for match in response.json()["data"]]


def test_recall_finds_alternatives_newest_first(owner_client, notes):
    assert seqs(recall(owner_client, notes, pattern="PostgreSQL|schema")) == [2, 0]


def test_recall_is_case_insensitive_by_default(owner_client, notes):
    assert seqs(recall(owner_client, notes, pattern="postgresql")) == [0]
    assert seqs(recall(owner_client, notes, pattern="POSTGRES")) == [4, 0]


def test_recall_case_sensitive_true_respects_case(owner_client, notes):
    assert seqs(recall(owner_client, notes, pattern="postgres", case_sensitive="true")) == [4]
    assert seqs(recall(owner_client, notes, pattern="postgres", case_sensitive="false")) == [4, 0]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("^Outcome", [1]),
        ("shipped$", [5]),
        (r"\d+ minutes", [1]),
        ("[0-9]\\.[0-9]\\.[0-9]", [5]),
        ("(draft|shipp)ed", [5, 2]),
        ("(?:lunch|vacuum) (was|settings)", [4, 3]),
        (r"\bv2\b", [2]),
        ("^[A-Z]+:", [4, 1, 0]),
    ],
)
def test_recall_supports_anchors_classes_and_groups(owner_client, notes, pattern, expected):
    assert seqs(recall(owner_client, notes, pattern=pattern)) == expected


def test_recall_returns_author_time_body_and_code_point_spans(owner_client, private_store):
    store = fill(private_store, 1, body=lambda _: "😀 café CAFÉ café")
    match = recall(owner_client, store, pattern="café").json()["data"][0]
    assert match["spans"] == [[2, 6], [7, 11], [12, 16]]
    assert match["body_md"] == "😀 café CAFÉ café" and match["author"] == "owner" and match["created_at"]


def test_recall_searches_entries_never_summaries(owner_client, notes):
    put_summary(notes, "0-1", "a summary mentioning zebras")
    assert seqs(recall(owner_client, notes, pattern="zebra")) == []


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape sequence"),
        ("(?=schema)", "invalid perl operator"),
        ("(?!schema)", "invalid perl operator"),
        ("(?<=a)b", "invalid perl operator"),
        ("(?<!a)b", "invalid perl operator"),
        ("[unclosed", "missing ]"),
        ("(open", "missing )"),
    ],
)
def test_recall_rejects_what_re2_rejects_with_its_reason(owner_client, notes, pattern, reason):
    response = recall(owner_client, notes, pattern=pattern)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and reason in error["message"]
    assert reason in error["details"]["re2_error"]


def test_recall_accepts_a_200_character_pattern_and_rejects_201(owner_client, notes):
    assert recall(owner_client, notes, pattern="a" * 200).status_code == 200
    response = recall(owner_client, notes, pattern="a" * 201)
    assert response.status_code == 400
    assert "201 characters" in response.json()["error"]["message"]


def test_recall_rejects_a_pattern_whose_program_is_too_large(owner_client, notes):
    response = recall(owner_client, notes, pattern="[a-z]{100}x{1000}")
    assert response.status_code == 400
    assert "instructions" in response.json()["error"]["message"]
    assert response.json()["error"]["details"]["limit"] == 1024


def test_recall_counts_pattern_length_in_characters_not_bytes(owner_client, notes):
    assert recall(owner_client, notes, pattern="é" * 200).status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"pattern": ""},
        {"pattern": "x", "case_sensitive": "yes"},
        {"pattern": "x", "case_sensitive": "1"},
        {"pattern": "x", "limit": 0},
        {"pattern": "x", "limit": 101},
        {"pattern": "x", "limit": "ten"},
        {"pattern": "x", "limit": "9" * 50},
        {"pattern": "x", "cursor": "garbage"},
        {"pattern": "x", "cursor": ""},
        {"pattern": "x", "cursor": "a" * 5000},
        {"pattern": "x", "snapshot": 1},
    ],
)
def test_recall_rejects_bad_parameters(owner_client, notes, query):
    response = recall(owner_client, notes, **query)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", ["pattern=a%00b", "pattern=%ED%A0%80", "pattern=x&cursor=%00"])
def test_recall_rejects_nul_and_surrogates_in_the_query(owner_client, notes, raw):
    assert owner_client.get(url(notes, "recall") + "?" + raw).status_code == 400


def follow(client, store, **query) -> tuple[list[int], list[dict]]:
    """Follow next_cursor to the end; returns (matched seqs, page metas)."""
    found, metas, cursor = [], [], None
    while True:
        params = dict(query, **({"cursor": cursor} if cursor else {}))
        response = recall(client, store, **params)
        found += seqs(response)
        metas.append(response.json()["meta"])
        cursor = response.json()["meta"]["next_cursor"]
        if cursor is None:
            return found, metas


def test_recall_pages_through_mostly_empty_pages_to_every_match(owner_client, private_store):
    needles = {7, 300, 301, 777, 999}
    store = fill(private_store, 1000, body=lambda seq: f"needle {seq}" if seq in needles else f"hay {seq}")
    found, metas = follow(owner_client, store, pattern="needle")
    assert found == sorted(needles, reverse=True)
    assert len(metas) == 4  # ceil(1000 / 256) pages
    assert all(meta["examined"] <= 256 for meta in metas)
    assert all(meta["snapshot"] == 1000 for meta in metas)


def test_recall_empty_page_still_has_a_cursor_while_entries_remain(owner_client, private_store):
    store = fill(private_store, 600, body=lambda seq: "needle" if seq == 0 else "hay")
    first = recall(owner_client, store, pattern="needle").json()
    assert first["data"] == [] and first["meta"]["next_cursor"] is not None and first["meta"]["examined"] == 256


def test_recall_limit_stops_a_page_and_the_cursor_resumes_after_the_last_match(owner_client, private_store):
    store = fill(private_store, 50)
    page = recall(owner_client, store, pattern="entry", limit=3).json()
    assert [m["seq"] for m in page["data"]] == [49, 48, 47]
    found, _ = follow(owner_client, store, pattern="entry", limit=7)
    assert found == list(range(49, -1, -1))


def test_a_page_whose_matching_spends_its_cpu_budget_stops_after_that_entry(
    owner_client, private_store, monkeypatch, settings
):
    """A breaker's pattern (`([ab]*)a[ab]{900}c|(a)`) re-scans the rest of a 1 KiB entry for every match,
    about a second of CPU per entry: 256 of them held a thread for minutes after the 503. A page stops once
    its matching used RECALL_PAGE_BUDGET of the thread's CPU, after the entry it is on; the pages still
    find every match once, in order. The thread's clock is faked: each reading is 0.04 s later."""
    settings.RECALL_PAGE_BUDGET = 0.1
    store = fill(private_store, 20, body=lambda seq: f"entry {seq}" if seq % 3 else f"other {seq}")
    ticks = iter(range(10**6))
    monkeypatch.setattr(selectors, "_cpu_seconds", lambda: next(ticks) * 0.04)
    monkeypatch.setattr(selectors, "_wall_seconds", lambda: float("inf"))  # the wall clock always past it

    first = recall(owner_client, store, pattern="entry").json()
    found, metas = follow(owner_client, store, pattern="entry")

    assert first["meta"]["examined"] == 3  # read at 0, budget spent by 0.1: stops after the 3rd (0.12)
    assert [m["seq"] for m in first["data"]] == [19, 17]  # 18 examined, no match
    assert found == [seq for seq in range(19, -1, -1) if seq % 3]
    assert all(1 <= meta["examined"] <= 3 for meta in metas) and metas[-1]["next_cursor"] is None


def test_a_page_whose_every_entry_exceeds_the_budget_still_makes_progress(owner_client, private_store, settings):
    """No budget at all (0): every page examines exactly one entry, and paging still reaches every match."""
    settings.RECALL_PAGE_BUDGET = 0
    store = fill(private_store, 12, body=lambda seq: "needle" if seq in (0, 5, 11) else "hay")
    found, metas = follow(owner_client, store, pattern="needle")
    assert found == [11, 5, 0]
    assert [meta["examined"] for meta in metas] == [1] * 12


def test_recall_snapshot_does_not_move_while_others_append(owner_client, private_store):
    store = fill(private_store, 300, body=lambda seq: f"old match {seq}")
    first = recall(owner_client, store, pattern="match").json()
    assert first["meta"]["snapshot"] == 300
    for i in range(5):
        assert owner_client.post(url(store, "note"), {"body_md": f"new match {i}"}).status_code == 201
    assert [m["seq"] for m in first["data"]] == list(range(299, 199, -1))  # limit 100 stopped the page
    rest, metas = follow(owner_client, store, pattern="match", cursor=first["meta"]["next_cursor"])
    assert rest == list(range(199, -1, -1))
    assert {meta["snapshot"] for meta in metas} == {300}


def test_recall_of_an_empty_store_is_one_empty_page(owner_client, private_store):
    body = recall(owner_client, private_store, pattern="x").json()
    assert body["data"] == [] and body["meta"]["next_cursor"] is None


def test_a_tampered_cursor_is_400(owner_client, private_store):
    store = fill(private_store, 300)
    cursor = recall(owner_client, store, pattern="entry", limit=1).json()["meta"]["next_cursor"]
    tampered = cursor[:-3] + ("AAA" if cursor[-3:] != "AAA" else "BBB")
    response = recall(owner_client, store, pattern="entry", cursor=tampered)
    assert response.status_code == 400 and "cursor" in response.json()["error"]["message"]


def test_a_cursor_replayed_by_another_user_is_400(make_client, owner_client, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    store = fill(private_store, 300)
    cursor = recall(owner_client, store, pattern="entry", limit=1).json()["meta"]["next_cursor"]
    assert recall(make_client(reader), store, pattern="entry", cursor=cursor).status_code == 400


def test_a_cursor_replayed_for_another_store_is_400(owner_client, owner, private_store):
    store = fill(private_store, 300)
    other = fill(StoreFactory(owner=owner, canonical=False), 300)
    cursor = recall(owner_client, store, pattern="entry", limit=1).json()["meta"]["next_cursor"]
    assert recall(owner_client, other, pattern="entry", cursor=cursor).status_code == 400


def test_a_cursor_replayed_with_another_pattern_or_case_flag_is_400(owner_client, private_store):
    store = fill(private_store, 300)
    cursor = recall(owner_client, store, pattern="entry", limit=1).json()["meta"]["next_cursor"]
    assert recall(owner_client, store, pattern="entr", cursor=cursor).status_code == 400
    assert recall(owner_client, store, pattern="entry", case_sensitive="true", cursor=cursor).status_code == 400
    assert recall(owner_client, store, pattern="entry", cursor=cursor).status_code == 200


def test_an_expired_cursor_is_400(owner_client, private_store):
    store = fill(private_store, 300)
    cursor = recall(owner_client, store, pattern="entry", limit=1).json()["meta"]["next_cursor"]
    with override_settings(RECALL_CURSOR_MAX_AGE=-1):
        response = recall(owner_client, store, pattern="entry", cursor=cursor)
    assert response.status_code == 400 and "expired" in response.json()["error"]["message"]


def test_anonymous_recall_of_a_public_store_pages_with_an_anonymous_cursor(anon_client, owner_client, public_store):
    store = fill(public_store, 300)
    cursor = recall(anon_client, store, pattern="entry", limit=1).json()["meta"]["next_cursor"]
    assert recall(anon_client, store, pattern="entry", cursor=cursor).status_code == 200
    assert recall(owner_client, store, pattern="entry", cursor=cursor).status_code == 400


def test_recall_by_a_nonreader_is_identical_to_a_missing_store(stranger_client, notes):
    hidden = recall(stranger_client, notes, pattern="x")
    gone = recall(stranger_client, "00000000-0000-0000-0000-000000000000", pattern="x")
    assert hidden.status_code == gone.status_code == 404
    assert hidden.json()["error"] == gone.json()["error"]


def test_recall_examines_at_most_256_entries_in_one_query(owner_client, private_store, django_assert_max_num_queries):
    store = fill(private_store, 1000)
    recall(owner_client, store, pattern="entry")  # warm-up: token last-use write
    with django_assert_max_num_queries(3):
        page = recall(owner_client, store, pattern="9$", limit=100).json()
    assert page["meta"]["examined"] == 256
    assert Entry.objects.filter(store=store).count() == 1000


def test_recall_runs_two_statements_on_the_first_and_the_next_page(
    owner_client, private_store, django_assert_num_queries
):
    store = fill(private_store, 600)
    recall(owner_client, store, pattern="entry")  # warm-up: token last-use write
    with django_assert_num_queries(2):  # token with store access (one statement), the entries
        first = recall(owner_client, store, pattern="7", limit=100).json()
    with django_assert_num_queries(2):  # the cursor is checked in Python, not against the database
        recall(owner_client, store, pattern="7", cursor=first["meta"]["next_cursor"]).json()


# --------------------------------------------------- fast paths (issue 17) equal the reference ones


def reference_spans(regex, text: str) -> list[list[int]]:
    """google-re2's own code-point spans of a str, each once: what recall returned before issue 17."""
    return [list(span) for span in dict.fromkeys(match.span() for match in regex.finditer(text))]


@pytest.mark.parametrize("pattern", ["", "$", "^", "x*", "a|", r"\b", "é", ".", "e.", r"\w+", "(?s).*", "[^a]"])
@pytest.mark.parametrize(
    "text", ["a", "abc", "axxbxx", "café au lait", "😀 café CAFÉ", "line\nnext\n", "ascii only, then é", "\x7f~"]
)
@pytest.mark.parametrize("case_sensitive", [False, True])
def test_match_spans_equal_re2s_code_point_spans(pattern, text, case_sensitive):
    regex = selectors.compile_pattern(pattern or "(?:)", case_sensitive=case_sensitive)
    assert selectors.match_spans(regex, text) == reference_spans(regex, text)


def matches_of_every_page(store, pattern: str, **query) -> list[list[dict]]:
    pages, cursor = [], None
    while True:
        page = selectors.recall(store=store, caller="1", pattern=pattern, cursor=cursor, **query)
        pages.append(page.matches)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/St_Johns"])
def test_fast_match_rendering_equals_the_serializer(owner_client, private_store, zone):
    bodies = {0: "😀 café CAFÉ café", 1: "plain café", 2: "redact me: café", 3: "no match", 4: "CAFÉ\n" * 3}
    store = fill(private_store, 300, body=lambda seq: bodies.get(seq, f"café {seq}" if seq % 3 else f"tea {seq}"))
    assert owner_client.post(url(store, "entries/2/redact"), {"reason": "test"}).status_code == 200
    whole_second = timezone.now().replace(microsecond=0)
    Entry.objects.filter(store=store, seq__in=[0, 299]).update(created_at=whole_second)  # no ".ffffff"
    store.refresh_from_db()
    with timezone.override(zone):
        pages = matches_of_every_page(store, "café", limit=40) + matches_of_every_page(store, "nothing matches")
        assert len(pages) >= 4 and [] in pages  # cursor pages and empty pages
        assert 2 not in [match["seq"] for page in pages for match in page]  # redacted: never matched
        for matches in pages:
            fast = s.render_recall_matches(matches)
            slow = s.RecallMatchSerializer(matches, many=True).data
            assert fast == slow
            assert json.dumps(fast) == json.dumps(slow)  # the same keys in the same order, the same JSON
    assert s.render_recall_matches([]) == []
