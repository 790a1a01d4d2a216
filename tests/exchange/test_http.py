"""Export and the resumable import over HTTP (SPEC §8b): access, streaming, chunks, resume, abort, expiry."""

from __future__ import annotations

import json

import pytest
from django.http import StreamingHttpResponse

from memories.models import Entry, StoreImport
from stores.models import Store
from tests.exchange.builder import build_rich_store
from tests.exchange.conftest import assemble, census, export_bytes, parse, without_export_time
from tests.factories import ProjectFactory, ProjectMembershipFactory, ReaderGrantFactory
from tests.log.conftest import fill, url

pytestmark = pytest.mark.django_db

IMPORTS = "/api/v1/memories/imports"


def post_lines(client, path, body: bytes, **params):
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return client.post(f"{path}?{query}" if query else path, body, content_type="application/jsonl")


def chunks(data: bytes, lines_per_chunk: int) -> list[tuple[int, bytes]]:
    lines = data.split(b"\n")[:-1]
    return [
        (start + 1, b"".join(line + b"\n" for line in lines[start : start + lines_per_chunk]))
        for start in range(0, len(lines), lines_per_chunk)
    ]


def import_in_chunks(client, data: bytes, lines_per_chunk: int = 25, **params):
    parts = chunks(data, lines_per_chunk)
    response = post_lines(client, IMPORTS, parts[0][1], **params)
    assert response.status_code == 201, response.json()
    upload = response.json()["data"]
    for first, body in parts[1:]:
        response = post_lines(client, f"{IMPORTS}/{upload['id']}/lines", body, from_line=first)
        assert response.status_code == 200, response.json()
        upload = response.json()["data"]
    return upload


# ------------------------------------------------------------------------------------------- export


def test_export_streams_json_lines_to_the_owner(owner_client, private_store):
    fill(private_store, 3)
    response = owner_client.get(url(private_store, "export"), HTTP_ACCEPT="application/jsonl")
    assert response.status_code == 200
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "application/jsonl"
    assert response["Content-Disposition"] == f'attachment; filename="memories-{private_store.pk}.jsonl"'
    assert response["Request-Id"].startswith("req_")
    objects = parse(b"".join(response.streaming_content))
    assert [obj["type"] for obj in objects] == ["memories-export", "entry", "entry", "entry", "end"]


def test_export_is_for_owners_only(make_client, owner, reader, stranger, private_store):
    ReaderGrantFactory(store=private_store, user=reader)
    assert make_client(reader).get(url(private_store, "export")).status_code == 403
    hidden = make_client(stranger).get(url(private_store, "export"))
    missing = make_client(stranger).get(url("00000000-0000-4000-8000-000000000000", "export"))
    assert hidden.status_code == missing.status_code == 404 and hidden.json()["error"] == missing.json()["error"]
    assert make_client(None).get(url(private_store, "export")).status_code == 401


def test_project_owners_may_export_and_members_may_not(make_client):
    from tests.factories import project_store

    project = ProjectFactory()
    boss = ProjectMembershipFactory(project=project, role="owner").user
    member = ProjectMembershipFactory(project=project, role="member").user
    store = project_store(project)
    assert make_client(member).get(url(store, "export")).status_code == 403
    assert make_client(boss).get(url(store, "export")).status_code == 200


def test_export_takes_no_parameters(owner_client, private_store):
    response = owner_client.get(url(private_store, "export"), {"limit": 5})
    assert response.status_code == 400 and "limit" in response.json()["error"]["message"]


def test_http_export_is_the_service_export(owner_client, rich_store):
    streamed = b"".join(owner_client.get(url(rich_store, "export")).streaming_content)
    assert without_export_time(streamed) == without_export_time(export_bytes(rich_store))


# ------------------------------------------------------------------------------------------- import


def test_an_import_in_chunks_recreates_the_store_and_commits_at_the_end_line(owner_client, own_sample):
    data = assemble(own_sample)
    upload = import_in_chunks(owner_client, data, lines_per_chunk=17)
    assert upload["status"] == "committed" and upload["next_line"] == len(own_sample) + 2
    assert upload["received"] == upload["counts"]
    store = upload["store"]
    assert store["id"] == own_sample[0]["store"]["id"] and store["entry_count"] == 40
    assert store["permissions"] == {"read": True, "write": True, "owner": True}
    imported = Store.objects.get(pk=store["id"])
    assert without_export_time(export_bytes(imported)) == without_export_time(data)


