"""The hot-path machinery of issue 17: the token and the store in one statement, shared serializers.

`config.compiled.CompiledLateral` joins two compiled QuerySets; these tests prove it returns exactly what
the two queries return on their own, for every access case, and that the request path uses it once.
`config.api.validate` must give what a fresh serializer gives, errors included.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

import psycopg._queries
import pytest
from django.utils import timezone
from rest_framework import serializers

from accounts import services as account_services
from accounts.authentication import _TOKEN_BY_DIGEST, _TOKEN_WITH_STORE
from accounts.services import token_digest
from config.api import prototype, validate
from memories.api.serializers import EntrySerializer, NoteRequestSerializer
from memories.models import Entry
from stores.errors import StoreNotFound
from stores.selectors import STORE_FOR_USER, get_store_for, prefetch_store
from tests.factories import ProjectFactory, ProjectMembershipFactory, StoreFactory

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict:
    """Every loaded column, annotation and select_related object of a model instance, comparable."""
    if instance is None:
        return {}
    out = {k: v for k, v in vars(instance).items() if not k.startswith("_")}
    for name, related in instance._state.fields_cache.items():
        out[f"related:{name}"] = _fields(related)
    return out


def _cases(owner, stranger):
    own = StoreFactory(owner=owner, name="own")
    public = StoreFactory(owner=stranger, canonical=False, name="public", visibility="public")
    private = StoreFactory(owner=stranger, canonical=False, name="private")
    project = ProjectFactory()
    ProjectMembershipFactory(project=project, user=owner)
    shared = StoreFactory(scope="project", owner=None, project=project, visibility=None, name="project")
    return {"own": own.pk, "public": public.pk, "private": private.pk, "project": shared.pk, "missing": uuid.uuid4()}


def test_the_joined_statement_returns_what_the_two_queries_return(owner, stranger):
    issued = account_services.issue_token(user=owner)
    digest = token_digest(issued.secret)
    for name, pk in _cases(owner, stranger).items():
        token, store = _TOKEN_WITH_STORE.first(digest=digest, pk=pk)
        alone = _TOKEN_BY_DIGEST.first(digest=digest)
        expected = STORE_FOR_USER.first(user_id=owner.pk, pk=pk)
        assert _fields(token) == _fields(alone), name
        assert _fields(store) == _fields(expected), name
        assert (store is None) == (name in ("private", "missing")), name
        if store is not None:
            assert store.can_write == (name in ("own", "project")) and store.is_owner == (name == "own"), name


def test_an_unknown_token_finds_nothing(owner):
    store = StoreFactory(owner=owner)
    assert _TOKEN_WITH_STORE.first(digest=token_digest("mem_unknown"), pk=store.pk) == (None, None)


def test_the_long_statement_is_converted_once_not_per_request(owner):
    """psycopg re-parses queries over its cache limit on every call; config.compiled raises that limit."""
    compiled = _TOKEN_WITH_STORE._get("default")
    assert len(compiled.sql.encode()) > 4096  # what psycopg caches by default
    assert len(compiled.sql.encode()) <= psycopg._queries.MAX_CACHED_STATEMENT_LENGTH
    store = StoreFactory(owner=owner)
    digest = token_digest(account_services.issue_token(user=owner).secret)
    _TOKEN_WITH_STORE.first(digest=digest, pk=store.pk)
    hits = psycopg._queries._query2pg.cache_info().hits
    _TOKEN_WITH_STORE.first(digest=digest, pk=store.pk)
    assert psycopg._queries._query2pg.cache_info().hits == hits + 1


def test_a_prefetched_store_is_used_once_for_its_own_id_only(owner, stranger, django_assert_num_queries):
    own = StoreFactory(owner=owner)
    other = StoreFactory(owner=owner, canonical=False, name="other")
    found = STORE_FOR_USER.first(user_id=owner.pk, pk=own.pk)
    prefetch_store(owner, own.pk, found)
    with django_assert_num_queries(0):
        assert get_store_for(owner, own.pk, need="owner") is found
    with django_assert_num_queries(1):  # used up: the next call asks the database again
        assert get_store_for(owner, own.pk).pk == own.pk
    prefetch_store(owner, own.pk, found)
    with django_assert_num_queries(1):  # another store id never takes the prefetched answer
        assert get_store_for(owner, other.pk).pk == other.pk
    prefetch_store(stranger, own.pk, None)  # "unreadable" for the stranger stays a 404
    with pytest.raises(StoreNotFound):
        get_store_for(stranger, own.pk)


def test_a_store_request_runs_the_token_and_the_store_as_one_statement(owner_client, private_store):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    owner_client.get(f"/api/v1/memories/{private_store.pk}/wake")  # records the token's last use
    with CaptureQueriesContext(connection) as queries:
        response = owner_client.get(f"/api/v1/memories/{private_store.pk}")
    assert response.status_code == 200
    assert len(queries) == 1 and "LATERAL" in queries[0]["sql"]


def test_the_token_checks_still_come_first(make_client, owner, stranger):
    """A revoked token is a 401 even on a store it could read; an unreadable store is a 404 as before."""
    store = StoreFactory(owner=owner)
    client = make_client(owner)
    account_services.revoke_token(token=client.token)
    assert client.get(f"/api/v1/memories/{store.pk}").status_code == 401
    assert make_client(stranger).get(f"/api/v1/memories/{store.pk}").status_code == 404


# --- shared serializers (config.api) -------------------------------------------------------------------


def _entries(owner, redactor):
    when = dt.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    yield Entry(seq=0, author=owner, body_md="plain", size_bytes=5, client_nonce=None, created_at=when)
    yield Entry(seq=7, author=owner, body_md="ünï — 😀", size_bytes=14, client_nonce="n-1", created_at=when)
    yield Entry(
        seq=9, author=owner, body_md=None, size_bytes=0, client_nonce="n-2", created_at=when,
        redacted_at=when + dt.timedelta(days=1), redacted_by=redactor,
    )  # fmt: skip


def test_the_entry_rendering_equals_a_fresh_serializer(owner, stranger):
    from memories.api.serializers import render_entry

    for entry in _entries(owner, stranger):
        assert json.dumps(render_entry(entry)) == json.dumps(EntrySerializer(entry).data)


@pytest.mark.parametrize(
    "data",
    [
        {"body_md": "hello", "client_nonce": "n"},
        {"body_md": "hello"},
        {"body_md": ""},
        {"body_md": "x" * 1025},
        {"body_md": "ok", "extra": 1},
        {"body_md": 5},
        {"body_md": "a\x00b"},
        {"client_nonce": None},
        [],
        None,
        "text",
    ],
)
def test_validate_equals_is_valid_including_the_errors(data):
    fresh = NoteRequestSerializer(data=data)
    if fresh.is_valid():
        assert validate(NoteRequestSerializer, data) == fresh.validated_data
    else:
        with pytest.raises(serializers.ValidationError) as raised:
            validate(NoteRequestSerializer, data)
        assert raised.value.detail == fresh.errors


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("MemoryCreateRequestSerializer", {"path": "/a/b.md", "content": "x"}),
        ("MemoryCreateRequestSerializer", {"path": "/a/./b.md", "content": "x"}),
        ("MemoryCreateRequestSerializer", {"path": "/a.md", "content": 7, "extra": 1}),
        ("MemoryUpdateRequestSerializer", {"content": "y", "precondition": {"type": "content_sha256",
                                                                            "content_sha256": "a" * 64}}),
        ("MemoryUpdateRequestSerializer", {"precondition": {"type": "etag", "content_sha256": "A" * 64}}),
        ("MemoryUpdateRequestSerializer", {"path": None, "content": None}),
        ("MemoryUpdateRequestSerializer", []),
        ("MemoryStoreCreateRequestSerializer", {"name": "n", "metadata": {"k": "v"}}),
        ("MemoryStoreCreateRequestSerializer", {"name": ""}),
        ("MemoryListQuerySerializer", {"view": "full", "limit": "100"}),  # overrides `validate`: a fresh one
        ("MemoryListQuerySerializer", {"limit": "0"}),
    ],
)  # fmt: skip
def test_validate_equals_is_valid_for_the_file_surface(name, data):
    """The Memory Stores views validate through `validate` (shared prototypes where the serializer allows):
    the same data, the same 400 details — and InvalidRequest, where a serializer raises it — as DRF's
    own `is_valid` on a fresh instance."""
    from config.errors import InvalidRequest
    from versions.api import serializers as file_serializers

    cls = getattr(file_serializers, name)
    if cls.validate is serializers.Serializer.validate:
        prototype(cls)  # shared: no TypeError (a RawField keeps no state)
    try:
        fresh = cls(data=data)
        valid = fresh.is_valid()
    except InvalidRequest as refused:
        with pytest.raises(InvalidRequest) as raised:
            validate(cls, data)
        assert str(raised.value) == str(refused)
        return
    if valid:
        assert validate(cls, data) == fresh.validated_data
    else:
        with pytest.raises(serializers.ValidationError) as raised:
            validate(cls, data)
        assert raised.value.detail == fresh.errors


def test_a_serializer_that_may_read_the_context_is_not_shared():
    class Linked(serializers.Serializer):
        url = serializers.HyperlinkedIdentityField(view_name="x")

    class Method(serializers.Serializer):
        who = serializers.SerializerMethodField()

    class Validating(serializers.Serializer):
        name = serializers.CharField()

        def validate(self, attrs):
            return attrs

    for cls in (Linked, Method, Validating):
        with pytest.raises(TypeError):
            prototype(cls)
    assert prototype(EntrySerializer) is prototype(EntrySerializer)


def test_a_memory_renders_per_view_as_a_fresh_serializer(owner):
    from versions.api.serializers import MemorySerializer
    from versions.models import Memory

    store = StoreFactory(owner=owner)
    when = dt.datetime(2026, 12, 1, 10, 0, 0, 5, tzinfo=dt.UTC)
    memory = Memory(
        id=uuid.uuid4(), store_id=store.pk, path="/a.md", content="ünï", content_sha256="0" * 64,
        content_size_bytes=6, current_version_id=uuid.uuid4(), created_at=when, updated_at=when,
    )  # fmt: skip
    from versions.api.responses import RENDER_MEMORY

    for view in ("basic", "full"):
        for zone in ("UTC", "America/St_Johns"):
            with timezone.override(zone):  # the plain rendering (the file endpoints' responses), byte for byte
                fresh = MemorySerializer(memory, context={"view": view}).data
                assert json.dumps(RENDER_MEMORY[view](memory)) == json.dumps(fresh)
    assert RENDER_MEMORY["basic"](memory)["content"] is None and RENDER_MEMORY["full"](memory)["content"] == "ünï"


def test_constants_are_written_into_the_text_and_the_slots_stay_parameters():
    from config.compiled import _inline_constants

    sql = "SELECT %s, %s, %s, '100%%', %s, %s, %s FROM t WHERE a = %s"
    params = ["o'brien 50%", True, 7, None, uuid.UUID(int=1), "slot", "x"]
    text, kept, slots = _inline_constants(sql, params, [(5, "name")])
    assert text == "SELECT 'o''brien 50%%', true, 7, '100%%', %s, %s, %s FROM t WHERE a = 'x'"
    assert kept == [None, uuid.UUID(int=1), "slot"] and slots == [(2, "name")]


def test_the_token_and_store_statement_sends_only_its_two_values():
    compiled = _TOKEN_WITH_STORE._get("default")
    assert sorted(name for _, name in compiled.slots) == ["digest", "pk"] and len(compiled.params) == 2


@pytest.mark.parametrize(
    "query",
    ["pattern=a", "pattern=a&limit=5", "pattern=a&pattern=b", "pattern=a&limit=5.0", "pattern=a&limit=0",
     "pattern=a&case_sensitive=yes", "pattern=a&case_sensitive=true", "pattern=a&extra=1", "limit=3", "",
     "pattern=a&cursor=x&cursor=y"],
)  # fmt: skip
def test_validate_equals_is_valid_for_query_parameters(query):
    from django.http import QueryDict

    from memories.api.serializers import RecallQuerySerializer

    params = QueryDict(query)
    fresh = RecallQuerySerializer(data=params)
    if fresh.is_valid():
        assert validate(RecallQuerySerializer, params) == fresh.validated_data
    else:
        with pytest.raises(serializers.ValidationError) as raised:
            validate(RecallQuerySerializer, params)
        assert raised.value.detail == fresh.errors


def test_many_returns_what_first_returns_for_each_value_in_order(owner, stranger):
    """`CompiledQuery.many`: one pipelined round trip, the same rows as one call per value."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from stores.services import _LOCK_STORE

    ids = list(_cases(owner, stranger).values())
    ids = [ids[3], ids[4], ids[0], ids[2]]  # not in id order, one missing
    one_by_one = [_fields(_LOCK_STORE.first(pk=pk)) for pk in ids]
    with CaptureQueriesContext(connection) as queries:
        pipelined = _LOCK_STORE.many({"pk": pk} for pk in ids)
    assert len(queries) == 1  # Django logs the executemany once
    assert [len(rows) for rows in pipelined] == [1, 0, 1, 1]
    assert [_fields(rows[0]) if rows else {} for rows in pipelined] == one_by_one
    assert _LOCK_STORE.many([]) == []


