"""note (SPEC §4 Entries): seq rules, the 1,024-byte limit, exact storage, client_nonce idempotency."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts import services as account_services
from memories.models import Entry
from stores import services as store_services
from tests.factories import ProjectMembershipFactory, ReaderGrantFactory, StoreFactory, project_store
from tests.log.conftest import url

pytestmark = pytest.mark.django_db


def post_raw(client, store, raw: str):
    return client.generic("POST", url(store, "note"), raw.encode("utf-8"), content_type="application/json")


def test_note_appends_entries_with_consecutive_seq(owner_client, private_store):
    for expected, body in enumerate(["first", "second", "third"]):
        response = owner_client.post(url(private_store, "note"), {"body_md": body})
        assert response.status_code == 201
        data = response.json()["data"]
        assert (data["seq"], data["author"], data["body_md"]) == (expected, "owner", body)
        assert data["size_bytes"] == len(body)
        assert response.json()["meta"] == {"replayed": False}
    private_store.refresh_from_db()
    assert private_store.entry_count == 3
    assert list(private_store.entries.order_by("seq").values_list("seq", "body_md")) == [
        (0, "first"),
        (1, "second"),
        (2, "third"),
    ]


def test_note_created_at_never_decreases_along_seq(owner_client, private_store):
    for body in "abcde":
        owner_client.post(url(private_store, "note"), {"body_md": body})
    stamps = list(private_store.entries.order_by("seq").values_list("created_at", flat=True))
    assert stamps == sorted(stamps)


def test_note_does_not_move_the_store_updated_at(owner_client, private_store):
    before = private_store.updated_at
    owner_client.post(url(private_store, "note"), {"body_md": "x"})
    private_store.refresh_from_db()
    assert private_store.updated_at == before


def test_note_accepts_1024_bytes_of_four_byte_characters(owner_client, private_store):
    body = "😀" * 256
    assert len(body.encode("utf-8")) == 1024
    response = owner_client.post(url(private_store, "note"), {"body_md": body})
    assert response.status_code == 201
    assert response.json()["data"]["size_bytes"] == 1024
    assert Entry.objects.get(store=private_store).body_md == body


def test_note_accepts_1024_bytes_of_three_and_four_byte_characters(owner_client, private_store):
    body = "€" * 340 + "𝄞"
    assert len(body.encode("utf-8")) == 1024
    response = owner_client.post(url(private_store, "note"), {"body_md": body})
    assert response.status_code == 201
    assert Entry.objects.get(store=private_store).body_md == body


@pytest.mark.parametrize("body", ["😀" * 256 + "x", "€" * 341 + "xx", "a" * 1025])
def test_note_rejects_1025_bytes_naming_the_byte_count(owner_client, private_store, body):
    assert len(body.encode("utf-8")) == 1025
    response = owner_client.post(url(private_store, "note"), {"body_md": body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "body_md" in error["message"] and "1025" in error["message"] and "1024" in error["message"]
    assert not Entry.objects.filter(store=private_store).exists()


def test_note_reports_the_byte_count_of_a_much_larger_body(owner_client, private_store):
    response = owner_client.post(url(private_store, "note"), {"body_md": "é" * 600})
    assert response.status_code == 400
    assert "1200 UTF-8 bytes" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "raw",
    [
        '{"body_md": "a\\u0000b"}',
        '{"body_md": "lone \\ud800 surrogate"}',
        '{"body_md": "low \\udc00"}',
        '{"body_md": ""}',
        '{"body_md": 42}',
        '{"body_md": null}',
        '{"body_md": ["x"]}',
        '{"body_md": {"x": 1}}',
        '{"body_md": true}',
        "{}",
        '["body_md"]',
        '"just a string"',
        '{"body_md": "x", "client_nonce": "n\\u0000"}',
        '{"body_md": "x", "client_nonce": ""}',
        '{"body_md": "x", "client_nonce": 7}',
        '{"body_md": "x", "session_id": "abc"}',
        '{"body_md": "x", "seq": 9}',
    ],
)
def test_note_rejects_hostile_bodies_and_stores_nothing(owner_client, private_store, raw):
    response = post_raw(owner_client, private_store, raw)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["type"] == "invalid_request_error"
    private_store.refresh_from_db()
    assert private_store.entry_count == 0
    assert not Entry.objects.filter(store=private_store).exists()


def test_note_rejects_a_nonce_longer_than_128_characters(owner_client, private_store):
    response = owner_client.post(url(private_store, "note"), {"body_md": "x", "client_nonce": "n" * 129})
    assert response.status_code == 400
    assert "client_nonce" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        "  leading and trailing spaces  ",
        "line one\r\nline two\r\n",
        "\n\n\tindented\n\n",
        "trailing newline\n",
        " ",
        "tabs\tand\u00a0nbsp and zero\u200bwidth",
        "e\u0301 (decomposed) vs \u00e9 (composed)",
        "# Heading\n\n```py\nprint('hi')  \n```\n",
    ],
)
def test_note_stores_the_exact_bytes_sent(owner_client, private_store, body):
    response = post_raw(owner_client, private_store, json.dumps({"body_md": body}))
    assert response.status_code == 201
    assert response.json()["data"]["body_md"] == body
    stored = Entry.objects.get(store=private_store)
    assert stored.body_md.encode("utf-8") == body.encode("utf-8")
    assert stored.size_bytes == len(body.encode("utf-8"))


def test_note_replay_with_the_same_nonce_and_body_returns_the_original(owner_client, private_store):
    first = owner_client.post(url(private_store, "note"), {"body_md": "once", "client_nonce": "retry-1"})
    again = owner_client.post(url(private_store, "note"), {"body_md": "once", "client_nonce": "retry-1"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["meta"]["replayed"] is True
    assert again.json()["data"] == first.json()["data"]
    private_store.refresh_from_db()
    assert private_store.entry_count == 1


def test_note_takes_the_idempotency_key_header_as_its_nonce(owner_client, private_store):
    first = owner_client.post(url(private_store, "note"), {"body_md": "once"}, HTTP_IDEMPOTENCY_KEY="key-1")
    again = owner_client.post(url(private_store, "note"), {"body_md": "once"}, HTTP_IDEMPOTENCY_KEY="key-1")
    same = owner_client.post(
        url(private_store, "note"), {"body_md": "once", "client_nonce": "key-1"}, HTTP_IDEMPOTENCY_KEY="key-1"
    )
    assert (first.status_code, again.status_code, same.status_code) == (201, 200, 200)
    assert first.json()["data"]["client_nonce"] == "key-1"
    assert again.json()["meta"]["replayed"] is True
    assert again.json()["data"]["seq"] == same.json()["data"]["seq"] == first.json()["data"]["seq"]
    other = owner_client.post(url(private_store, "note"), {"body_md": "another"}, HTTP_IDEMPOTENCY_KEY="key-1")
    assert other.status_code == 409
    assert other.json()["error"]["details"]["reason"] == "nonce_conflict"
    assert Entry.objects.filter(store=private_store).count() == 1


def test_a_non_ascii_idempotency_key_is_the_same_nonce_as_in_the_body(owner_client, private_store):
    """The header's bytes were read as Latin-1: `ключ-1` in the header and in the body were two nonces, and
    one retried note was stored twice (found by a breaker). Header values are decoded as UTF-8."""
    raw = "ключ-1".encode().decode("latin-1")  # how WSGI hands the header's UTF-8 bytes over
    first = owner_client.post(url(private_store, "note"), {"body_md": "once"}, HTTP_IDEMPOTENCY_KEY=raw)
    assert first.status_code == 201 and first.json()["data"]["client_nonce"] == "ключ-1"
    again = owner_client.post(url(private_store, "note"), {"body_md": "once", "client_nonce": "ключ-1"})
    assert again.status_code == 200 and again.json()["meta"]["replayed"] is True
    both = owner_client.post(
        url(private_store, "note"), {"body_md": "once", "client_nonce": "ключ-1"}, HTTP_IDEMPOTENCY_KEY=raw
    )
    assert both.status_code == 200
    bad = owner_client.post(url(private_store, "note"), {"body_md": "x"}, HTTP_IDEMPOTENCY_KEY="\xff\xfe")
    assert bad.status_code == 400 and "not valid UTF-8" in bad.json()["error"]["message"]
    assert list(bad.json()["error"]["details"]["fields"]) == ["Idempotency-Key"]
    assert Entry.objects.filter(store=private_store).count() == 1


def test_note_rejects_an_idempotency_key_that_differs_from_client_nonce_or_is_too_long(owner_client, private_store):
    differs = owner_client.post(
        url(private_store, "note"), {"body_md": "x", "client_nonce": "a"}, HTTP_IDEMPOTENCY_KEY="b"
    )
    assert differs.status_code == 400
    assert differs.json()["error"]["details"]["fields"] == {"client_nonce": "differs from the Idempotency-Key header"}
    too_long = owner_client.post(url(private_store, "note"), {"body_md": "x"}, HTTP_IDEMPOTENCY_KEY="k" * 129)
    empty = owner_client.post(url(private_store, "note"), {"body_md": "x"}, HTTP_IDEMPOTENCY_KEY="")
    for refused in (too_long, empty):  # the refusal names the header the value came in (a breaker)
        assert refused.status_code == 400
        assert refused.json()["error"]["message"].startswith("Idempotency-Key header: ")
        assert list(refused.json()["error"]["details"]["fields"]) == ["Idempotency-Key"]
    assert Entry.objects.filter(store=private_store).count() == 0


def test_note_same_nonce_with_another_body_is_a_nonce_conflict(owner_client, private_store):
    owner_client.post(url(private_store, "note"), {"body_md": "original", "client_nonce": "retry-1"})
    response = owner_client.post(url(private_store, "note"), {"body_md": "changed", "client_nonce": "retry-1"})
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "nonce_conflict"
    assert response["x-should-retry"] == "false"
    assert list(private_store.entries.values_list("body_md", flat=True)) == ["original"]


def test_note_nonce_is_scoped_to_the_author(make_client, owner):
    project_member = ProjectMembershipFactory(user=owner).user
    colleague = ProjectMembershipFactory(project=owner.project_memberships.get().project).user
    store = project_store(owner.project_memberships.get().project)
    for user in (project_member, colleague):
        response = make_client(user).post(url(store, "note"), {"body_md": "same", "client_nonce": "shared"})
        assert response.status_code == 201
    assert store.entries.count() == 2


def test_note_nonce_is_scoped_to_the_store(owner_client, owner, private_store):
    other = StoreFactory(owner=owner, canonical=False)
    for store in (private_store, other):
        response = owner_client.post(url(store, "note"), {"body_md": "same", "client_nonce": "shared"})
        assert response.status_code == 201


def test_note_to_an_archived_store_is_a_conflict(owner_client, private_store):
    store_services.archive_store(store=private_store)
    response = owner_client.post(url(private_store, "note"), {"body_md": "x"})
    assert response.status_code == 409
    assert response.json()["error"]["details"]["reason"] == "store_archived"
    private_store.refresh_from_db()
    assert private_store.entry_count == 0


def test_note_by_a_reader_is_forbidden(make_client, reader, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    response = make_client(reader).post(url(private_store, "note"), {"body_md": "x"})
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"


def test_note_by_a_nonreader_is_identical_to_a_missing_store(stranger_client, private_store):
    hidden = stranger_client.post(url(private_store, "note"), {"body_md": "x"})
    missing = stranger_client.post(url("00000000-0000-0000-0000-000000000000", "note"), {"body_md": "x"})
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"] == missing.json()["error"]
    assert not Entry.objects.exists()


def test_note_to_a_public_store_by_a_stranger_is_forbidden(stranger_client, public_store):
    assert stranger_client.post(url(public_store, "note"), {"body_md": "x"}).status_code == 403


def test_note_without_a_token_is_401(anon_client, public_store):
    assert anon_client.post(url(public_store, "note"), {"body_md": "x"}).status_code == 401


def test_note_with_a_read_only_token_is_403(make_client, owner, private_store):
    client = make_client(owner, scopes=["agent:read"])
    response = client.post(url(private_store, "note"), {"body_md": "x"})
    assert response.status_code == 403
    assert "memories:write" in response.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_note_costs_two_statements_token_with_store_and_one_append(make_client, owner):
    """Issue 17: the token and the store access in one statement (accounts.authentication), then the append."""
    store = StoreFactory(owner=owner)
    client = make_client(owner, scopes=account_services.ALL_SCOPES)
    client.post(url(store, "note"), {"body_md": "warm-up"})  # records the token's last use
    with CaptureQueriesContext(connection) as queries:
        response = client.post(url(store, "note"), {"body_md": "measured", "client_nonce": "n-1"})
    assert response.status_code == 201
    assert len(queries) == 2, [q["sql"][:80] for q in queries]
    assert "accounts_apitoken" in queries[0]["sql"] and "LATERAL" in queries[0]["sql"]
    assert "UPDATE" in queries[-1]["sql"] and "INSERT" in queries[-1]["sql"]