def test_a_store_being_imported_is_invisible_to_everyone(owner_client, anon_client, own_sample):
    own_sample[0]["store"]["visibility"] = "public"
    first = chunks(assemble(own_sample), 30)[0][1]
    upload = post_lines(owner_client, IMPORTS, first).json()["data"]
    assert upload["status"] == "open" and upload["store"] is None
    store_id = upload["store_id"]
    assert Entry.objects.filter(store_id=store_id).count() == 29  # written, but nobody can see them
    for client in (owner_client, anon_client):
        assert client.get(f"/api/v1/memories/{store_id}").status_code == 404
        assert client.get(url(store_id, "wake")).status_code == 404
        assert store_id not in json.dumps(client.get("/api/v1/memories").json())
    assert store_id not in anon_client.get("/memories.json").content.decode()
    assert owner_client.post(url(store_id, "note"), {"body_md": "sneak in"}).status_code == 404
    assert owner_client.get(f"/api/v1/memory_stores/{store_id}").status_code == 404


def test_a_refused_chunk_changes_nothing_and_the_import_can_be_abandoned(owner_client, own_sample):
    own_sample[40]["body_md"] = "x\u0000"
    parts = chunks(assemble(own_sample), 20)
    upload = post_lines(owner_client, IMPORTS, parts[0][1]).json()["data"]
    ok = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", parts[1][1], from_line=parts[1][0])
    assert ok.status_code == 200 and ok.json()["data"]["next_line"] == 41
    refused = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", parts[2][1], from_line=parts[2][0])
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["line"] == 41
    assert Entry.objects.filter(store_id=upload["store_id"]).count() == 39  # lines 2..40, not one more
    assert owner_client.get(f"{IMPORTS}/{upload['id']}").json()["data"]["next_line"] == 41
    aborted = owner_client.delete(f"{IMPORTS}/{upload['id']}")
    assert aborted.status_code == 200 and aborted.json()["data"] == {"id": upload["id"], "deleted": True}
    assert not Store.objects.filter(pk=upload["store_id"]).exists()
    assert not Entry.objects.filter(store_id=upload["store_id"]).exists()
    assert owner_client.get(f"{IMPORTS}/{upload['id']}").status_code == 404


def test_a_chunk_with_crlf_line_endings_is_refused_and_the_same_lines_with_lf_then_finish(owner_client, own_sample):
    """A CR reads as JSON whitespace, but the end line's digest covers every byte: a chunk converted to CRLF
    was accepted and the import could never finish (a tester). Refused, naming its first line; the chunk
    sent again as exported goes through and the import commits."""
    parts = chunks(assemble(own_sample), 20)
    upload = post_lines(owner_client, IMPORTS, parts[0][1]).json()["data"]
    first, body = parts[1]
    crlf = body.replace(b"\n", b"\r\n")
    refused = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", crlf, from_line=first)
    assert refused.status_code == 400, refused.json()
    assert refused.json()["error"]["details"]["line"] == first and "LF only" in refused.json()["error"]["message"]
    lines = body.split(b"\n")
    for blank in (b" ", b"\t"):  # trailing or leading whitespace on the third line: the same trap (a tester)
        for edited in (lines[2] + blank, blank + lines[2]):
            chunk = b"\n".join([*lines[:2], edited, *lines[3:]])
            refused = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", chunk, from_line=first)
            assert refused.status_code == 400 and refused.json()["error"]["details"]["line"] == first + 2
    assert owner_client.get(f"{IMPORTS}/{upload['id']}").json()["data"]["next_line"] == first
    for start, chunk in parts[1:]:
        sent = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", chunk, from_line=start)
        assert sent.status_code == 200, sent.json()
    assert sent.json()["data"]["status"] == "committed"


def test_a_retried_chunk_is_told_where_to_resume(owner_client, own_sample):
    parts = chunks(assemble(own_sample), 30)
    upload = post_lines(owner_client, IMPORTS, parts[0][1]).json()["data"]
    post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", parts[1][1], from_line=parts[1][0])
    again = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", parts[1][1], from_line=parts[1][0])
    assert again.status_code == 409
    assert again.json()["error"]["details"] == {"reason": "import_offset_mismatch", "next_line": 61}
    assert Entry.objects.filter(store_id=upload["store_id"]).count() == 40


