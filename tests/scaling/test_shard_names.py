"""Races decided by a constraint still map to their 4xx when the constraint carries a Citus shard suffix.

On Citus a violation names the shard's constraint (`entry_store_author_nonce_unique_102048`); issue 21's
500 came from code that compared the exact name. Here the test database's constraints are renamed the
way Citus names a shard's, then real parallel clients race through the live server: the nonce replay, the
path conflict and the canonical-store race all keep their single-node answers (no 5xx).
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from anthropic import Anthropic, ConflictError
from django.db import IntegrityError, connection

from accounts import services as account_services
from config.constraints import constraint_name, matches, violates
from memories.models import Entry
from memories.services import NONCE_CONSTRAINT
from stores.models import CanonicalStore, Store
from stores.services import CANONICAL_KEY
from tests.factories import ProjectFactory, ProjectMembershipFactory, StoreFactory, UserFactory
from versions.models import Memory

CLIENTS = 12
SHARD = "102048"


# --- the matcher ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ("entry_store_author_nonce_unique", True),  # one node
        (f"entry_store_author_nonce_unique_{SHARD}", True),  # a shard
        ("entry_store_author_nonce_unique_7", True),
        ("entry_store_seq_unique_102048", False),  # another constraint of the same table
        ("entry_store_author_nonce_unique_x", False),
        ("entry_store_author_nonce_unique_102048_2", False),
        ("entry_store_author_nonce_uniq_102048", False),
        ("", False),
        (None, False),
    ],
)
def test_matches_the_base_name_on_one_node_and_on_any_shard(reported, expected):
    assert matches(reported, NONCE_CONSTRAINT) is expected


def test_matches_the_hashed_form_citus_gives_names_too_long_for_the_suffix():
    base = "a_constraint_name_long_enough_that_a_shard_suffix_passes_63_bytes"[:60]
    assert matches(f"{base[:40]}_1a2b3c4d_102048", base)
    assert not matches(f"{base[:40]}_1a2b3c4d_102048", "a_constraint_name_short")
    assert not matches("other_prefix_1a2b3c4d_102048", base)


def test_violates_reads_the_name_from_the_psycopg_error_under_djangos(db):
    with pytest.raises(IntegrityError) as caught, connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE t (a int CONSTRAINT t_a_unique_102048 UNIQUE)")
        cursor.execute("INSERT INTO t VALUES (1), (1)")
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    assert constraint_name(caught.value) == "t_a_unique_102048"
    assert violates(caught.value, "other", "t_a_unique")
    assert not violates(caught.value, "t_a")


# --- races with shard-suffixed names ------------------------------------------------------------------


def _exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_class WHERE relname = %s AND relnamespace = current_schema()::regnamespace", (name,)
        )
        return cursor.fetchone() is not None


def _rename(table: str, old: str, new: str) -> None:
    """Rename a unique constraint (and its index) or a unique index, as Citus names a shard's."""
    if not _exists(old):
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s", (table, old))
        if cursor.fetchone():
            cursor.execute(f'ALTER TABLE "{table}" RENAME CONSTRAINT "{old}" TO "{new}"')
        else:
            cursor.execute(f'ALTER INDEX "{old}" RENAME TO "{new}"')


@pytest.fixture
def shard_names(transactional_db):
    """Rename the constraints the races hit as Citus names a shard's; restore them afterwards."""
    renamed = [
        ("memories_entry", NONCE_CONSTRAINT),
        ("versions_memory", "memory_store_path_unique"),
        ("stores_canonicalstore", CANONICAL_KEY),
    ]
    try:
        for table, name in renamed:
            _rename(table, name, f"{name}_{SHARD}")
            assert _exists(f"{name}_{SHARD}"), (table, name)
        yield
    finally:
        for table, name in renamed:
            _rename(table, f"{name}_{SHARD}", name)


def _race(work, hold: tuple[str, tuple] | None = None, waiting_on: str = "") -> list:
    """Run ``work(i)`` in CLIENTS threads released together; return their results.

    hold: (SQL, parameters) run first in a transaction of a connection of our own (it takes a lock the clients need);
    it is rolled back once all CLIENTS requests wait on a lock in a statement containing `waiting_on`,
    so every client has read the state before any of them writes: the race is forced, not hoped for.
    """
    barrier = threading.Barrier(CLIENTS)

    def run(i):
        barrier.wait()
        return work(i)

    holder = psycopg.connect(**connection.get_connection_params()) if hold else None
    try:
        if holder is not None:
            holder.execute(*hold)
        with ThreadPoolExecutor(CLIENTS) as pool:
            pending = [pool.submit(run, i) for i in range(CLIENTS)]
            if holder is not None:
                _wait_for_waiters(waiting_on)
                holder.rollback()
            return [future.result() for future in pending]
    finally:
        if holder is not None:
            holder.close()


