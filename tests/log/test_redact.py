"""Redact an entry (SPEC §4): the text goes for good, with every summary that may quote it; the tree heals."""

from __future__ import annotations

import json

import pytest

from backoffice.models import AuditAction, AuditEvent
from memories.models import Entry, Summary
from memories.tree import Block, source_digest
from stores import services as store_services
from tests.exchange.builder import compact_everything
from tests.factories import ProjectFactory, ProjectMembershipFactory, ReaderGrantFactory, project_store
from tests.log.conftest import assert_tree_consistent, compact_all, fill, quoting_summary, url

pytestmark = pytest.mark.django_db

SECRET = "sk-live-7Hq2SECRETtoken"


def redact(client, store, seq, reason="leaked credential"):
    return client.post(url(store, f"entries/{seq}/redact"), {"reason": reason})


def live_ranges(store) -> set[str]:
    return {f"{s}-{e}" for s, e in Summary.objects.filter(store=store, invalidated_at=None).values_list("start", "end")}


def body_with_secret(seq: int) -> str:
    return f"deploy key for staging: {SECRET}" if seq == 5 else f"entry {seq}"


@pytest.fixture
def leaky(owner, private_store):
    """16 entries, entry 5 holds a secret; compacted (through the services) by a summariser that quotes its
    children verbatim, as a real model may."""
    store = fill(private_store, 16, body=body_with_secret)
    compact_everything(store, owner, quoting_summary)
    store.refresh_from_db()
    assert Summary.objects.filter(store=store, summary_md__contains=SECRET).count() == 4  # 4-5, 4-7, 0-7, 0-15
    return store


def test_redact_nulls_the_text_and_keeps_seq_author_time_and_size(owner_client, owner, leaky):
    before = Entry.objects.get(store=leaky, seq=5)
    response = redact(owner_client, leaky, 5)
    assert response.status_code == 200
    body = response.json()
    data = body["data"]
    assert data["seq"] == 5 and data["body_md"] is None
    assert data["author"] == "owner" and data["redacted_by"] == "owner" and data["redacted_at"]
    assert data["size_bytes"] == before.size_bytes == len(body_with_secret(5).encode())
    assert body["meta"] == {
        "changed": True,
        "invalidated": ["4-5", "4-7", "0-7", "0-15"],
        "summaries_redacted": 4,
        "generation": 2,
    }
    after = Entry.objects.get(store=leaky, seq=5)
    assert (after.body_md, after.created_at, after.author_id, after.redacted_by_id) == (
        None,
        before.created_at,
        owner.pk,
        owner.pk,
    )
    assert "leaked credential" not in json.dumps(body)


def test_redaction_invalidates_exactly_the_ancestors_of_the_seq(owner_client, leaky):
    everything = live_ranges(leaky)
    untouched = {
        (s.start, s.end): s.summary_md for s in Summary.objects.filter(store=leaky) if not (s.start <= 5 <= s.end)
    }
    redact(owner_client, leaky, 5)
    assert everything - live_ranges(leaky) == {"4-5", "4-7", "0-7", "0-15"}
    assert {
        (s.start, s.end): s.summary_md for s in Summary.objects.filter(store=leaky) if not (s.start <= 5 <= s.end)
    } == (untouched)
    leaky.refresh_from_db()
    assert (leaky.generation, leaky.summary_count) == (2, len(everything) - 4)


def test_redaction_nulls_already_invalidated_summaries_of_the_range_too(owner_client, leaky):
    assert owner_client.post(url(leaky, "forget"), {"range": "4-5", "generation": 1}).status_code == 200
    compact_all(owner_client, leaky, summariser=quoting_summary)  # a second generation of 4-5, 4-7, 0-7, 0-15
    assert Summary.objects.filter(store=leaky, summary_md__contains=SECRET).count() == 8
    response = redact(owner_client, leaky, 5)
    assert response.json()["meta"]["summaries_redacted"] == 8
    assert not Summary.objects.filter(store=leaky, summary_md__contains=SECRET).exists()
    redacted = Summary.objects.filter(store=leaky, redacted_at__isnull=False)
    assert redacted.count() == 8
    assert all(s.summary_md is None and s.invalidated_at is not None for s in redacted)
    assert Summary.objects.filter(store=leaky, start=6, end=7).exclude(summary_md=None).count() == 1