def test_a_retried_first_chunk_under_its_key_replays_instead_of_opening_a_second_import(owner_client, own_sample):
    """A first chunk whose answer was lost, sent again: without a key it opens a second import while the
    first holds the file's store id (the retry then gets new ids); with the same `Idempotency-Key` the
    server answers the first import again. A different first chunk under the key is 409."""
    parts = chunks(assemble(own_sample), 30)
    first = owner_client.post(IMPORTS, parts[0][1], content_type="application/jsonl", HTTP_IDEMPOTENCY_KEY="imp-1")
    again = owner_client.post(IMPORTS, parts[0][1], content_type="application/jsonl", HTTP_IDEMPOTENCY_KEY="imp-1")
    assert first.status_code == again.status_code == 201 and again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and StoreImport.objects.count() == 1
    other = owner_client.post(IMPORTS, parts[1][1], content_type="application/jsonl", HTTP_IDEMPOTENCY_KEY="imp-1")
    assert other.status_code == 409 and other.json()["error"]["details"]["reason"] == "idempotency_key_reused"
    upload = first.json()["data"]
    for start, body in parts[1:]:
        done = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", body, from_line=start)
        assert done.status_code == 200, done.json()
    assert done.json()["data"]["status"] == "committed" and StoreImport.objects.count() == 1
    assert str(Store.objects.get(pk=upload["store_id"]).pk) == own_sample[0]["store"]["id"]  # the file's own id


def test_someone_elses_import_is_not_found(make_client, owner_client, stranger, own_sample):
    parts = chunks(assemble(own_sample), 30)
    upload = post_lines(owner_client, IMPORTS, parts[0][1]).json()["data"]
    other = make_client(stranger)
    assert other.get(f"{IMPORTS}/{upload['id']}").status_code == 404
    assert post_lines(other, f"{IMPORTS}/{upload['id']}/lines", parts[1][1], from_line=31).status_code == 404
    assert other.delete(f"{IMPORTS}/{upload['id']}").status_code == 404
    assert other.get(f"{IMPORTS}/not-a-uuid").status_code == 404


def test_only_the_owner_of_the_subject_may_import(make_client, stranger, own_sample):
    data = assemble(own_sample)  # a user store of @owner
    response = post_lines(make_client(stranger), IMPORTS, data)
    assert response.status_code == 403
    assert not Store.objects.filter(pk=own_sample[0]["store"]["id"]).exists()
    project = ProjectFactory()
    member = ProjectMembershipFactory(project=project, role="member").user
    refused = post_lines(make_client(member), IMPORTS, data, scope="project", subject=project.slug)
    assert refused.status_code == 403


def test_an_import_can_go_to_another_subject_the_caller_owns(make_client, own_sample, cast):
    project = ProjectFactory()
    boss = ProjectMembershipFactory(project=project, role="owner").user
    ProjectMembershipFactory(project=project, user=cast["owner"])  # the file's author writes there too
    without_readers = [obj for obj in own_sample if obj["type"] != "reader"]
    without_readers[0]["counts"]["readers"] = 0
    response = post_lines(make_client(boss), IMPORTS, assemble(without_readers), scope="project", subject=project.slug)
    assert response.status_code == 201, response.json()
    store = Store.objects.get(pk=response.json()["data"]["store_id"])
    assert (store.scope, store.project_id, store.visibility, store.entry_count) == ("project", project.pk, None, 40)