@pytest.mark.django_db(transaction=True)
def test_pipelined_store_locks_are_all_held_until_the_transaction_ends():
    """lock_stores_in_order locks every store (each statement waits its turn on the server) and holds them."""
    import psycopg
    from django.db import connection, transaction

    from stores.services import lock_stores_in_order
    from tests.factories import UserFactory

    stores = [StoreFactory(owner=UserFactory(), name=f"locked-{n}") for n in range(3)]
    settings_dict = connection.settings_dict
    params = {"dbname": settings_dict["NAME"], "user": settings_dict["USER"]}
    params.update({k: v for k, v in (("host", settings_dict["HOST"]), ("port", settings_dict["PORT"])) if v})
    with psycopg.connect(**params, autocommit=True) as other:
        with transaction.atomic():
            locked = lock_stores_in_order([s.pk for s in reversed(stores)] + [uuid.uuid4()])
            assert sorted(locked) == sorted(s.pk for s in stores)
            for store in stores:
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE NOWAIT", [store.pk])
        for store in stores:  # released at commit
            assert other.execute("SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE NOWAIT", [store.pk]).fetchone()


@pytest.mark.django_db(transaction=True)  # the connection is closed and reopened
def test_prepared_cursors_are_reused_one_block_after_another_and_distinct_when_nested():
    from django.db import connection

    from config.compiled import prepared_cursor

    with prepared_cursor() as first:
        first.execute("SELECT %s::int", [1])
        outer = first.cursor
        with prepared_cursor() as nested:
            nested.execute("SELECT %s::int", [2])
            assert nested.cursor is not outer
            assert nested.fetchone() == (2,)
        assert first.fetchone() == (1,)  # the nested block did not touch this cursor's result
    with prepared_cursor() as again:
        assert again.cursor in (outer, nested.cursor)
        again.execute("SELECT %s::text", ["x"])
        assert again.fetchall() == [("x",)]
        again.close()  # a caller closing it: it is never handed out again
    with prepared_cursor() as after_close:
        assert after_close.cursor is not again.cursor and not after_close.cursor.closed
    reused = after_close.cursor
    connection.close()  # a new connection gets cursors of its own
    with prepared_cursor() as fresh:
        assert fresh.cursor is not reused and fresh.cursor.connection is connection.connection
        fresh.execute("SELECT %s::int", [3])
        assert fresh.fetchone() == (3,)


