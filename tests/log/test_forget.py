"""forget (SPEC §4): invalidates exactly the range and its ancestors, bumps generation, never touches entries."""

from __future__ import annotations

import json

import pytest

from memories.models import Entry, Summary
from stores import services as store_services
from tests.factories import ProjectFactory, ProjectMembershipFactory, ReaderGrantFactory, project_store
from tests.log.conftest import compact_all, fill, url

pytestmark = pytest.mark.django_db

ALL_EIGHT = {"0-1", "2-3", "4-5", "6-7", "0-3", "4-7", "0-7"}


def live_ranges(store) -> set[str]:
    return {f"{s}-{e}" for s, e in Summary.objects.filter(store=store, invalidated_at=None).values_list("start", "end")}


@pytest.fixture
def compacted(owner_client, filled_store):
    compact_all(owner_client, filled_store)
    filled_store.refresh_from_db()
    assert live_ranges(filled_store) == ALL_EIGHT
    return filled_store


def forget(client, store, range_, generation):
    return client.post(url(store, "forget"), {"range": range_, "generation": generation})


def test_forget_invalidates_exactly_the_range_and_its_ancestors(owner_client, compacted):
    entries_before = list(Entry.objects.filter(store=compacted).order_by("seq").values_list("seq", "body_md"))
    response = forget(owner_client, compacted, "2-3", 1)
    assert response.status_code == 200
    assert response.json()["data"] == {"invalidated": ["2-3", "0-3", "0-7"], "generation": 2}
    assert live_ranges(compacted) == {"0-1", "4-5", "6-7", "4-7"}
    compacted.refresh_from_db()
    assert (compacted.generation, compacted.summary_count) == (2, 4)
    assert list(Entry.objects.filter(store=compacted).order_by("seq").values_list("seq", "body_md")) == entries_before
    assert compacted.entry_count == 8


def test_forget_keeps_invalidated_summaries_for_audit(owner_client, owner, compacted):
    forget(owner_client, compacted, "2-3", 1)
    kept = Summary.objects.filter(store=compacted, invalidated_at__isnull=False)
    assert {f"{s.start}-{s.end}" for s in kept} == {"2-3", "0-3", "0-7"}
    assert {s.invalidated_by_id for s in kept} == {owner.pk}


def test_forget_of_a_single_entry_invalidates_every_summary_containing_it(owner_client, compacted):
    response = forget(owner_client, compacted, "5", 1)
    assert response.json()["data"]["invalidated"] == ["4-5", "4-7", "0-7"]
    assert live_ranges(compacted) == {"0-1", "2-3", "6-7", "0-3"}


def test_forget_of_a_range_without_a_summary_still_bumps_generation(owner_client, filled_store):
    response = forget(owner_client, filled_store, "0-7", 1)
    assert response.status_code == 200
    assert response.json()["data"] == {"invalidated": [], "generation": 2}


def test_forget_with_a_stale_generation_is_409_and_changes_nothing(owner_client, compacted):
    forget(owner_client, compacted, "6-7", 1)
    response = forget(owner_client, compacted, "0-1", 1)
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "stale_generation"
    assert live_ranges(compacted) == {"0-1", "2-3", "4-5", "0-3"}
    compacted.refresh_from_db()
    assert compacted.generation == 2


def test_forget_then_wake_shows_missing_lines_and_nap_rebuilds_them(owner_client, private_store):
    store = fill(private_store, 72)
    compact_all(owner_client, store)
    forget(owner_client, store, "0-31", 1)  # also invalidates 0-63
    lines = owner_client.get(url(store, "wake")).json()["data"]["lines"]
    assert lines[0] == {"range": "0-31", "kind": "missing", "text": None}
    assert compact_all(owner_client, store) == 2
    assert owner_client.get(url(store, "wake")).json()["data"]["complete"] is True


def test_forget_by_a_reader_is_forbidden(make_client, reader, compacted):
    ReaderGrantFactory(store=compacted, user=reader)
    response = forget(make_client(reader), compacted, "0-1", 1)
    assert response.status_code == 403
    assert live_ranges(compacted) == ALL_EIGHT


def test_forget_by_a_project_member_who_is_not_an_owner_is_forbidden(make_client):
    project = ProjectFactory()
    member = ProjectMembershipFactory(project=project, role="member").user
    store = fill(project_store(project), 2, author=member)
    response = forget(make_client(member), store, "0-1", 1)
    assert response.status_code == 403


def test_forget_by_a_project_owner_is_allowed(make_client):
    project = ProjectFactory()
    boss = ProjectMembershipFactory(project=project, role="owner").user
    store = fill(project_store(project), 2, author=boss)
    assert forget(make_client(boss), store, "0-1", 1).status_code == 200


def test_forget_by_a_nonreader_is_identical_to_a_missing_store(stranger_client, compacted):
    hidden = forget(stranger_client, compacted, "0-1", 1)
    gone = forget(stranger_client, "00000000-0000-0000-0000-000000000000", "0-1", 1)
    assert hidden.status_code == gone.status_code == 404
    assert hidden.json()["error"] == gone.json()["error"]
    assert live_ranges(compacted) == ALL_EIGHT


def test_forget_on_an_archived_store_is_a_conflict(owner_client, compacted):
    store_services.archive_store(store=compacted)
    response = forget(owner_client, compacted, "0-1", 1)
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "store_archived"


@pytest.mark.parametrize(
    "body",
    [
        {"range": "1-2", "generation": 1},
        {"range": "0-2", "generation": 1},
        {"range": "3-3", "generation": 1},
        {"range": "-1", "generation": 1},
        {"range": "5-4", "generation": 1},
        {"range": "8", "generation": 1},  # beyond the 8 entries
        {"range": "0-15", "generation": 1},
        {"range": "99999999999999999999", "generation": 1},
        {"range": "0-1\u0000", "generation": 1},
        {"range": "\ud800", "generation": 1},
        {"range": 3, "generation": 1},
        {"range": "0-1", "generation": "1"},
        {"range": "0-1", "generation": None},
        {"range": "0-1", "generation": 0},
        {"range": "0-1", "generation": 2**70},
        {"range": "0-1"},
        {"generation": 1},
        {"range": "0-1", "generation": 1, "force": True},
    ],
)
def test_forget_rejects_hostile_input_and_changes_nothing(owner_client, compacted, body):
    raw = json.dumps(body)
    response = owner_client.generic("POST", url(compacted, "forget"), raw, content_type="application/json")
    assert response.status_code == 400, response.json()
    compacted.refresh_from_db()
    assert compacted.generation == 1
    assert live_ranges(compacted) == ALL_EIGHT
