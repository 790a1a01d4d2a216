"""nap / compact (SPEC §4): job order, digests, the full compaction loop, and every 409 reason."""

from __future__ import annotations

import hashlib
import json

import pytest

from memories.api.serializers import DIGEST_MESSAGE
from memories.models import Summary
from stores import services as store_services
from tests.factories import ReaderGrantFactory
from tests.log.conftest import compact_all, fill, summary_text, url

pytestmark = pytest.mark.django_db


def nap(client, store, **query):
    response = client.get(url(store, "nap"), query)
    assert response.status_code == 200, response.json()
    return response.json()


def submit(client, store, job, text=None, **overrides):
    body = {
        "range": job["range"],
        "generation": job["generation"],
        "source_digest": job["source_digest"],
        "summary_md": text if text is not None else summary_text(job),
        "model": "test-summariser-1",
        **overrides,
    }
    return client.post(url(store, "compact"), body)


def h(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_nap_of_an_empty_store_is_complete(owner_client, private_store):
    body = nap(owner_client, private_store)
    assert body["data"] == {"complete": True, "snapshot": 0, "generation": 1, "job": None, "jobs": []}
    assert body["meta"] == {"pending": 0}


def test_nap_job_has_two_entry_children_a_digest_and_a_prompt(owner_client, filled_store):
    body = nap(owner_client, filled_store)
    job = body["data"]["job"]
    assert body["data"]["complete"] is False and body["meta"]["pending"] == 7
    assert (job["range"], job["level"], job["generation"], job["snapshot"], job["max_bytes"]) == ("0-1", 1, 1, 8, 1024)
    assert [(c["range"], c["kind"], c["text"], c["author"]) for c in job["children"]] == [
        ("0", "entry", "entry 0", "owner"),
        ("1", "entry", "entry 1", "owner"),
    ]
    assert all(child["created_at"] for child in job["children"])
    expected = h("memories-digest-v1\n0\n" + h("entry 0") + "\n1\n" + h("entry 1") + "\n")
    assert job["source_digest"] == expected
    assert "entry 0" in job["prompt"] and "1024 UTF-8 bytes" in job["prompt"]


def test_nap_serves_the_lowest_level_first_then_the_oldest_start(owner_client, filled_store):
    served = []
    while not (body := nap(owner_client, filled_store))["data"]["complete"]:
        job = body["data"]["job"]
        served.append(job["range"])
        assert submit(owner_client, filled_store, job).status_code == 201
    assert served == ["0-1", "2-3", "4-5", "6-7", "0-3", "4-7", "0-7"]


def test_nap_summary_job_digest_covers_the_child_summaries(owner_client, private_store):
    store = fill(private_store, 4)
    texts = {}
    for _ in range(2):
        job = nap(owner_client, store)["data"]["job"]
        texts[job["range"]] = summary_text(job)
        submit(owner_client, store, job)
    job = nap(owner_client, store)["data"]["job"]
    assert job["range"] == "0-3"
    assert [(c["range"], c["kind"], c["text"]) for c in job["children"]] == [
        ("0-1", "summary", texts["0-1"]),
        ("2-3", "summary", texts["2-3"]),
    ]
    assert job["source_digest"] == h("memories-digest-v1\n0-1\n" + h(texts["0-1"]) + "\n2-3\n" + h(texts["2-3"]) + "\n")


def test_nap_at_a_snapshot_only_needs_ranges_inside_it(owner_client, filled_store):
    body = nap(owner_client, filled_store, snapshot=3)
    assert body["meta"]["pending"] == 1 and body["data"]["job"]["range"] == "0-1"
    submit(owner_client, filled_store, body["data"]["job"])
    assert nap(owner_client, filled_store, snapshot=3)["data"]["complete"] is True
    assert nap(owner_client, filled_store)["data"]["complete"] is False


def test_nap_refills_a_hole_left_by_forget_before_anything_else(owner_client, private_store):
    store = fill(private_store, 16)
    compact_all(owner_client, store)
    forgot = owner_client.post(url(store, "forget"), {"range": "4-5", "generation": 1})
    assert forgot.json()["data"]["invalidated"] == ["4-5", "4-7", "0-7", "0-15"]
    served = []
    while not (body := nap(owner_client, store))["data"]["complete"]:
        served.append(body["data"]["job"]["range"])
        assert submit(owner_client, store, body["data"]["job"]).status_code == 201
    assert served == ["4-5", "4-7", "0-7", "0-15"]


@pytest.mark.slow
def test_a_thousand_entries_are_driven_to_complete_and_wake_has_no_missing_line(owner_client, private_store):
    store = fill(private_store, 1000)
    submitted = compact_all(owner_client, store)
    assert submitted == 1000 - bin(1000).count("1")
    store.refresh_from_db()
    assert store.summary_count == submitted == Summary.objects.filter(store=store, invalidated_at=None).count()
    for budget in (32, 128):
        data = owner_client.get(url(store, "wake"), {"budget": budget}).json()["data"]
        assert data["complete"] is True and data["compaction"] is None
        assert all(line["kind"] in ("summary", "entry") for line in data["lines"])
    assert nap(owner_client, store)["data"]["complete"] is True


def test_compact_returns_201_with_progress_for_the_submitters_snapshot(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    response = submit(owner_client, filled_store, job, snapshot=2)
    assert response.status_code == 201
    body = response.json()
    assert body["data"]["range"] == "0-1" and body["data"]["level"] == 1
    assert body["data"]["source_digest"] == job["source_digest"] and body["data"]["author"] == "owner"
    assert body["meta"] == {"snapshot": 2, "complete": True, "pending": 0, "created": True}
    filled_store.refresh_from_db()
    assert filled_store.summary_count == 1


def test_compact_identical_resubmission_is_200_and_stores_nothing_new(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    first = submit(owner_client, filled_store, job)
    again = submit(owner_client, filled_store, job)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["data"] == first.json()["data"]
    assert again.json()["meta"]["created"] is False
    assert Summary.objects.filter(store=filled_store).count() == 1


def test_compact_competing_different_summary_is_a_summary_conflict(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    submit(owner_client, filled_store, job, text="first agent's summary")
    response = submit(owner_client, filled_store, job, text="second agent's summary")
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "summary_conflict"
    assert list(Summary.objects.filter(store=filled_store).values_list("summary_md", flat=True)) == [
        "first agent's summary"
    ]


def test_compact_with_a_stale_generation_is_409(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    owner_client.post(url(filled_store, "forget"), {"range": "6-7", "generation": 1})
    response = submit(owner_client, filled_store, job)
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["details"]["reason"] == "stale_generation" and error["details"]["generation"] == 2
    assert not Summary.objects.filter(store=filled_store).exists()


def test_compact_with_a_child_forgotten_and_rebuilt_with_another_text_is_stale_digest(owner_client, filled_store):
    for _ in range(2):  # 0-1 and 2-3
        submit(owner_client, filled_store, nap(owner_client, filled_store)["data"]["job"])
    for _ in range(2):  # 4-5 and 6-7
        submit(owner_client, filled_store, nap(owner_client, filled_store)["data"]["job"])
    job = nap(owner_client, filled_store)["data"]["job"]
    assert job["range"] == "0-3"
    owner_client.post(url(filled_store, "forget"), {"range": "0-1", "generation": 1})
    rebuilt = nap(owner_client, filled_store)["data"]["job"]
    assert rebuilt["range"] == "0-1" and rebuilt["generation"] == 2
    assert submit(owner_client, filled_store, rebuilt, text="another text for 0-1").status_code == 201
    response = submit(owner_client, filled_store, job, generation=2)
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "stale_digest"
    assert not Summary.objects.filter(store=filled_store, start=0, end=3).exists()


def test_compact_of_a_range_whose_child_is_missing_is_stale_digest(owner_client, filled_store):
    digest = "0" * 64
    response = owner_client.post(
        url(filled_store, "compact"),
        {"range": "0-3", "generation": 1, "source_digest": digest, "summary_md": "s", "model": "m"},
    )
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "stale_digest"


def test_compact_with_a_wrong_digest_is_stale_digest(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    response = submit(owner_client, filled_store, job, source_digest="f" * 64)
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "stale_digest"


def test_compact_refuses_an_uppercase_digest(owner_client, filled_store):
    # issue 15 #12: SHA-256 values are 64 lowercase hex characters everywhere (preconditions too).
    job = nap(owner_client, filled_store)["data"]["job"]
    response = submit(owner_client, filled_store, job, source_digest=job["source_digest"].upper())
    assert response.status_code == 400 and response.json()["error"]["message"].startswith("source_digest:")
    assert "64 lowercase hexadecimal characters" in response.json()["error"]["message"]  # not "pattern"


@pytest.mark.parametrize("digest", ["abc", "a" * 65, "g" * 64, ""])
def test_a_malformed_digest_gets_one_message(owner_client, filled_store, digest):
    """A digest of the wrong length got the length message and the digest message, overlapping (a tester)."""
    job = nap(owner_client, filled_store)["data"]["job"]
    error = submit(owner_client, filled_store, job, source_digest=digest).json()["error"]
    assert error["details"]["fields"] == {"source_digest": DIGEST_MESSAGE}
    assert error["message"] == f"source_digest: {DIGEST_MESSAGE}"


def test_compact_accepts_1024_bytes_and_rejects_1025(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    too_long = submit(owner_client, filled_store, job, text="€" * 341 + "xx")
    assert too_long.status_code == 400 and "1025" in too_long.json()["error"]["message"]
    assert submit(owner_client, filled_store, job, text="😀" * 256).status_code == 201


def test_compact_to_an_archived_store_is_a_conflict(owner_client, filled_store):
    job = nap(owner_client, filled_store)["data"]["job"]
    store_services.archive_store(store=filled_store)
    response = submit(owner_client, filled_store, job)
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "store_archived"


def test_compact_by_a_reader_is_forbidden_but_nap_is_allowed(make_client, reader, filled_store):
    ReaderGrantFactory(store=filled_store, user=reader)
    client = make_client(reader)
    job = nap(client, filled_store)["data"]["job"]
    assert submit(client, filled_store, job).status_code == 403


def test_nap_and_compact_by_a_nonreader_are_identical_to_a_missing_store(stranger_client, filled_store):
    missing = "00000000-0000-0000-0000-000000000000"
    for action, method in (("nap", "get"), ("compact", "post")):
        hidden = getattr(stranger_client, method)(url(filled_store, action), {})
        gone = getattr(stranger_client, method)(url(missing, action), {})
        assert hidden.status_code == gone.status_code == 404
        assert hidden.json()["error"] == gone.json()["error"]


def test_nap_rejects_a_snapshot_beyond_the_entry_count(owner_client, filled_store):
    for snapshot in (9, -1, "x", "9" * 30):
        assert owner_client.get(url(filled_store, "nap"), {"snapshot": snapshot}).status_code == 400


GOOD = {"range": "0-1", "generation": 1, "source_digest": "a" * 64, "summary_md": "s", "model": "m"}


@pytest.mark.parametrize(
    "change",
    [
        {"range": "1-2"},
        {"range": "0-2"},
        {"range": "3-3"},
        {"range": "-1"},
        {"range": "5-4"},
        {"range": "4"},
        {"range": "0-9223372036854775807"},
        {"range": "9" * 30},
        {"range": "8-15"},  # beyond the 8 entries
        {"range": 1},
        {"range": None},
        {"range": ["0-1"]},
        {"generation": "1"},
        {"generation": 1.5},
        {"generation": True},
        {"generation": 0},
        {"generation": 10**30},
        {"source_digest": "xyz"},
        {"source_digest": "g" * 64},
        {"summary_md": ""},
        {"summary_md": "a\u0000b"},
        {"summary_md": "\ud800"},
        {"summary_md": 5},
        {"model": ""},
        {"model": "m" * 201},
        {"model": "m\u0000"},
        {"model": "\n"},  # every reader sees the model on wake and zoom lines: the name rule (a breaker)
        {"model": "m\x7f"},
        {"model": "claude\u0085"},
        {"model": "\u2028"},  # a line separator: names are one line (a second breaker)
        {"model": 5},
        {"snapshot": 9},
        {"snapshot": -1},
        {"snapshot": "2"},
        {"extra": "field"},
    ],
)
def test_compact_rejects_hostile_input_and_changes_nothing(owner_client, filled_store, change):
    raw = json.dumps({**GOOD, **change})  # ASCII JSON: lone surrogates travel as \ud800 escapes
    response = owner_client.generic("POST", url(filled_store, "compact"), raw, content_type="application/json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["type"] == "invalid_request_error"
    filled_store.refresh_from_db()
    assert (filled_store.summary_count, filled_store.generation) == (0, 1)
    assert not Summary.objects.exists()


def test_compact_rejects_a_missing_field_by_name(owner_client, filled_store):
    body = dict(GOOD)
    del body["model"]
    response = owner_client.post(url(filled_store, "compact"), body)
    assert response.status_code == 400 and "model" in response.json()["error"]["message"]
