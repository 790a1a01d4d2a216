"""The 0041 import (SPEC §7): archives, chronological lossless import, privacy, idempotence, dry run."""

from __future__ import annotations

import pytest

from accounts.models import ProjectMembership, SectionMembership
from legacy import services
from legacy.models import (
    ArchivedAssessment,
    ArchivedRecord,
    ArchivedRevision,
    Assessment,
    Record,
    Revision,
)
from memories.models import Entry
from stores.errors import StoreNotFound
from stores.models import ReaderGrant, Scope, Store
from stores.selectors import get_store_for
from tests.factories import ProjectMembershipFactory, ReaderGrantFactory, StoreFactory, UserFactory
from tests.legacy.factories import LegacyRecordFactory
from tests.legacy.helpers import archived_equals, assert_valid_split, cluster_boundaries

PROVENANCE_KEYS = {"source", "source_id", "project", "key", "status", "part", "parts", "label_length"}


def canonical_store(user) -> Store:
    return Store.objects.get(scope=Scope.USER, canonical=True, owner=user)


def parts_by_record() -> dict[int, list[Entry]]:
    grouped: dict[int, list[Entry]] = {}
    for entry in Entry.objects.order_by("store_id", "seq"):
        grouped.setdefault(entry.provenance["source_id"], []).append(entry)
    return grouped


@pytest.mark.django_db
def test_archives_hold_every_legacy_row_unchanged(world, run_0041):
    run_0041()
    for source, archive in [(Record, ArchivedRecord), (Assessment, ArchivedAssessment), (Revision, ArchivedRevision)]:
        archived = {row.source_id: row.data for row in archive.objects.all()}
        rows = list(source.objects.all())
        assert rows, f"the generator made no {source.__name__}"
        assert set(archived) == {row.pk for row in rows}
        assert all(archived_equals(row, archived[row.pk]) for row in rows)


@pytest.mark.django_db
def test_each_author_store_holds_their_records_parts_in_chronological_order(world, run_0041):
    run_0041()
    for author in world["authors"]:
        store = canonical_store(author)
        entries = list(Entry.objects.filter(store=store).order_by("seq"))
        assert [entry.seq for entry in entries] == list(range(store.entry_count))
        expected = list(Record.objects.filter(author=author).order_by("created_at", "id").values_list("id", flat=True))
        seen = [(entry.provenance["source_id"], entry.provenance["part"]) for entry in entries]
        ordered_ids = list(dict.fromkeys(source_id for source_id, _ in seen))
        assert ordered_ids == expected
        assert seen == sorted(seen, key=lambda pair: (expected.index(pair[0]), pair[1]))
        assert all(entry.author_id == author.pk for entry in entries)


@pytest.mark.django_db
def test_every_record_is_rebuilt_byte_for_byte_from_valid_parts_cut_at_cluster_boundaries(world, run_0041):
    run_0041()
    grouped = parts_by_record()
    for record in Record.objects.all():
        document = f"{record.label}\n\n{record.description}"
        entries = grouped[record.pk]
        assert [entry.provenance["part"] for entry in entries] == list(range(1, len(entries) + 1))
        assert all(entry.size_bytes == len(entry.body_md.encode("utf-8")) for entry in entries)
        assert_valid_split(document, [entry.body_md for entry in entries])


@pytest.mark.django_db
def test_a_cluster_larger_than_the_limit_is_the_only_place_a_cut_falls_inside_a_cluster(world, run_0041):
    run_0041()
    record = Record.objects.get(label="giant cluster")
    parts = [entry.body_md for entry in parts_by_record()[record.pk]]
    document = f"{record.label}\n\n{record.description}"
    boundaries, inside = cluster_boundaries(document)
    cuts = {sum(len(part) for part in parts[: index + 1]) for index in range(len(parts) - 1)}
    assert cuts & inside, "the oversized cluster had to be cut"
    assert cuts <= boundaries | inside


@pytest.mark.django_db
def test_documents_of_exactly_1024_bytes_stay_whole_and_1025_bytes_split_in_two(world, run_0041):
    run_0041()
    grouped = parts_by_record()
    exact = grouped[Record.objects.get(label="exact").pk]
    over = grouped[Record.objects.get(label="over").pk]
    assert [entry.size_bytes for entry in exact] == [1024]
    assert len(over) == 2 and sum(entry.size_bytes for entry in over) == 1025


