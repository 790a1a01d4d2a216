"""Memory, version and store lists: order, pagination, depth roll-ups, prefixes, filters (SPEC §5)."""

from __future__ import annotations

import uuid

import pytest
from django.core import signing

from config.fields import SIGNED_VALUE_MESSAGE
from tests.factories import StoreFactory
from tests.files.conftest import memories_url, versions_url
from versions import services
from versions.actors import Actor


def walk(client, url: str, **params) -> tuple[list[dict], int]:
    """Follow `next_page` from the first page to the last; return every item and the number of pages."""
    items, pages, page = [], 0, None
    while True:
        query = {**params, **({"page": page} if page else {})}
        response = client.get(url, query)
        assert response.status_code == 200, response.json()
        body = response.json()
        assert set(body) == {"data", "next_page"}
        items += body["data"]
        pages += 1
        page = body["next_page"]
        if page is None:
            return items, pages


# --- memories -----------------------------------------------------------------------------------------


def test_150_memories_paged_by_7_come_back_each_exactly_once_in_path_order(owner_client, private_store, seed):
    paths = [f"/dir{i % 4}/note-{i:03}.md" for i in range(150)]
    for path in paths:
        seed(path)
    items, pages = walk(owner_client, memories_url(private_store), limit=7)
    assert [m["path"] for m in items] == sorted(paths)
    assert len({m["id"] for m in items}) == 150
    assert pages == 22  # 21 full pages and one of 3, whose next_page is null


def test_memories_are_ordered_bytewise_not_by_locale(owner_client, private_store, seed):
    for path in ["/é", "/a", "/Z", "/ä", "/B", "/z", "/a.md", "/a-b", "/A/b"]:
        seed(path)
    items, _ = walk(owner_client, memories_url(private_store))
    got = [m["path"] for m in items]
    assert got == sorted(got, key=lambda p: p.encode("utf-8"))
    assert got == ["/A/b", "/B", "/Z", "/a", "/a-b", "/a.md", "/z", "/ä", "/é"]


def test_depth_1_rolls_deeper_memories_into_prefixes_interleaved_in_path_order(owner_client, private_store, seed):
    for path in ["/top.md", "/a/x.md", "/a/deep/y.md", "/b.md", "/c/d/e/f.md", "/a.txt"]:
        seed(path)
    items, _ = walk(owner_client, memories_url(private_store), depth=1)
    # bytewise, "/a.txt" sorts before the prefix "/a/" because "." (0x2E) < "/" (0x2F)
    assert [(i["type"], i["path"]) for i in items] == [
        ("memory", "/a.txt"),
        ("memory_prefix", "/a/"),
        ("memory", "/b.md"),
        ("memory_prefix", "/c/"),
        ("memory", "/top.md"),
    ]
    assert items[1] == {"type": "memory_prefix", "path": "/a/"}


def test_depth_1_below_a_prefix_lists_direct_children_and_subdirectories(owner_client, private_store, seed):
    for path in ["/p/one.md", "/p/sub/two.md", "/p/sub/deeper/three.md", "/p/z.md", "/pq/no.md", "/p.md"]:
        seed(path)
    items, _ = walk(owner_client, memories_url(private_store), depth=1, path_prefix="/p/")
    assert [(i["type"], i["path"]) for i in items] == [
        ("memory", "/p/one.md"),
        ("memory_prefix", "/p/sub/"),
        ("memory", "/p/z.md"),
    ]


def test_prefix_items_count_toward_the_limit(owner_client, private_store, seed):
    for path in ["/a/1", "/a/2", "/b/1", "/c.md", "/d/1", "/e.md"]:
        seed(path)
    first = owner_client.get(memories_url(private_store), {"depth": 1, "limit": 2}).json()
    assert [i["path"] for i in first["data"]] == ["/a/", "/b/"]
    items, pages = walk(owner_client, memories_url(private_store), depth=1, limit=2)
    assert [i["path"] for i in items] == ["/a/", "/b/", "/c.md", "/d/", "/e.md"]
    assert pages == 3