@pytest.mark.django_db
def test_a_reused_cursor_after_a_failed_statement_runs_the_next_one(owner):
    from django.db import IntegrityError, transaction

    from config.compiled import prepared_cursor

    with pytest.raises(IntegrityError), transaction.atomic(), prepared_cursor() as cursor:
        cursor.execute("INSERT INTO accounts_user (id) VALUES (%s)", [uuid.uuid4()])  # NOT NULL handle
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int + 1", [41])
        assert cursor.fetchone() == (42,)


@pytest.mark.django_db
def test_a_reused_cursor_never_carries_a_binary_format_or_a_row_factory_into_the_next_block():
    from psycopg.rows import dict_row

    from config.compiled import prepared_cursor

    with prepared_cursor(binary=True) as cursor:
        cursor.execute("SELECT %s::jsonb", ['{"a": 1}'])
        assert cursor.fetchone() == ({"a": 1},)  # binary jsonb is loaded as an object
        binary = cursor.cursor
    with prepared_cursor() as cursor:
        assert cursor.cursor is binary  # reused, and back to text
        cursor.execute("SELECT %s::jsonb", ['{"a": 1}'])
        assert cursor.fetchone() == ('{"a": 1}',)  # text jsonb stays text, as Django's JSON fields expect
        cursor.cursor.row_factory = dict_row
    with prepared_cursor() as cursor:
        assert cursor.cursor is not binary  # a changed row factory is not handed on
        cursor.execute("SELECT %s::int AS n", [1])
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db
def test_a_cursor_whose_adapters_a_caller_changed_is_never_handed_to_the_next_block():
    """`prepared_cursor` promises that a cursor "whose settings a caller changed is never reused"; a loader
    registered on the cursor's adapters is such a setting. Reused, it leaked into the next block (the next
    request on that connection, or the next test): an int came back as the text '7'."""
    from psycopg.types.string import TextLoader

    from config.compiled import prepared_cursor

    with prepared_cursor() as cursor:
        cursor.cursor.adapters.register_loader("int4", TextLoader)  # e.g. a caller's own type handling
        cursor.execute("SELECT %s::int", [7])
        assert cursor.fetchone() == ("7",)
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int", [7])
        assert cursor.fetchone() == (7,)