def test_wake_after_recompaction_has_no_missing_line_and_shows_the_redacted_line(owner_client, private_store):
    store = fill(private_store, 64, body=body_with_secret)
    compact_all(owner_client, store, summariser=quoting_summary)
    redact(owner_client, store, 5)
    stale = owner_client.get(url(store, "wake"), {"budget": 32}).json()["data"]
    assert stale["complete"] is False
    assert [line["range"] for line in stale["lines"] if line["kind"] == "missing"] == ["0-31"]
    compact_all(owner_client, store, summariser=quoting_summary)
    for budget in (32, 64, 128):
        wake = owner_client.get(url(store, "wake"), {"budget": budget}).json()["data"]
        assert wake["complete"] is True
        assert not [line for line in wake["lines"] if line["kind"] == "missing"]
        assert SECRET not in json.dumps(wake)
    assert_tree_consistent(store)
    zoom = owner_client.get(url(store, "zoom"), {"range": "4-5"}).json()["data"]
    assert zoom["halves"][0]["kind"] == "entry"
    redacted_line = zoom["halves"][1]
    assert redacted_line["kind"] == "redacted" and redacted_line["text"] is None
    assert redacted_line["seq"] == 5 and redacted_line["author"] == "owner" and redacted_line["redacted_at"]
    assert owner_client.get(url(store, "zoom"), {"range": "5"}).json()["data"]["line"]["kind"] == "redacted"


def test_the_redacted_text_appears_nowhere_a_reader_or_agent_can_look(make_client, owner_client, reader, leaky):
    ReaderGrantFactory(store=leaky, user=reader)
    reader_client = make_client(reader)
    redact(owner_client, leaky, 5)
    prompts: list[str] = []
    compact_all(owner_client, leaky, summariser=quoting_summary, prompts=prompts)
    assert len(prompts) == 4 and all(SECRET not in prompt for prompt in prompts)
    seen = []
    for client in (owner_client, reader_client):
        for budget in (32, 128):
            seen.append(client.get(url(leaky, "wake"), {"budget": budget}).content)
        for label in ("5", "4-5", "4-7", "0-7", "0-15"):
            seen.append(client.get(url(leaky, "zoom"), {"range": label}).content)
        seen.append(client.get(url(leaky, "recall"), {"pattern": "SECRET"}).content)
        seen.append(client.get(url(leaky, "recall"), {"pattern": "staging"}).content)
        seen.append(client.get(url(leaky, "nap")).content)
    seen.append(b"".join(owner_client.get(url(leaky, "export")).streaming_content))
    assert all(SECRET.encode() not in page for page in seen)
    assert owner_client.get(url(leaky, "recall"), {"pattern": "staging"}).json()["data"] == []
    # Nothing in the database holds it either (the audit event holds only the reason).
    assert not Entry.objects.filter(store=leaky, body_md__contains=SECRET).exists()
    assert not Summary.objects.filter(store=leaky, summary_md__contains=SECRET).exists()
    assert not AuditEvent.objects.filter(reason__contains=SECRET).exists()


def test_the_back_office_shows_redaction_metadata_but_no_text(client, staff, owner_client, leaky):
    redact(owner_client, leaky, 5, reason="customer asked for removal")
    client.force_login(staff)
    listing = client.get("/backoffice/backoffice/redactionevent/")
    assert listing.status_code == 200
    event = AuditEvent.objects.get(action=AuditAction.REDACT_ENTRY)
    detail = client.get(f"/backoffice/backoffice/redactionevent/{event.pk}/change/")
    assert detail.status_code == 200
    for page in (listing, detail):
        html = page.content.decode()
        assert "customer asked for removal" in html and leaky.name in html
        assert SECRET not in html and "deploy key" not in html
    assert "4-5, 4-7, 0-7, 0-15" in detail.content.decode()
    for page in ("/backoffice/backoffice/auditevent/", f"/backoffice/stores/store/{leaky.pk}/change/"):
        assert SECRET not in client.get(page).content.decode()