def test_a_committed_import_of_a_caller_removed_since_reports_committed_with_no_store(make_client, own_sample, cast):
    """The import committed under the caller's rights of that moment; removed from the (private) project
    since, the caller still reads their import as committed — with `store: null`, not a 404 that would claim
    nothing happened, and not the store they can no longer see."""
    from accounts import services as account_services

    project = ProjectFactory(visibility="private")
    boss, other = (ProjectMembershipFactory(project=project, role="owner").user for _ in range(2))
    ProjectMembershipFactory(project=project, user=cast["owner"])  # the file's author writes there too
    without_readers = [obj for obj in own_sample if obj["type"] != "reader"]
    without_readers[0]["counts"]["readers"] = 0
    client = make_client(boss)
    started = post_lines(client, IMPORTS, assemble(without_readers), scope="project", subject=project.slug)
    assert started.status_code == 201 and started.json()["data"]["status"] == "committed"
    upload = started.json()["data"]
    assert upload["store"]["id"] == upload["store_id"]

    account_services.set_project_member(project=project, actor=other, handle=boss.handle, active=False)
    seen = client.get(f"{IMPORTS}/{upload['id']}")

    assert seen.status_code == 200, seen.json()
    assert seen.json()["data"]["status"] == "committed" and seen.json()["data"]["store"] is None
    assert client.get(f"/api/v1/memories/{upload['store_id']}").status_code == 404


def test_unknown_handles_are_reported_before_anything_is_written(owner_client, own_sample):
    own_sample[0]["handles"] = sorted([*own_sample[0]["handles"], "zed"])
    response = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"unknown_handles": ["zed"]}
    assert not StoreImport.objects.exists() and not Store.objects.filter(pk=own_sample[0]["store"]["id"]).exists()


# ----------------------------------------------------------------------------- who may be an author


def test_an_http_import_cannot_make_someone_who_may_not_write_there_an_author(owner_client, sample, cast):
    """The owner's file names @bob as an author of a user store, which only its owner can write: refused,
    nothing written. (An operator's manage.py import_store still takes it: tests/exchange/test_roundtrip.py.)"""
    before = census()
    response = post_lines(owner_client, IMPORTS, assemble(sample))
    assert response.status_code == 400
    assert '"bob" may not write the target store' in response.json()["error"]["message"]
    assert "only you in your own user store" in response.json()["error"]["message"]  # not "add them" to it
    assert census() == before and not StoreImport.objects.exists()


def test_a_project_import_may_name_its_members_but_not_strangers(make_client, sample, cast):
    project = ProjectFactory()
    boss = ProjectMembershipFactory(project=project, role="owner").user
    ProjectMembershipFactory(project=project, user=cast["owner"])
    without_readers = [obj for obj in sample if obj["type"] != "reader"]
    without_readers[0]["counts"]["readers"] = 0
    data = assemble(without_readers)
    refused = post_lines(make_client(boss), IMPORTS, data, scope="project", subject=project.slug)
    assert refused.status_code == 400 and '"bob"' in refused.json()["error"]["message"]
    ProjectMembershipFactory(project=project, user=cast["bob"])
    taken = post_lines(make_client(boss), IMPORTS, data, scope="project", subject=project.slug)
    assert taken.status_code == 201, taken.json()


def _project_import_started(make_client, sample, cast):
    """A project with owners `boss` and `deputy` and member bob; boss has sent the header of a file naming
    bob as an author. Returns (project, boss's client, the open import, the rest of the file from line 2)."""
    project = ProjectFactory()
    boss = ProjectMembershipFactory(project=project, role="owner").user
    ProjectMembershipFactory(project=project, role="owner", user=cast["carol"])
    ProjectMembershipFactory(project=project, user=cast["owner"])
    ProjectMembershipFactory(project=project, user=cast["bob"])
    without_readers = [obj for obj in sample if obj["type"] != "reader"]
    without_readers[0]["counts"]["readers"] = 0
    data = assemble(without_readers)
    header, rest = data.split(b"\n", 1)
    client = make_client(boss)
    started = post_lines(client, IMPORTS, header + b"\n", scope="project", subject=project.slug)
    assert started.status_code == 201, started.json()
    return project, boss, client, started.json()["data"], rest


def test_an_owner_removed_mid_import_can_send_no_more_lines(make_client, sample, cast):
    """A breaker's owner started an import, was removed from the project, sent the rest: the chunk answered
    404, yet the import had committed the store into the project. The right is judged on every chunk."""
    from accounts.services import set_project_member

    project, boss, client, upload, rest = _project_import_started(make_client, sample, cast)
    set_project_member(project=project, actor=cast["carol"], handle=boss.handle, active=False)
    before = census()
    refused = post_lines(client, f"{IMPORTS}/{upload['id']}/lines", rest, from_line=2)
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
    assert census() == before
    assert StoreImport.objects.get(pk=upload["id"]).status == "open"
    assert Store.objects.get(pk=upload["store_id"]).importing  # nothing became visible
    assert client.delete(f"{IMPORTS}/{upload['id']}").status_code == 200  # it can still be abandoned