def test_path_prefix_matches_whole_segments_only(owner_client, private_store, seed):
    for path in ["/notes/todo.md", "/notes/deep/x.md", "/notes-archive/todo.md", "/notes.md"]:
        seed(path)
    items, _ = walk(owner_client, memories_url(private_store), path_prefix="/notes/")
    assert [m["path"] for m in items] == ["/notes/deep/x.md", "/notes/todo.md"]


def test_path_prefix_treats_like_wildcards_literally(owner_client, private_store, seed):
    for path in ["/a_b/1", "/axb/1", "/a%/1", "/aaa/1"]:
        seed(path)
    assert [m["path"] for m in walk(owner_client, memories_url(private_store), path_prefix="/a_b/")[0]] == ["/a_b/1"]
    assert [m["path"] for m in walk(owner_client, memories_url(private_store), path_prefix="/a%/")[0]] == ["/a%/1"]


@pytest.mark.parametrize(
    "params",
    [
        {"path_prefix": "/notes"},
        {"path_prefix": "notes/"},
        {"path_prefix": "//"},
        {"path_prefix": "/a/../"},
        {"depth": 2},
        {"depth": -1},
        {"depth": "one"},
        {"limit": 0},
        {"limit": 101},
        {"limit": "ten"},
        {"limit": 10**30},
        {"view": "everything"},
        {"order": "desc"},
        {"page": "not-a-token"},
    ],
)
def test_bad_list_parameters_are_rejected(owner_client, private_store, params):
    response = owner_client.get(memories_url(private_store), params)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_tampered_page_token_is_rejected(owner_client, private_store, seed):
    for i in range(3):
        seed(f"/{i}.md")
    token = owner_client.get(memories_url(private_store), {"limit": 1}).json()["next_page"]
    flipped = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    assert owner_client.get(memories_url(private_store), {"page": flipped}).status_code == 400
    forged = signing.dumps({"k": "memories", "q": "x", "p": "/0.md"}, salt="wrong")
    assert owner_client.get(memories_url(private_store), {"page": forged}).status_code == 400


@pytest.mark.parametrize("page", ["x" * 6000, "!", "a:b:c:d"])
def test_a_malformed_page_token_gets_one_message_naming_the_field(owner_client, private_store, page):
    """A 6,000-character token got "too long" and "not a token" in one message (a tester): one problem now."""
    error = owner_client.get(memories_url(private_store), {"page": page}).json()["error"]
    assert error["details"]["fields"] == {"page": SIGNED_VALUE_MESSAGE}
    assert error["message"] == f"page: {SIGNED_VALUE_MESSAGE}"


def test_a_page_token_from_another_query_or_list_is_rejected(owner_client, private_store, seed):
    for i in range(3):
        seed(f"/d/{i}.md")
    token = owner_client.get(memories_url(private_store), {"limit": 1}).json()["next_page"]
    assert owner_client.get(memories_url(private_store), {"page": token, "depth": 1}).status_code == 400
    assert owner_client.get(versions_url(private_store), {"page": token}).status_code == 400
    other = StoreFactory(owner=private_store.owner, canonical=False)
    assert owner_client.get(memories_url(other), {"page": token}).status_code == 400


def test_view_full_pages_hold_at_most_20_memories_with_content(owner_client, private_store, seed):
    for i in range(25):
        seed(f"/{i:02}.md", f"content {i}")
    body = owner_client.get(memories_url(private_store), {"view": "full", "limit": 100}).json()
    assert len(body["data"]) == 20 and body["next_page"] is not None
    assert body["data"][0]["content"] == "content 0"
    basic = owner_client.get(memories_url(private_store), {"limit": 100}).json()
    assert len(basic["data"]) == 25 and all(m["content"] is None for m in basic["data"])


