"""wake (SPEC §4): the cover over the API, missing lines, snapshots, constant query count."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories.models import Entry
from tests.log.conftest import compact_all, fill, put_summary, url

pytestmark = pytest.mark.django_db


def wake(client, store, **query):
    response = client.get(url(store, "wake"), query)
    assert response.status_code == 200, response.json()
    return response.json()["data"]


def test_wake_of_an_empty_store_has_no_lines_and_is_complete(owner_client, private_store):
    data = wake(owner_client, private_store)
    assert data["lines"] == [] and data["complete"] is True and data["compaction"] is None
    assert data["snapshot"] == 0 and data["budget"] == 32


def test_wake_opens_a_small_store_entry_by_entry(owner_client, filled_store):
    data = wake(owner_client, filled_store)
    assert [line["range"] for line in data["lines"]] == [str(seq) for seq in range(8)]
    first = data["lines"][0]
    assert first["kind"] == "entry" and first["text"] == "entry 0" and first["author"] == "owner"
    assert first["seq"] == 0 and first["created_at"]


def test_wake_marks_blocks_without_a_summary_as_missing_and_reports_compaction(owner_client, private_store):
    store = fill(private_store, 100)
    data = wake(owner_client, store)
    labels = [line["range"] for line in data["lines"]]
    assert labels[:4] == ["0-63", "64-67", "68-69", "70-71"]
    assert labels[4:] == [str(seq) for seq in range(72, 100)]
    assert [line["kind"] for line in data["lines"][:4]] == ["missing"] * 4
    assert all(line["text"] is None for line in data["lines"][:4])
    assert data["complete"] is False
    assert data["compaction"]["pending"] == 100 - 3  # N - popcount(N), none built yet
    assert data["compaction"]["message"].startswith("97 summaries are missing; call nap")


def test_one_missing_summary_is_said_in_the_singular(owner_client, private_store):
    data = wake(owner_client, fill(private_store, 2))
    assert data["compaction"]["pending"] == 1
    assert data["compaction"]["message"].startswith("1 summary is missing; call nap")  # not "1 summaries are"


def test_wake_summary_lines_carry_model_and_the_spanned_entries_timestamps(owner_client, private_store):
    store = fill(private_store, 100)
    put_summary(store, "64-67", "four entries")
    data = wake(owner_client, store)
    line = data["lines"][1]
    entries = dict(Entry.objects.filter(store=store, seq__in=[64, 67]).values_list("seq", "created_at"))
    assert line["kind"] == "summary" and line["text"] == "four entries" and line["model"] == "test-model"
    assert line["first_at"] == entries[64].isoformat().replace("+00:00", "Z")
    assert line["last_at"] == entries[67].isoformat().replace("+00:00", "Z")
    assert data["compaction"]["pending"] == 97 - 1


def test_wake_after_full_compaction_has_no_missing_line(owner_client, private_store):
    store = fill(private_store, 45)
    compact_all(owner_client, store)
    data = wake(owner_client, store, budget=40)
    assert data["complete"] is True and data["compaction"] is None
    assert all(line["kind"] != "missing" for line in data["lines"])
    assert len(data["lines"]) == 40


@pytest.mark.parametrize("budget", [32, 33, 64, 100, 128])
def test_wake_respects_the_budget_and_tiles_the_snapshot(owner_client, private_store, budget):
    store = fill(private_store, 1000)
    lines = wake(owner_client, store, budget=budget)["lines"]
    assert len(lines) == budget
    position = 0
    for line in lines:
        start, _, end = line["range"].partition("-")
        assert int(start) == position
        position = int(end or start) + 1
    assert position == 1000


def test_wake_at_a_snapshot_ignores_later_entries(owner_client, filled_store):
    fill(filled_store, 8)
    data = wake(owner_client, filled_store, snapshot=5)
    assert data["snapshot"] == 5 and data["entry_count"] == 16
    assert [line["range"] for line in data["lines"]] == ["0", "1", "2", "3", "4"]
    assert data["compaction"]["pending"] == 5 - 2


def test_wake_pending_at_an_old_snapshot_counts_only_summaries_inside_it(owner_client, private_store):
    store = fill(private_store, 16)
    compact_all(owner_client, store)  # 15 summaries
    fill(store, 16)
    assert wake(owner_client, store, snapshot=16)["complete"] is True
    assert wake(owner_client, store, snapshot=12)["complete"] is True
    assert wake(owner_client, store)["compaction"]["pending"] == 32 - 1 - 15


@pytest.mark.parametrize(
    "query",
    [
        {"budget": 31},
        {"budget": 129},
        {"budget": "lots"},
        {"budget": ""},
        {"budget": "9" * 40},
        {"snapshot": 9},
        {"snapshot": -1},
        {"snapshot": "1e3"},
        {"snapshot": "9" * 30},
        {"snapshot": "9" * 2000},
        {"colour": "red"},
    ],
)
def test_wake_rejects_bad_parameters(owner_client, filled_store, query):
    response = owner_client.get(url(filled_store, "wake"), query)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", ["snapshot=%00", "budget=%ED%A0%80", "budget=3%002"])
def test_wake_rejects_nul_and_surrogates_in_the_query(owner_client, filled_store, raw):
    response = owner_client.get(url(filled_store, "wake") + "?" + raw)
    assert response.status_code == 400


def test_wake_by_a_nonreader_is_identical_to_a_missing_store(stranger_client, filled_store):
    hidden = stranger_client.get(url(filled_store, "wake"))
    missing = stranger_client.get(url("00000000-0000-0000-0000-000000000000", "wake"))
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"] == missing.json()["error"]


def test_wake_of_a_public_store_works_anonymously(anon_client, public_store):
    fill(public_store, 3)
    assert [line["range"] for line in wake(anon_client, public_store)["lines"]] == ["0", "1", "2"]


def _wake_queries(client, store, budget=128) -> int:
    client.get(url(store, "wake"), {"budget": budget})  # warm-up: token last-use write
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url(store, "wake"), {"budget": budget})
    assert response.status_code == 200
    return len(queries)


@pytest.mark.slow
def test_wake_query_count_is_the_same_at_ten_and_a_hundred_thousand_entries(owner_client, owner, private_store):
    from tests.factories import StoreFactory

    small = fill(private_store, 10)
    put_summary(small, "0-7")
    big = fill(StoreFactory(owner=owner, canonical=False), 100_000)
    for label in ("0-65535", "65536-98303", "98304-99327"):
        put_summary(big, label)
    small_count = _wake_queries(owner_client, small)
    big_count = _wake_queries(owner_client, big)
    assert small_count == big_count <= 4
    lines = owner_client.get(url(big, "wake"), {"budget": 128}).json()["data"]["lines"]
    assert [line["kind"] for line in lines[:3]] == ["summary"] * 3
    assert len(lines) == 128


def test_a_wake_whose_store_counters_went_stale_is_never_complete_beside_a_missing_line(owner_client, private_store):
    """The access check reads the store's counters, the lines come from a later statement: a forget between
    them made a breaker's wake answer `complete: true`, `compaction: null` and the old generation beside a
    `missing` line (69 of 13,409 wakes racing forget + recompact). Here the race is made deterministic: the
    counters are read, then the forget commits, then the wake runs with what was read."""
    from memories import selectors, tree
    from memories.services import forget_range
    from stores.models import Store

    fill(private_store, 64)
    compact_all(owner_client, private_store)
    stale = Store.objects.get(pk=private_store.pk)  # what the access check read: complete, generation 1
    assert stale.summary_count == tree.needed_count(64)
    forget_range(store=stale, actor=private_store.owner, block=tree.Block(0, 1), generation=stale.generation)
    read_before = Store.objects.get(pk=private_store.pk)
    stale.entry_count, stale.summary_count, stale.generation = 64, tree.needed_count(64), 1
    woken = selectors.wake(store=stale, budget=32)
    assert any(line["kind"] == "missing" for line in woken["lines"])
    assert woken["complete"] is False and woken["compaction"]["pending"] > 0
    assert woken["generation"] == read_before.generation == 2
    fresh = owner_client.get(url(private_store, "wake")).json()["data"]
    assert (fresh["complete"], fresh["compaction"]["pending"]) == (False, woken["compaction"]["pending"])