def test_a_committed_import_whose_store_the_caller_lost_meanwhile_is_committed_not_404(
    make_client, sample, cast, monkeypatch
):
    """The last chunk commits; the caller is removed from the project before the answer reads the store.
    The answer said 404 "Store not found." although the import had committed (found by a breaker): it is
    `committed` with `store: null`."""
    from accounts.services import set_project_member
    from memories.api import imports as imports_api

    project, boss, client, upload, rest = _project_import_started(make_client, sample, cast)
    real = imports_api.imports.append_chunk

    def append_then_lose_the_project(**kwargs):
        done = real(**kwargs)
        set_project_member(project=project, actor=None, handle=boss.handle, active=False)  # a parallel removal
        return done

    monkeypatch.setattr(imports_api.imports, "append_chunk", append_then_lose_the_project)
    answer = post_lines(client, f"{IMPORTS}/{upload['id']}/lines", rest, from_line=2)
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["data"]["status"], answer.json()["data"]["store"]) == ("committed", None)
    assert not Store.objects.get(pk=upload["store_id"]).importing


def test_an_author_removed_mid_import_may_no_longer_be_named(make_client, sample, cast):
    """docs/export-import.md: an author must hold the write right on the target *now* — at each chunk, not
    only when the import started (the set used to be computed once and saved with the import)."""
    from accounts.services import set_project_member

    project, boss, client, upload, rest = _project_import_started(make_client, sample, cast)
    set_project_member(project=project, actor=boss, handle="bob", active=False)
    before = census()
    refused = post_lines(client, f"{IMPORTS}/{upload['id']}/lines", rest, from_line=2)
    assert refused.status_code == 400 and '"bob" may not write' in refused.json()["error"]["message"]
    assert census() == before
    set_project_member(project=project, actor=boss, handle="bob")
    taken = post_lines(client, f"{IMPORTS}/{upload['id']}/lines", rest, from_line=2)
    assert taken.status_code == 200 and taken.json()["data"]["status"] == "committed", taken.json()


def test_a_version_actor_may_not_name_another_users_token(owner_client, own_sample, cast):
    from accounts.services import issue_token

    bobs = issue_token(user=cast["bob"], name="bob's").token
    version = next(obj for obj in own_sample if obj["type"] == "version")
    version["created_by"] = {"type": "api_actor", "api_key_id": str(bobs.pk)}
    before = census()
    response = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert response.status_code == 400 and "belongs to someone who may not write" in response.json()["error"]["message"]
    assert census() == before


def test_an_entry_may_not_name_another_users_session(owner_client, own_sample, cast):
    """Version actors were checked, entries' `session_id` was not: an import could file entries under bob's
    session (a breaker). Ids that match no session here are kept as they are."""
    from sessions.services import environments, sessions

    bobs = sessions.create_session(
        owner=cast["bob"],
        environment_id=environments.create_environment(owner=cast["bob"], name="bob's").pk,
        agent={"id": "agent_test", "version": 1},
        attach=[],
        metadata={},
        title=None,
    )
    entry = next(obj for obj in own_sample if obj["type"] == "entry")
    entry["session_id"] = str(bobs.pk)
    before = census()
    response = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert response.status_code == 400, response.content
    assert "an entry's session_id" in response.json()["error"]["message"]
    assert census() == before
    entry["session_id"] = "00000000-0000-4000-8000-000000000000"  # another server's session: kept
    assert post_lines(owner_client, IMPORTS, assemble(own_sample)).status_code == 201