@pytest.mark.django_db
def test_provenance_names_the_source_record_and_part(world, run_0041):
    run_0041()
    grouped = parts_by_record()
    for record in Record.objects.all():
        entries = grouped[record.pk]
        for number, entry in enumerate(entries, start=1):
            assert set(entry.provenance) == PROVENANCE_KEYS
            assert entry.provenance == {
                "source": "record",
                "source_id": record.pk,
                "project": str(record.project_id) if record.project_id else None,
                "key": record.key,
                "status": record.status,
                "part": number,
                "parts": len(entries),
                "label_length": len(record.label),
            }
            assert entry.client_nonce == f"legacy-0041:{record.pk}:{number}"
        document = "".join(entry.body_md for entry in entries)
        assert document[: entries[0].provenance["label_length"]] == record.label


@pytest.mark.django_db
def test_import_creates_no_reader_grant_or_membership_and_keeps_stores_private(world, run_0041):
    run_0041()
    assert ReaderGrant.objects.count() == 0
    assert ProjectMembership.objects.count() == 0
    assert SectionMembership.objects.count() == 0
    stores = Store.objects.filter(owner__in=world["authors"])
    assert {(store.scope, store.visibility, store.canonical) for store in stores} == {("user", "private", True)}


@pytest.mark.django_db
def test_other_users_staff_and_project_members_cannot_read_the_imported_store(world, run_0041, staff, stranger):
    record = Record.objects.filter(project__isnull=False, price__gt=0).first()
    assert record is not None
    colleague = UserFactory()
    ProjectMembershipFactory(project=record.project, user=colleague, role="owner")
    run_0041()
    store = canonical_store(record.author)
    for other in [stranger, staff, colleague, *[a for a in world["authors"] if a != record.author]]:
        with pytest.raises(StoreNotFound):
            get_store_for(other, store.pk)
    assert get_store_for(record.author, store.pk).pk == store.pk


@pytest.mark.django_db
def test_imported_store_is_a_404_over_http_for_others(world, run_0041, make_client, staff, stranger):
    run_0041()
    author = world["authors"][0]
    store = canonical_store(author)
    assert make_client(author).get(f"/api/v1/memories/{store.pk}").status_code == 200
    recall = make_client(author).get(f"/api/v1/memories/{store.pk}/recall", {"pattern": "."})
    assert recall.status_code == 200 and recall.json()["data"]
    missing = make_client(stranger).get("/api/v1/memories/00000000-0000-0000-0000-000000000000")
    for other in (stranger, staff):
        for path in ("", "/wake", "/zoom?range=0"):
            response = make_client(other).get(f"/api/v1/memories/{store.pk}{path}")
            assert response.status_code == 404
            assert response.json()["error"] == missing.json()["error"]


@pytest.mark.django_db
def test_a_second_run_imports_nothing(world, run_0041):
    run_0041()
    counts = (Entry.objects.count(), ArchivedRecord.objects.count(), Store.objects.count())
    summary = services.migrate_0041()
    assert (Entry.objects.count(), ArchivedRecord.objects.count(), Store.objects.count()) == counts
    assert (summary.records, summary.entries, summary.archived_records) == (0, 0, 0)
    assert summary.skipped_already_imported == Record.objects.count()


@pytest.mark.django_db
def test_dry_run_writes_nothing_and_reports_what_the_real_run_does(world, run_0041):
    output = run_0041("--dry-run")
    assert "DRY RUN" in output
    assert (Entry.objects.count(), Store.objects.count(), ArchivedRecord.objects.count()) == (0, 0, 0)
    dry = services.migrate_0041(dry_run=True, batch_size=7)
    real = services.migrate_0041(batch_size=7)
    ignored = {"dry_run", "duration_s"}
    assert {k: v for k, v in dry.as_dict().items() if k not in ignored} == {
        k: v for k, v in real.as_dict().items() if k not in ignored
    }
    assert real.entries == Entry.objects.count()
    assert real.stores_created == len(world["authors"])


@pytest.mark.django_db
def test_small_batches_give_the_same_result_as_one_big_batch(world):
    services.migrate_0041(batch_size=3)
    small = sorted(Entry.objects.values_list("store__owner_id", "seq", "client_nonce", "body_md"))
    Entry.objects.all().delete()
    Store.objects.update(entry_count=0)
    services.migrate_0041(batch_size=10_000)
    assert sorted(Entry.objects.values_list("store__owner_id", "seq", "client_nonce", "body_md")) == small