def test_redaction_records_one_audit_event_with_metadata_only(owner_client, owner, leaky):
    redact(owner_client, leaky, 5, reason="leaked deploy key")
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_id, event.store_id, event.seq, event.reason) == (
        AuditAction.REDACT_ENTRY,
        owner.pk,
        leaky.pk,
        5,
        "leaked deploy key",
    )
    assert event.details["author"] == "owner" and event.details["size_bytes"] == len(body_with_secret(5).encode())
    assert event.details["invalidated"] == ["4-5", "4-7", "0-7", "0-15"]
    assert event.request_id.startswith("req_")


def test_a_redacted_summary_keeps_no_digest_that_could_confirm_a_guess(owner_client, leaky):
    """A summary's `source_digest` hashes its children's texts: with the sibling's text beside it in an export,
    the digest of 4-5 told whether a guess of entry 5 was right (a breaker recovered a key's last digits)."""
    sibling = Entry.objects.get(store=leaky, seq=4).body_md
    guess = source_digest(Block(4, 1), sibling, Block(5, 1), body_with_secret(5))
    assert Summary.objects.get(store=leaky, start=4, end=5).source_digest == guess  # the oracle, before
    redact(owner_client, leaky, 5)
    redacted = Summary.objects.filter(store=leaky, redacted_at__isnull=False)
    assert redacted.count() == 4 and set(redacted.values_list("source_digest", flat=True)) == {None}
    assert Summary.objects.filter(store=leaky, redacted_at=None, source_digest=None).count() == 0
    export = b"".join(owner_client.get(url(leaky, "export")).streaming_content)
    assert guess.encode() not in export
    summaries = [json.loads(line) for line in export.splitlines() if b'"type":"summary"' in line]
    assert {(obj["range"], obj["source_digest"]) for obj in summaries if obj["redacted_at"]} == {
        ("4-5", None),
        ("4-7", None),
        ("0-7", None),
        ("0-15", None),
    }


def test_redacting_again_returns_the_entry_unchanged(owner_client, leaky):
    first = redact(owner_client, leaky, 5).json()
    again = redact(owner_client, leaky, 5, reason="another reason")
    assert again.status_code == 200
    assert again.json()["data"] == first["data"]
    assert again.json()["meta"] == {"changed": False, "invalidated": [], "summaries_redacted": 0, "generation": 2}
    leaky.refresh_from_db()
    assert leaky.generation == 2
    assert AuditEvent.objects.count() == 1


def test_a_nonce_replay_of_a_redacted_entry_is_a_conflict_whatever_the_body(owner_client, private_store):
    note = owner_client.post(url(private_store, "note"), {"body_md": SECRET, "client_nonce": "n-1"})
    assert note.status_code == 201
    redact(owner_client, private_store, 0)
    for body in (SECRET, "something else"):
        response = owner_client.post(url(private_store, "note"), {"body_md": body, "client_nonce": "n-1"})
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["details"] == {"reason": "entry_redacted", "seq": 0}
        assert SECRET not in response.content.decode()
    private_store.refresh_from_db()
    assert private_store.entry_count == 1


def test_an_in_flight_job_over_the_redacted_entry_is_refused(owner_client, private_store):
    store = fill(private_store, 8, body=body_with_secret)
    compact_all(owner_client, store)  # everything up to date except what the redaction will change
    forget = owner_client.post(url(store, "forget"), {"range": "4-5", "generation": 1}).json()["data"]
    job = owner_client.get(url(store, "nap")).json()["data"]["job"]
    assert job["range"] == "4-5" and SECRET in job["prompt"]
    redact(owner_client, store, 5)
    response = owner_client.post(
        url(store, "compact"),
        {
            "range": "4-5",
            "generation": forget["generation"],
            "source_digest": job["source_digest"],
            "summary_md": f"quoted {SECRET}",
            "model": "m",
        },
    )
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "stale_generation"
    assert not Summary.objects.filter(store=store, summary_md__contains=SECRET).exists()