def test_nothing_imported_over_http_may_be_dated_in_the_future(owner_client, own_sample):
    entry = next(obj for obj in own_sample if obj["type"] == "entry")
    entry["created_at"] = "9999-12-31T23:59:59.999999Z"
    response = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert response.status_code == 400 and "in the future" in response.json()["error"]["message"]
    entry["created_at"] = own_sample[0]["store"]["created_at"]
    own_sample[0]["store"]["created_at"] = "9999-12-31T23:59:59.999999Z"
    header = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert header.status_code == 400 and "store.created_at is in the future" in header.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b'{"a":1}', "application/json", 415),
        (b"", "application/jsonl", 400),
        (b'{"type":"memories-export"}', "application/jsonl", 400),
        (b"not json\n", "application/x-ndjson", 400),
    ],
)
def test_hostile_first_chunks_are_refused(owner_client, body, content_type, status):
    response = owner_client.post(IMPORTS, body, content_type=content_type)
    assert response.status_code == status, response.content
    assert response.json()["type"] == "error"
    assert not StoreImport.objects.exists() and not Store.objects.filter(importing=True).exists()


def test_a_chunk_must_end_with_a_newline(owner_client, own_sample):
    data = assemble(own_sample)
    response = post_lines(owner_client, IMPORTS, data[:-1])
    assert response.status_code == 400 and "must end with a newline" in response.json()["error"]["message"]


def test_abandoned_imports_are_deleted_when_the_next_one_starts(owner_client, own_sample, settings):
    parts = chunks(assemble(own_sample), 30)
    stale = post_lines(owner_client, IMPORTS, parts[0][1]).json()["data"]
    settings.IMPORT_IDLE_SECONDS = 0
    own_sample[0]["store"]["id"] = "00000000-0000-4000-8000-0000000000aa"
    post_lines(owner_client, IMPORTS, chunks(assemble(own_sample), 30)[0][1])
    assert not Store.objects.filter(pk=stale["store_id"]).exists()
    assert owner_client.get(f"{IMPORTS}/{stale['id']}").status_code == 404


def test_a_committed_import_cannot_be_appended_to_or_aborted(owner_client, own_sample):
    upload = post_lines(owner_client, IMPORTS, assemble(own_sample)).json()["data"]
    assert upload["status"] == "committed"
    more = post_lines(owner_client, f"{IMPORTS}/{upload['id']}/lines", b"{}\n", from_line=upload["next_line"])
    assert more.status_code == 409 and more.json()["error"]["details"]["reason"] == "import_committed"
    assert owner_client.delete(f"{IMPORTS}/{upload['id']}").status_code == 409
    assert Store.objects.get(pk=upload["store_id"]).importing is False


def test_a_private_board_with_open_posting_takes_only_authors_who_can_read_it(make_client, own_sample, cast):
    """Open posting lets anyone post who can *read* the board; on a private board those are its members."""
    from tests.factories import SectionFactory, SectionMembershipFactory

    section = SectionFactory(visibility="private", posting="open")
    boss = SectionMembershipFactory(section=section, role="owner").user
    without_readers = [obj for obj in own_sample if obj["type"] != "reader"]
    without_readers[0]["counts"]["readers"] = 0
    data = assemble(without_readers)
    refused = post_lines(make_client(boss), IMPORTS, data, scope="board", subject=section.slug)
    assert refused.status_code == 400 and '"owner" may not write' in refused.json()["error"]["message"]
    SectionMembershipFactory(section=section, user=cast["owner"])
    taken = post_lines(make_client(boss), IMPORTS, data, scope="board", subject=section.slug)
    assert taken.status_code == 201, taken.json()


WRONG_TYPES = [{}, [], ["user"], {"a": 1}, True, 1.0, 10**30]


def test_every_header_value_of_a_wrong_json_type_is_a_400_never_a_500(owner_client, own_sample):
    """A breaker's `store.scope: {}` was a 500 (an unhashable dict looked up in a dict); `version: true`
    and `1.0` were taken as 1. Every header value, at both levels, replaced by every other JSON type."""
    header = own_sample[0]
    places = [(header, key) for key in header if key != "type"] + [(header["store"], key) for key in header["store"]]
    before = census()
    for where, key in places:
        kept = where[key]
        for wrong in WRONG_TYPES:
            if (type(wrong) is type(kept) and not isinstance(kept, (dict, list))) or (key, wrong) == ("metadata", {}):
                continue  # valid values: canonical true as well as false, empty metadata
            where[key] = wrong
            response = post_lines(owner_client, IMPORTS, assemble(own_sample))
            assert response.status_code == 400, (key, wrong, response.content)
        where[key] = kept
    assert census() == before