def test_an_empty_store_lists_nothing_with_a_null_next_page(owner_client, private_store):
    assert owner_client.get(memories_url(private_store)).json() == {"data": [], "next_page": None}


def test_the_memory_list_costs_a_fixed_number_of_queries(
    owner_client, private_store, seed, django_assert_max_num_queries
):
    for i in range(30):
        seed(f"/d{i % 3}/{i}.md")
    owner_client.get("/api/v1/me")  # the token's first use records last_used_at; not part of the list's cost
    with django_assert_max_num_queries(3):  # token, store, memories
        assert len(owner_client.get(memories_url(private_store), {"limit": 100}).json()["data"]) == 30
    with django_assert_max_num_queries(4):  # token, store, keys, memories on the page
        assert len(owner_client.get(memories_url(private_store), {"depth": 1}).json()["data"]) == 3


# --- versions -----------------------------------------------------------------------------------------


@pytest.fixture
def lineage(owner_client, private_store, seed):
    """Two memories: /a.md created then modified; /b.md created then deleted. Returns both ids."""
    a = seed("/a.md", "one")
    b = seed("/b.md", "bee")
    owner_client.post(memories_url(private_store, str(a.pk)), {"content": "two"})
    owner_client.delete(memories_url(private_store, str(b.pk)))
    return a.pk, b.pk


def test_versions_are_listed_newest_first_across_memories(owner_client, private_store, lineage):
    items, _ = walk(owner_client, versions_url(private_store))
    assert [(v["operation"], v["path"]) for v in items] == [
        ("deleted", "/b.md"),
        ("modified", "/a.md"),
        ("created", "/b.md"),
        ("created", "/a.md"),
    ]
    stamps = [v["created_at"] for v in items]
    assert stamps == sorted(stamps, reverse=True)


def test_versions_filter_by_memory_id_including_a_deleted_memory(owner_client, private_store, lineage):
    _, deleted_id = lineage
    items, _ = walk(owner_client, versions_url(private_store), memory_id=deleted_id)
    assert [v["operation"] for v in items] == ["deleted", "created"]


@pytest.mark.parametrize(("operation", "count"), [("created", 2), ("modified", 1), ("deleted", 1)])
def test_versions_filter_by_operation(owner_client, private_store, lineage, operation, count):
    items, _ = walk(owner_client, versions_url(private_store), operation=operation)
    assert len(items) == count and {v["operation"] for v in items} == {operation}


def test_versions_filter_by_inclusive_created_at_bounds(owner_client, private_store, lineage):
    everything, _ = walk(owner_client, versions_url(private_store))
    middle = [v["created_at"] for v in everything[1:3]]
    bounds = {"created_at[gte]": middle[1], "created_at[lte]": middle[0]}
    items, _ = walk(owner_client, versions_url(private_store), **bounds)
    assert [v["id"] for v in items] == [v["id"] for v in everything[1:3]]
    offset, _ = walk(owner_client, versions_url(private_store), **{"created_at[gte]": middle[1].replace("Z", "+00:00")})
    assert len(offset) == 3


def test_versions_filter_by_api_key_and_session(owner_client, make_client, owner, private_store, seed):
    other = make_client(owner)
    session_id = uuid.uuid4()
    mine = seed("/mine.md")
    other.post(memories_url(private_store), {"path": "/theirs.md", "content": "x"})
    services.create_memory(store=private_store, path="/agent.md", content="x", actor=Actor.session(session_id))
    by_key = walk(owner_client, versions_url(private_store), api_key_id=owner_client.token.pk)[0]
    assert [v["memory_id"] for v in by_key] == [str(mine.pk)]
    by_other = walk(owner_client, versions_url(private_store), api_key_id=other.token.pk)[0]
    assert [v["path"] for v in by_other] == ["/theirs.md"]
    by_session = walk(owner_client, versions_url(private_store), session_id=session_id)[0]
    assert [v["path"] for v in by_session] == ["/agent.md"]
    assert by_session[0]["created_by"] == {"type": "session_actor", "session_id": str(session_id)}
    assert walk(owner_client, versions_url(private_store), service_account_id="svac_1")[0] == []