def test_a_redacted_child_is_kind_redacted_with_empty_text_and_digests_as_empty(owner_client, private_store):
    store = fill(private_store, 6, body=body_with_secret)
    redact(owner_client, store, 5)
    nap = owner_client.get(url(store, "nap")).json()["data"]
    while nap["job"]["range"] != "4-5":
        job = nap["job"]
        owner_client.post(
            url(store, "compact"),
            {
                "range": job["range"],
                "generation": job["generation"],
                "source_digest": job["source_digest"],
                "summary_md": "s",
                "model": "m",
            },
        )
        nap = owner_client.get(url(store, "nap")).json()["data"]
    job = nap["job"]
    assert [(c["range"], c["kind"], c["text"]) for c in job["children"]] == [
        ("4", "entry", "entry 4"),
        ("5", "redacted", ""),
    ]
    assert job["children"][1]["author"] == "owner"
    assert job["source_digest"] == source_digest(Block(4, 1), "entry 4", Block(5, 1), "")
    assert 'kind="redacted"' in job["prompt"]
    response = owner_client.post(
        url(store, "compact"),
        {
            "range": "4-5",
            "generation": job["generation"],
            "source_digest": job["source_digest"],
            "summary_md": "x",
            "model": "m",
        },
    )
    assert response.status_code == 201


def test_only_an_owner_may_redact(make_client, owner, reader, stranger, leaky):
    ReaderGrantFactory(store=leaky, user=reader)
    refused = redact(make_client(reader), leaky, 5)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "permission_error"
    hidden = redact(make_client(stranger), leaky, 5)
    missing = redact(make_client(stranger), "00000000-0000-4000-8000-000000000000", 5)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"] == missing.json()["error"]
    assert redact(make_client(None), leaky, 5).status_code == 401
    assert Entry.objects.get(store=leaky, seq=5).body_md == body_with_secret(5)
    assert not AuditEvent.objects.exists()


def test_project_owners_may_redact_and_members_may_not(make_client):
    project = ProjectFactory()
    boss = ProjectMembershipFactory(project=project, role="owner").user
    member = ProjectMembershipFactory(project=project, role="member").user
    store = fill(project_store(project), 2, author=member)
    assert redact(make_client(member), store, 1).status_code == 403
    response = redact(make_client(boss), store, 1)
    assert response.status_code == 200
    assert response.json()["data"]["author"] == member.handle
    assert response.json()["data"]["redacted_by"] == boss.handle


def test_an_archived_store_can_still_be_redacted(owner_client, leaky):
    store_services.archive_store(store=leaky)
    assert redact(owner_client, leaky, 5).status_code == 200
    assert Entry.objects.get(store=leaky, seq=5).body_md is None


@pytest.mark.parametrize("seq", ["abc", "-1", "01", "1.0", "+1", "99999999999999999999", "%00"])
def test_a_malformed_seq_is_a_400_naming_it(owner_client, leaky, seq):
    response = redact(owner_client, leaky, seq)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("seq:") or "URL path" in response.json()["error"]["message"]
    assert not AuditEvent.objects.exists()


def test_a_seq_beyond_the_entries_is_a_404(owner_client, leaky):
    response = redact(owner_client, leaky, 16)
    assert response.status_code == 404
    assert response.json()["error"]["details"] == {"seq": 16, "entry_count": 16}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "bad\u0000reason"},
        {"reason": "\u200b"},
        {"reason": "\u202eevil"},
        {"reason": "x" * 1001},
        {"reason": 7},
        {"reason": None},
        {"reason": "ok", "extra": 1},
    ],
)
def test_a_bad_reason_is_a_400_and_changes_nothing(owner_client, leaky, body):
    response = owner_client.post(url(leaky, "entries/5/redact"), body, format="json")
    assert response.status_code == 400, response.json()
    assert Entry.objects.get(store=leaky, seq=5).body_md == body_with_secret(5)
    leaky.refresh_from_db()
    assert leaky.generation == 1
    assert not AuditEvent.objects.exists()