def test_a_public_board_with_open_posting_takes_any_author(make_client, own_sample, cast):
    """Anyone may post on an open public board, so anyone may be named as an author of its import — the
    check read the store being imported as not yet public, and took members only (a breaker)."""
    from tests.factories import SectionFactory, SectionMembershipFactory

    section = SectionFactory(visibility="public", posting="open")
    boss = SectionMembershipFactory(section=section, role="owner").user
    without_readers = [obj for obj in own_sample if obj["type"] != "reader"]
    without_readers[0]["counts"]["readers"] = 0
    taken = post_lines(make_client(boss), IMPORTS, assemble(without_readers), scope="board", subject=section.slug)
    assert taken.status_code == 201, taken.json()


@pytest.mark.parametrize("key", ["updated_at", "archived_at"])
def test_the_headers_other_times_may_not_be_in_the_future_either(owner_client, own_sample, key):
    before = census()
    own_sample[0]["store"][key] = "9999-12-31T23:59:59.999999Z"
    response = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert response.status_code == 400 and f"store.{key} is in the future" in response.json()["error"]["message"]
    assert census() == before


def test_a_store_imported_at_the_highest_generation_stays_compactable(owner_client, own_sample):
    """An import may set `generation` up to 2^62; a redaction then took the store past what compact and
    forget accepted, so its invalidated summaries could never be rebuilt (a breaker). Requests now accept any
    generation a store can hold."""
    from memories import tree

    own_sample[0]["store"]["generation"] = tree.MAX_SEQ
    upload = import_in_chunks(owner_client, assemble(own_sample), lines_per_chunk=500)
    store = upload["store"]["id"]
    redacted = owner_client.post(url(store, "entries/0/redact"), {"reason": "leaked a key"})
    assert redacted.status_code == 200, redacted.json()
    assert Store.objects.get(pk=store).generation == tree.MAX_SEQ + 1

    job = owner_client.get(url(store, "nap")).json()["data"]["job"]
    assert job["generation"] == tree.MAX_SEQ + 1
    compacted = owner_client.post(
        url(store, "compact"),
        {
            "range": job["range"],
            "generation": job["generation"],
            "source_digest": job["source_digest"],
            "summary_md": "rebuilt",
            "model": "test",
        },
    )
    assert compacted.status_code in (200, 201), compacted.json()
    generation = Store.objects.get(pk=store).generation
    forgotten = owner_client.post(url(store, "forget"), {"range": "0", "generation": generation})
    assert forgotten.status_code == 200, forgotten.json()
    beyond = owner_client.post(url(store, "forget"), {"range": "0", "generation": tree.MAX_GENERATION + 1})
    assert beyond.status_code == 400  # past the column's range: a 400, not a database error


def test_an_active_reader_grant_to_an_inactive_user_is_refused_as_the_api_refuses_it(owner_client, own_sample, cast):
    """`POST …/readers` refuses to grant reading to an inactive user; an HTTP import did not (helper-38). A
    grant the file lists as inactive is kept: revoking one stays possible on the API too."""
    type(cast["carol"]).objects.filter(pk=cast["carol"].pk).update(is_active=False)
    grant = next(obj for obj in own_sample if obj["type"] == "reader" and obj["handle"] == "carol")
    assert grant["active"] is True
    before = census()
    refused = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert refused.status_code == 400, refused.json()
    assert '"carol", an inactive user' in refused.json()["error"]["message"]
    assert census() == before
    grant["active"] = False
    taken = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert taken.status_code == 201, taken.json()


def test_a_version_redacted_by_a_session_is_refused(owner_client, own_sample):
    """Agents write, people redact: the API refuses a redaction by a work credential (403), so an HTTP import
    cannot record one either."""
    version = next(obj for obj in own_sample if obj["type"] == "version" and obj["redacted_at"])
    version["redacted_by"] = {"type": "session_actor", "session_id": "5f2b7c1e-0000-4000-8000-000000000001"}
    before = census()
    refused = post_lines(owner_client, IMPORTS, assemble(own_sample))
    assert refused.status_code == 400 and "people redact" in refused.json()["error"]["message"], refused.json()
    assert census() == before


# ------------------------------------------------------------------------------------ listing imports