def test_versions_page_through_every_version_once(owner_client, private_store, seed):
    memory = seed("/a.md", "0")
    for i in range(1, 12):
        owner_client.post(memories_url(private_store, str(memory.pk)), {"content": str(i)})
    items, pages = walk(owner_client, versions_url(private_store), limit=5)
    assert len(items) == 12 and len({v["id"] for v in items}) == 12 and pages == 3


@pytest.mark.parametrize(
    "params",
    [
        {"memory_id": "nope"},
        {"operation": "renamed"},
        {"created_at[gte]": "yesterday"},
        {"created_at[gt]": "2026-01-01T00:00:00Z"},
        {"limit": 0},
    ],
)
def test_bad_version_filters_are_rejected(owner_client, private_store, params):
    response = owner_client.get(versions_url(private_store), params)
    assert response.status_code == 400


@pytest.mark.parametrize("params", [{"api_key_id": "key"}, {"session_id": "1"}, {"session_id": "sesn_01"}])
def test_version_filters_by_ids_that_cannot_match_are_an_empty_list(owner_client, private_store, lineage, params):
    """The SDK passes its own prefixed ids (`sesn_…`): an id that names nothing here matches nothing (issue 15)."""
    response = owner_client.get(versions_url(private_store), params)
    assert response.status_code == 200 and response.json() == {"data": [], "next_page": None}


def test_the_version_list_costs_a_fixed_number_of_queries(
    owner_client, private_store, lineage, django_assert_max_num_queries
):
    with django_assert_max_num_queries(3):  # token, store, versions
        assert len(owner_client.get(versions_url(private_store), {"view": "full"}).json()["data"]) == 4


# --- stores -------------------------------------------------------------------------------------------


def test_the_store_list_costs_a_fixed_number_of_queries(owner_client, owner, django_assert_max_num_queries):
    for i in range(10):
        StoreFactory(owner=owner, canonical=False, name=f"s{i}")
    owner_client.get("/api/v1/me")  # the token's first use records last_used_at; not part of the list's cost
    with django_assert_max_num_queries(2):  # token, stores
        body = owner_client.get("/api/v1/memory_stores", {"limit": 100}).json()
    assert len(body["data"]) == 10


@pytest.mark.parametrize(
    "params",
    [{"include_archived": "maybe"}, {"limit": 0}, {"created_at[lte]": "soon"}, {"page": "x"}, {"name": "a"}],
)
def test_bad_store_list_parameters_are_rejected(owner_client, params):
    assert owner_client.get("/api/v1/memory_stores", params).status_code == 400


def test_page_tokens_after_the_longest_multibyte_paths_still_work(owner_client, private_store, seed):
    # 1,021 bytes each (255 four-byte characters), escaped to 3,060 JSON characters
    paths = sorted("/" + "".join(chr(0x1F300 + (i * 37 + k * 101) % 0x2FF) for i in range(255)) for k in range(3))
    for path in paths:
        seed(path)
    items, pages = walk(owner_client, memories_url(private_store), limit=1)
    assert [m["path"] for m in items] == paths and pages == 3


@pytest.mark.parametrize("raw", ["path_prefix=/a%00/", "path_prefix=/%ED%A0%80/", "page=%FF"])
def test_hostile_query_strings_are_rejected(owner_client, private_store, raw):
    response = owner_client.get(f"{memories_url(private_store)}?{raw}")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path_prefix", ["/a\u200b/", "/Cafe\u0301/", "/" + "a/" * 21, "/a/./"])
def test_a_path_prefix_breaking_the_path_rules_is_rejected(owner_client, private_store, path_prefix):
    assert owner_client.get(memories_url(private_store), {"path_prefix": path_prefix}).status_code == 400