@pytest.mark.django_db
def test_an_existing_store_keeps_its_metadata_and_imports_append_after_its_entries(db):
    author = UserFactory()
    store = StoreFactory(owner=author, name="Mine", description="my notes", metadata={"team": "blue"})
    Entry.objects.create(store=store, seq=0, author=author, body_md="earlier", size_bytes=7)
    Store.objects.filter(pk=store.pk).update(entry_count=1)
    LegacyRecordFactory(author=author, label="old", description="text")
    summary = services.migrate_0041()
    store.refresh_from_db()
    assert (store.name, store.description, store.metadata, store.visibility) == (
        "Mine",
        "my notes",
        {"team": "blue"},
        "private",
    )
    assert store.entry_count == 2
    assert Entry.objects.get(store=store, seq=1).body_md == "old\n\ntext"
    assert summary.stores_created == 0


@pytest.mark.django_db
def test_a_public_or_shared_store_receives_nothing_until_it_is_private_again(db):
    public_author, sharing_author = UserFactory(), UserFactory()
    public = StoreFactory(owner=public_author, visibility="public")
    shared = StoreFactory(owner=sharing_author)
    ReaderGrantFactory(store=shared)
    waiting = LegacyRecordFactory(author=public_author)
    LegacyRecordFactory(author=sharing_author)
    summary = services.migrate_0041()
    assert summary.skipped_shared_store == 2
    assert Entry.objects.count() == 0
    Store.objects.filter(pk=public.pk).update(visibility="private")
    assert services.migrate_0041().records == 1
    assert {entry.provenance["source_id"] for entry in Entry.objects.filter(store=public)} == {waiting.pk}


@pytest.mark.django_db
def test_an_archived_store_receives_nothing(db):
    from django.utils import timezone

    author = UserFactory()
    StoreFactory(owner=author, archived_at=timezone.now())
    LegacyRecordFactory(author=author)
    summary = services.migrate_0041()
    assert (summary.records, summary.skipped_archived_store, Entry.objects.count()) == (0, 1, 0)


@pytest.mark.django_db
def test_command_prints_a_summary_and_no_progress_bar_when_not_on_a_terminal(world, run_0041):
    output = run_0041("--batch-size", "5")
    records = Record.objects.count()
    assert f"records imported: {records}" in output
    assert f"entries imported: {Entry.objects.count()}" in output
    assert f"authors: {len(world['authors'])}" in output
    assert "skipped: 0" in output
    assert "duration:" in output
    assert "━" not in output and "\x1b[" not in output


@pytest.mark.django_db
def test_command_rejects_a_batch_size_below_one(run_0041):
    from django.core.management import CommandError

    with pytest.raises(CommandError):
        run_0041("--batch-size", "0")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("part", [1, 2])
def test_a_note_holding_a_records_part_nonce_costs_that_record_only(part):
    """A user's note sent with client_nonce `legacy-0041:<id>:2` failed the batch's COPY on its unique nonce on
    every run, and every later batch with it (a breaker); one on part 1 made the record count as imported.
    Now that record alone is skipped — counted, logged — and every other record is imported."""
    bob, carol = UserFactory(handle="bob"), UserFactory(handle="carol")
    squatted = LegacyRecordFactory(author=bob, label="mine", description="x" * 1500)  # two parts
    kept = LegacyRecordFactory(author=bob, label="also mine", description="short")
    others = [LegacyRecordFactory(author=carol) for _ in range(3)]
    store = StoreFactory(owner=bob, canonical=True)
    nonce = services.part_nonce(squatted.pk, part)
    Entry.objects.create(store=store, seq=0, author=bob, body_md="poison", size_bytes=6, client_nonce=nonce)
    Store.objects.filter(pk=store.pk).update(entry_count=1)
    predicted = services.migrate_0041(dry_run=True)
    summary = services.migrate_0041(batch_size=2)
    for figures in (predicted, summary):
        assert (figures.records, figures.skipped_nonce_taken, figures.skipped_already_imported) == (4, 1, 0)
    imported = {entry.provenance["source_id"] for entry in Entry.objects.exclude(provenance=None)}
    assert imported == {kept.pk, *(record.pk for record in others)}
    again = services.migrate_0041()
    assert (again.records, again.skipped_nonce_taken, again.skipped_already_imported) == (0, 1, 4)