def _wait_for_waiters(fragment: str) -> None:
    with psycopg.connect(**connection.get_connection_params()) as probe:
        probe.autocommit = True
        for _ in range(600):
            (waiting,) = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position(%s in query) > 0"
                " AND datname = current_database()",
                (fragment,),
            ).fetchone()
            if waiting >= CLIENTS:
                return
            time.sleep(0.05)
    raise AssertionError(f"only {waiting} of {CLIENTS} requests reached the lock")


def _bearer(user) -> dict:
    secret = account_services.issue_token(user=user, scopes=account_services.ALL_SCOPES).secret
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.django_db(transaction=True)
def test_twelve_simultaneous_notes_with_one_nonce_store_one_entry(shard_names, live_server):
    owner = UserFactory(handle="nonce-owner")
    store = StoreFactory(owner=owner)
    headers = _bearer(owner)

    def note(_):
        with httpx.Client(headers=headers, timeout=60) as http:
            response = http.post(
                f"{live_server.url}/api/v1/memories/{store.pk}/note",
                json={"body_md": "exactly once", "client_nonce": "retry-42"},
            )
        return response.status_code, response.json()

    # Every note reads "no entry with this nonce yet" before the store row lock lets one of them write.
    outcomes = _race(
        note, hold=("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE", (store.pk,)), waiting_on="entry_count + 1"
    )
    assert sorted(status for status, _ in outcomes) == [200] * (CLIENTS - 1) + [201], outcomes
    assert {body["data"]["seq"] for _, body in outcomes} == {0}
    assert list(Entry.objects.filter(store=store).values_list("seq", "body_md")) == [(0, "exactly once")]
    store.refresh_from_db()
    assert store.entry_count == 1


@pytest.mark.django_db(transaction=True)
def test_twelve_simultaneous_creates_at_one_path_leave_one_memory(shard_names, live_server):
    owner = UserFactory(handle="path-owner")
    store = StoreFactory(owner=owner)
    clients = [
        Anthropic(
            base_url=f"{live_server.url}/api",
            auth_token=account_services.issue_token(user=owner, scopes=account_services.ALL_SCOPES).secret,
            max_retries=0,
        )
        for _ in range(CLIENTS)
    ]

    def create(i):
        try:
            clients[i].beta.memory_stores.memories.create(str(store.pk), path="/same.md", content=f"writer {i}")
            return "created"
        except ConflictError as exc:
            return exc.type

    try:
        outcomes = _race(create)
    finally:
        for client in clients:
            client.close()
    assert sorted(outcomes) == ["created"] + ["memory_path_conflict_error"] * (CLIENTS - 1)
    assert Memory.objects.filter(store=store).count() == 1


@pytest.mark.django_db(transaction=True)
def test_twelve_simultaneous_ensures_of_one_subject_make_one_canonical_store(shard_names, live_server):
    project = ProjectFactory(slug="apollo-shards")
    members = [UserFactory(handle=f"member-{i}") for i in range(CLIENTS)]
    for member in members:
        ProjectMembershipFactory(project=project, user=member)
    headers = [_bearer(member) for member in members]

    def ensure(i):
        with httpx.Client(headers=headers[i], timeout=60) as http:
            response = http.post(
                f"{live_server.url}/api/v1/memories", json={"scope": "project", "subject": str(project.pk)}
            )
        return response.status_code, response.json()["data"]["id"]

    # Every ensure finds no canonical store and creates one; all wait on the subject's key, held here.
    hold = ("INSERT INTO stores_canonicalstore VALUES ('project', %s, %s)", (project.pk, uuid.uuid4()))
    outcomes = _race(ensure, hold=hold, waiting_on="stores_canonicalstore")
    assert sorted(status for status, _ in outcomes) == [200] * (CLIENTS - 1) + [201], outcomes
    assert len({store_id for _, store_id in outcomes}) == 1
    assert Store.objects.filter(project=project).count() == 1  # the losers' stores were rolled back
    assert list(CanonicalStore.objects.values_list("store_id", flat=True)) == [Store.objects.get(project=project).pk]