@pytest.mark.django_db
def test_an_idle_cursor_sees_adapters_registered_on_its_connection_after_it_was_made():
    """A new cursor copies its connection's adapters; an idle one handed out again must not run with the
    adapters the connection had when the cursor was made (before reuse, every block had a new cursor)."""
    from django.db import connection
    from psycopg.types.string import TextLoader

    from config.compiled import prepared_cursor

    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int", [7])
        assert cursor.fetchone() == (7,)
    connection.connection.adapters.register_loader("int4", TextLoader)
    try:
        with prepared_cursor() as cursor:
            cursor.execute("SELECT %s::int", [7])
            assert cursor.fetchone() == ("7",)
    finally:
        connection.close()  # the connection's adapters were changed for this test only


def test_every_prepared_statement_runs_its_generic_plan_from_the_first_call(owner_client, private_store, settings):
    """`DB_PLAN_CACHE_MODE` (default force_generic_plan) reaches the connection, and no hot statement is
    planned again per call: under PostgreSQL's `auto` the file writes were (custom plans, 0.3-0.4 ms of
    planning per request; docs/decisions.md "Generic plans for prepared statements"). PostgreSQL counts
    each prepared statement's custom and generic plans in `pg_prepared_statements`; `auto` would show
    custom plans for the first five calls of every statement."""
    from django.db import connection

    assert settings.DB_PLAN_CACHE_MODE == "force_generic_plan" and settings.DB_JIT is False
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone() == ("force_generic_plan",)
        # A generic plan's estimate can cross jit_above_cost for a statement that runs in a millisecond:
        # nap's scan then compiled for 400 ms on every call (docs/decisions.md).
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("off",)

    log = f"/api/v1/memories/{private_store.pk}"
    files = f"/api/v1/memory_stores/{private_store.pk}/memories"
    for k in range(3):
        assert owner_client.post(f"{log}/note", {"body_md": f"note {k}"}, format="json").status_code == 201
        assert owner_client.get(f"{log}/wake").status_code == 200
        assert owner_client.get(f"{log}/recall", {"pattern": "note"}).status_code == 200
        created = owner_client.post(files, {"path": f"/d{k}/f.md", "content": "one"}, format="json")
        assert created.status_code == 200, created.content
        memory = f"{files}/{created.json()['id']}"
        assert owner_client.post(memory, {"content": "two"}, format="json").status_code == 200
        assert owner_client.delete(memory).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        prepared = cursor.fetchall()
    writes = [row for row in prepared if "versions_memory" in row[0] and "INSERT INTO versions_version" in row[0]]
    assert len(writes) == 3, [row[0][:80] for row in prepared]  # create, update, delete
    assert all(generic >= 3 for _, generic, _ in writes)
    custom = [(statement[:120], count) for statement, _, count in prepared if count]
    assert not custom, custom


