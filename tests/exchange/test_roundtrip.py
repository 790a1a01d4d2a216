"""Export → import → export is lossless (SPEC §8b), and the imported store behaves like the original."""

from __future__ import annotations

import pytest

from backoffice.models import AuditEvent
from memories.exchange.format import FORMAT, VERSION
from memories.models import Entry, Summary
from stores.models import ReaderGrant, Store
from tests.exchange.conftest import export_bytes, import_bytes, parse, without_export_time, without_ids
from tests.log.conftest import assert_tree_consistent, url
from versions.models import Memory, Version

pytestmark = pytest.mark.django_db


def snapshot_rows(store) -> dict:
    """Everything a store holds, without database ids, for a second, independent comparison."""
    return {
        "entries": list(
            Entry.objects.filter(store=store)
            .order_by("seq")
            .values_list("seq", "author__handle", "created_at", "body_md", "size_bytes", "client_nonce")
        ),
        "entry_extras": list(
            Entry.objects.filter(store=store)
            .order_by("seq")
            .values_list("session_id", "provenance", "redacted_at", "redacted_by__handle")
        ),
        "summaries": sorted(
            Summary.objects.filter(store=store).values_list(
                "start", "end", "summary_md", "source_digest", "generation", "invalidated_at", "redacted_at", "model"
            ),
            key=repr,
        ),
        "versions": sorted(
            Version.objects.filter(store=store).values_list(
                "operation", "path", "content", "content_sha256", "created_at", "redacted_at", "created_by"
            ),
            key=repr,
        ),
        "memories": sorted(Memory.objects.filter(store=store).values_list("path", "content", "created_at")),
        "readers": sorted(ReaderGrant.objects.filter(store=store).values_list("user__handle", "active")),
        "store": Store.objects.filter(pk=store.pk).values(
            "name", "description", "metadata", "visibility", "entry_count", "generation", "summary_count"
        )[0],
    }


def test_the_export_holds_every_kind_of_row(rich_store):
    objects = parse(export_bytes(rich_store))
    header, end = objects[0], objects[-1]
    assert (header["type"], header["version"]) == (FORMAT, VERSION)
    assert header["store"]["id"] == str(rich_store.pk) and header["store"]["metadata"] == {
        "team": "infra",
        "tier": "gold",
    }
    kinds = [obj["type"] for obj in objects[1:-1]]
    assert kinds == sorted(kinds, key=["entry", "summary", "version", "memory", "reader"].index)
    counts = {"entries": "entry", "summaries": "summary", "versions": "version", "memories": "memory"}
    counts["readers"] = "reader"
    assert header["counts"] == {section: kinds.count(kind) for section, kind in counts.items()}
    assert end["type"] == "end" and end["lines"] == len(objects) - 1
    entries = [obj for obj in objects if obj["type"] == "entry"]
    assert [obj["seq"] for obj in entries] == list(range(40))
    redacted = [obj for obj in entries if obj["body_md"] is None]
    assert [obj["seq"] for obj in redacted] == [6, 21] and all(obj["redacted_by"] == "owner" for obj in redacted)
    summaries = [obj for obj in objects if obj["type"] == "summary"]
    assert any(obj["invalidated_at"] and obj["summary_md"] for obj in summaries)  # forgotten, kept
    assert any(obj["redacted_at"] and obj["summary_md"] is None for obj in summaries)
    versions = [obj for obj in objects if obj["type"] == "version"]
    assert {obj["operation"] for obj in versions} == {"created", "modified", "deleted"}
    assert any(obj["redacted_at"] and obj["content"] is None for obj in versions)
    assert [obj["active"] for obj in objects if obj["type"] == "reader"] == [True, False]
    assert header["handles"] == ["bob", "carol", "dave", "owner"]


def test_export_import_export_is_byte_for_byte_apart_from_the_export_time(rich_store):
    first = export_bytes(rich_store)
    before = snapshot_rows(rich_store)
    Store.objects.filter(pk=rich_store.pk).delete()  # a fresh server: the store's ids are free again
    imported = import_bytes(first).store
    assert imported.pk == rich_store.pk  # ids are kept when they are free
    assert without_export_time(export_bytes(imported)) == without_export_time(first)
    assert snapshot_rows(imported) == before
    assert_tree_consistent(imported)


def test_importing_beside_the_original_gives_new_ids_and_the_same_content(rich_store):
    first = export_bytes(rich_store)
    result = import_bytes(first)
    imported = result.store
    assert imported.pk != rich_store.pk
    assert result.warnings == [
        f"Store id {rich_store.pk} is taken on this server; the import got new ids ({imported.pk})."
    ]
    second = export_bytes(imported)
    assert without_ids(second) == without_ids(first)
    assert not set(Version.objects.filter(store=imported).values_list("pk", flat=True)) & set(
        Version.objects.filter(store=rich_store).values_list("pk", flat=True)
    )
    assert snapshot_rows(imported)["entries"] == snapshot_rows(rich_store)["entries"]


def test_the_redaction_reason_is_never_exported(rich_store):
    assert AuditEvent.objects.filter(reason="builder redaction").count() == 2
    assert b"builder redaction" not in export_bytes(rich_store)


def test_the_imported_store_carries_on_where_the_original_stopped(make_client, cast, rich_store):
    first = export_bytes(rich_store)
    Store.objects.filter(pk=rich_store.pk).delete()
    store = import_bytes(first).store
    owner_client, reader_client = make_client(cast["owner"]), make_client(cast["carol"])
    note = owner_client.post(url(store, "note"), {"body_md": "after the move"})
    assert note.status_code == 201 and note.json()["data"]["seq"] == 40
    replay = owner_client.post(url(store, "note"), {"body_md": "entry 0 by owner: quote «0»", "client_nonce": "n-0"})
    assert replay.status_code == 200 and replay.json()["data"]["seq"] == 0  # nonces came along
    redacted = owner_client.post(url(store, "note"), {"body_md": "anything", "client_nonce": "n-6"})
    assert redacted.status_code == 409 and redacted.json()["error"]["details"]["reason"] == "entry_redacted"
    assert reader_client.get(url(store, "wake")).status_code == 200
    assert make_client(cast["dave"]).get(url(store, "wake")).status_code == 404  # revoked stays revoked
    wake = owner_client.get(url(store, "wake"), {"budget": 128}).json()["data"]
    assert wake["complete"] is True  # the imported tree is whole; the one new entry needs no summary
    assert [line["kind"] for line in wake["lines"] if line["range"] in ("6", "21")] == ["redacted", "redacted"]
    files = owner_client.get(f"/api/v1/memory_stores/{store.pk}/memories", {"view": "full"}).json()["data"]
    assert len(files) == 6 and all(item["content"] for item in files)