def test_your_imports_are_listed_newest_first_as_each_one_reads(make_client, owner_client, stranger, own_sample):
    """A lost import id is found again: the list shows the caller's own imports, each exactly as GET of its id
    shows it; nobody else's; `status` filters; the keyset cursor pages without gaps or repeats."""
    data = assemble(own_sample)
    committed = post_lines(owner_client, IMPORTS, data).json()["data"]
    first = chunks(data, 30)[0][1]
    opened = [post_lines(owner_client, IMPORTS, first).json()["data"] for _ in range(3)]
    assert committed["status"] == "committed" and {upload["status"] for upload in opened} == {"open"}
    elsewhere = post_lines(make_client(stranger), IMPORTS, export_of_a_store_of(stranger)).json()["data"]

    listed = owner_client.get(IMPORTS)
    assert listed.status_code == 200, listed.json()
    rows = listed.json()["data"]
    assert [row["id"] for row in rows] == [upload["id"] for upload in [*reversed(opened), committed]]
    assert rows == [owner_client.get(f"{IMPORTS}/{row['id']}").json()["data"] for row in rows]
    assert rows[-1]["store"]["id"] == committed["store_id"] and rows[0]["store"] is None
    assert listed.json()["meta"] == {"next_cursor": None}
    assert elsewhere["id"] not in json.dumps(listed.json())

    open_only = owner_client.get(IMPORTS, {"status": "open"}).json()["data"]
    assert [row["id"] for row in open_only] == [upload["id"] for upload in reversed(opened)]
    theirs = make_client(stranger).get(IMPORTS).json()["data"]
    assert [row["id"] for row in theirs] == [elsewhere["id"]]

    seen, cursor = [], None
    while True:
        page = owner_client.get(IMPORTS, {"limit": 1, **({"cursor": cursor} if cursor else {})}).json()
        seen += [row["id"] for row in page["data"]]
        cursor = page["meta"]["next_cursor"]
        if cursor is None:
            break
    assert seen == [row["id"] for row in rows]


def export_of_a_store_of(user) -> bytes:
    """An export of a small user store of `user` (every entry theirs), the store deleted: an import `user` may
    start."""
    store = build_rich_store(user, others=[], readers=[], entries=16, files=1, redact=())
    data = export_bytes(store)
    store.delete()
    return data


def test_the_import_list_refuses_bad_queries_and_other_lists_cursors(make_client, owner_client, stranger, own_sample):
    first = chunks(assemble(own_sample), 30)[0][1]
    for _ in range(2):
        post_lines(owner_client, IMPORTS, first)
    cursor = owner_client.get(IMPORTS, {"limit": 1}).json()["meta"]["next_cursor"]
    assert cursor
    for query in ({"status": "lost"}, {"limit": 0}, {"limit": 101}, {"cursor": cursor[:-2] + "xx"}, {"sort": "id"}):
        refused = owner_client.get(IMPORTS, query)
        assert refused.status_code == 400, (query, refused.json())
    # a cursor is bound to its caller and its filter: another user's or another status's is refused
    assert make_client(stranger).get(IMPORTS, {"cursor": cursor}).status_code == 400
    assert owner_client.get(IMPORTS, {"cursor": cursor, "status": "open"}).status_code == 400
    store_cursor = owner_client.get("/api/v1/memories", {"limit": 1}).json()["meta"]["next_cursor"]
    if store_cursor:
        assert owner_client.get(IMPORTS, {"cursor": store_cursor}).status_code == 400
    assert make_client(None).get(IMPORTS).status_code == 401


def test_a_page_of_imports_costs_the_same_queries_however_many_are_committed(owner_client, own_sample):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    data = assemble(own_sample)
    post_lines(owner_client, IMPORTS, data)
    with CaptureQueriesContext(connection) as one:
        assert len(owner_client.get(IMPORTS).json()["data"]) == 1
    for _ in range(4):
        post_lines(owner_client, IMPORTS, data)
    with CaptureQueriesContext(connection) as five:
        rows = owner_client.get(IMPORTS).json()["data"]
    assert len(rows) == 5 and all(row["store"]["id"] == row["store_id"] for row in rows)
    assert len(five.captured_queries) == len(one.captured_queries)
