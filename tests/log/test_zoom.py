"""zoom (SPEC §4): one entry, or a range's summary line and its two halves."""

from __future__ import annotations

import pytest

from tests.log.conftest import compact_all, fill, put_summary, url

pytestmark = pytest.mark.django_db


def zoom(client, store, **query):
    return client.get(url(store, "zoom"), query)


def test_zoom_into_one_entry_returns_it(owner_client, filled_store):
    response = zoom(owner_client, filled_store, range="5")
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["range"] == "5" and data["halves"] == [] and data["snapshot"] == 8
    assert data["line"]["kind"] == "entry" and data["line"]["text"] == "entry 5" and data["line"]["seq"] == 5


def test_zoom_into_a_range_returns_its_summary_and_both_halves(owner_client, filled_store):
    compact_all(owner_client, filled_store)
    data = zoom(owner_client, filled_store, range="0-7").json()["data"]
    assert data["line"]["range"] == "0-7" and data["line"]["kind"] == "summary"
    assert data["line"]["first_at"] and data["line"]["last_at"] and data["line"]["model"] == "test-summariser-1"
    assert [(h["range"], h["kind"]) for h in data["halves"]] == [("0-3", "summary"), ("4-7", "summary")]


def test_zoom_into_a_pair_returns_the_two_entries(owner_client, filled_store):
    data = zoom(owner_client, filled_store, range="2-3").json()["data"]
    assert data["line"] == {"range": "2-3", "kind": "missing", "text": None}
    assert [(h["range"], h["kind"], h["text"]) for h in data["halves"]] == [
        ("2", "entry", "entry 2"),
        ("3", "entry", "entry 3"),
    ]


def test_zoom_marks_missing_halves(owner_client, filled_store):
    put_summary(filled_store, "0-3", "first half only")
    data = zoom(owner_client, filled_store, range="0-7").json()["data"]
    assert data["line"]["kind"] == "missing"
    assert [h["kind"] for h in data["halves"]] == ["summary", "missing"]
    assert data["halves"][0]["text"] == "first half only"


def test_zoom_beyond_the_snapshot_is_400(owner_client, filled_store):
    fill(filled_store, 8)
    assert zoom(owner_client, filled_store, range="8-15").status_code == 200
    response = zoom(owner_client, filled_store, range="8-15", snapshot=8)
    assert response.status_code == 400 and "snapshot" in response.json()["error"]["message"]
    assert zoom(owner_client, filled_store, range="7", snapshot=7).status_code == 400
    assert zoom(owner_client, filled_store, range="6", snapshot=7).status_code == 200


def test_zoom_into_an_empty_store_is_400(owner_client, private_store):
    assert zoom(owner_client, private_store, range="0").status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"range": "1-2"},
        {"range": "0-2"},
        {"range": "3-3"},
        {"range": "-1"},
        {"range": "5-4"},
        {"range": "8"},
        {"range": "0-15"},
        {"range": "9" * 40},
        {"range": "0-7", "snapshot": 9},
        {"range": "0-7", "snapshot": -1},
        {"range": "0-7", "snapshot": "many"},
        {"range": "0-1", "budget": 32},
    ],
)
def test_zoom_rejects_hostile_input(owner_client, filled_store, query):
    response = zoom(owner_client, filled_store, **query)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", ["range=0%00", "range=%ED%A0%80", "range=0-1&snapshot=%00"])
def test_zoom_rejects_nul_and_surrogates_in_the_query(owner_client, filled_store, raw):
    assert owner_client.get(url(filled_store, "zoom") + "?" + raw).status_code == 400


def test_zoom_by_a_nonreader_is_identical_to_a_missing_store(stranger_client, filled_store):
    hidden = zoom(stranger_client, filled_store, range="0")
    gone = zoom(stranger_client, "00000000-0000-0000-0000-000000000000", range="0")
    assert hidden.status_code == gone.status_code == 404
    assert hidden.json()["error"] == gone.json()["error"]


def test_zoom_of_a_public_store_works_anonymously(anon_client, public_store):
    fill(public_store, 2)
    assert zoom(anon_client, public_store, range="1").json()["data"]["line"]["text"] == "entry 1"