@pytest.mark.django_db(transaction=True)
def test_a_compiled_locking_read_refuses_autocommit_as_django_does(owner):
    """`lock_store` outside a transaction would lock the row only for its own statement: refused, exactly
    as Django refuses `select_for_update()` there; inside one it locks and returns the row."""
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    from stores.services import lock_store, lock_stores_in_order

    store = StoreFactory(owner=owner)
    with pytest.raises(TransactionManagementError, match="outside of a transaction"):
        lock_store(store)
    with pytest.raises(TransactionManagementError):
        lock_stores_in_order([store.pk])
    with pytest.raises(TransactionManagementError):  # Django's own refusal, for comparison
        list(type(store).objects.select_for_update().filter(pk=store.pk))
    with transaction.atomic():
        assert lock_store(store).pk == store.pk
        assert set(lock_stores_in_order([store.pk])) == {store.pk}


@pytest.mark.django_db(transaction=True)
def test_a_compiled_shared_lock_holds_its_row_and_refuses_autocommit(owner):
    """`CompiledSharedLock` appends FOR SHARE / FOR KEY SHARE to Django's SQL (the agent services' `lock_row`):
    outside a transaction it is refused as a compiled `select_for_update` is; inside one another
    connection cannot take the row FOR UPDATE until it commits."""
    import psycopg
    from django.db import connection, transaction
    from django.db.transaction import TransactionManagementError

    from config.compiled import CompiledSharedLock

    store = StoreFactory(owner=owner)
    query = CompiledSharedLock(
        lambda pk: type(store).objects.filter(pk=pk), "share", pk=uuid.UUID("00000000-0000-4000-8000-0000000005a1")
    )
    with pytest.raises(ValueError):
        CompiledSharedLock(lambda pk: type(store).objects.filter(pk=pk), "update", pk=store.pk)
    with pytest.raises(TransactionManagementError, match="outside of a transaction"):
        query.first(pk=store.pk)
    settings_dict = connection.settings_dict
    params = {"dbname": settings_dict["NAME"], "user": settings_dict["USER"]}
    params.update({k: v for k, v in (("host", settings_dict["HOST"]), ("port", settings_dict["PORT"])) if v})
    take = "SELECT 1 FROM stores_store WHERE id = %s FOR UPDATE NOWAIT"
    with psycopg.connect(**params, autocommit=True) as other:
        with transaction.atomic():
            assert query.first(pk=store.pk).pk == store.pk
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(take, [store.pk])
        with other.transaction():  # committed: free again
            assert other.execute(take, [store.pk]).fetchone() == (1,)
