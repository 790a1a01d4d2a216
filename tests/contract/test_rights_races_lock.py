"""Changes and writes are judged against the rights of the moment they hold the store lock (docs/access.md
"Owner rights are judged under the lock", "Writes racing a removal"), with real parallel clients.

A transaction holds the store's row lock (a writer before them) and, in it, removes a member (or takes a
right away): the change bumps the project's or section's `rights_version` under its row lock. The member's
requests are sent over HTTP meanwhile: each passes its access check (the removal has not committed) and
queues on the store lock. Once all wait, the removal commits. Each request must then answer what a new
request of theirs gets — 404 for a private project, 403 on a board they can read — and change nothing (a
breaker's removed owner still deleted the store; a removed member's note landed after the removal had
answered 200).
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from accounts import services as account_services
from memories.models import Entry
from memories.services import append_entry
from memories.tree import parse_range, source_digest
from sessions import selectors as session_selectors
from sessions.models import Session
from sessions.services import environments as environment_services
from sessions.services import sessions as session_services
from sessions.services import work as work_services
from sessions.validation import clean_resources
from stores.models import Store
from tests.agent.conftest import sessions_token
from tests.contract.test_write_races_delete import queued_on_a_held_lock, waiting_on_locks
from tests.factories import ProjectFactory, SectionFactory, UserFactory, board_store, project_store
from tests.log.conftest import fill
from versions import services as version_services
from versions.actors import Actor
from versions.models import Memory, Version

pytestmark = [pytest.mark.django_db(transaction=True)]


def removing(store, *, project=None, section=None, role=None, **change):
    """The holder's work: lock `store`'s row, then take a member's right away in the same transaction —
    `active=False`, or a `role` on a section — through the API's service (`change`: actor, handle)."""

    def hold() -> None:
        Store.objects.select_for_update(no_key=True).get(pk=store.pk)
        if project is not None:
            account_services.set_project_member(project=project, active=False, **change)
        else:
            account_services.set_section_member(section=section, role=role, **change)

    return hold


def test_changes_queued_on_the_store_lock_by_an_owner_removed_meanwhile_change_nothing(live_server):
    project = ProjectFactory(slug="locked-out")
    boss, carol = UserFactory(handle="boss"), UserFactory(handle="carol")
    for user in (boss, carol):
        account_services.ensure_project_membership(project=project, user=user, role="owner")
    store = fill(project_store(project, name="Shared"), 4, author=boss)
    actor = Actor.user(boss.pk)
    memory = version_services.create_memory(store=store, actor=actor, path="/a.md", content="one").memory
    old_version = Version.objects.filter(memory_id=memory.pk).order_by("created_at").first()
    version_services.update_memory(store=store, memory_id=memory.pk, actor=actor, content="two")
    secret = account_services.issue_token(user=carol).secret
    log, files = f"/api/v1/memories/{store.pk}", f"/api/v1/memory_stores/{store.pk}"
    requests = {
        "update_store": ("PATCH", log, {"name": "mine"}),
        "archive_store": ("POST", f"{files}/archive", None),
        "delete_store": ("DELETE", files, None),
        "forget_range": ("POST", f"{log}/forget", {"range": "0-1", "generation": 1}),
        "redact_entry": ("POST", f"{log}/entries/1/redact", {"reason": "gone"}),
        "redact_version": ("POST", f"{files}/memory_versions/{old_version.pk}/redact", None),
    }
    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, removing(store, project=project, actor=boss, handle="carol")
    )

    assert blocked >= len(requests), f"only {blocked} of {len(requests)} changes queued on the store lock"
    for name, status, body in results:
        assert status == 404 and body["error"]["type"] == "not_found_error", (name, status, body)
    store.refresh_from_db()
    assert (store.name, store.archived_at, store.deleted_at, store.generation) == ("Shared", None, None, 1)
    assert not Entry.objects.filter(store=store, redacted_at__isnull=False).exists()
    assert Version.objects.get(pk=old_version.pk).redacted_at is None


def compaction(store, label: str) -> dict:
    """A valid compaction of `label` (two entries) of `store`: it would be stored (201) by any member."""
    block = parse_range(label, allow_entry=False)
    left, right = block.halves()
    texts = dict(Entry.objects.filter(store=store, seq__in=[left.start, right.start]).values_list("seq", "body_md"))
    digest = source_digest(left, texts[left.start], right, texts[right.start])
    return {"range": label, "generation": 1, "source_digest": digest, "summary_md": "late", "model": "m"}


def shared_project(slug: str) -> tuple:
    """(project, boss its owner, dave a member, its store with 4 entries by boss)."""
    project = ProjectFactory(slug=slug)
    boss, dave = UserFactory(handle="boss"), UserFactory(handle="dave")
    account_services.ensure_project_membership(project=project, user=boss, role="owner")
    account_services.ensure_project_membership(project=project, user=dave, role="member")
    return project, boss, dave, fill(project_store(project, name="Shared"), 4, author=boss)


def two_memories(store, author) -> tuple:
    """/a.md (to be updated) and /b.md (to be deleted), written by `author`."""
    actor = Actor.user(author.pk)
    return tuple(
        version_services.create_memory(store=store, actor=actor, path=path, content="one").memory
        for path in ("/a.md", "/b.md")
    )


def member_writes(store, memories) -> dict:
    log, files = f"/api/v1/memories/{store.pk}", f"/api/v1/memory_stores/{store.pk}"
    updated, deleted = memories
    return {
        "note": ("POST", f"{log}/note", {"body_md": "written after my removal"}),
        "note with a nonce": ("POST", f"{log}/note", {"body_md": "retried", "client_nonce": "n-1"}),
        "compact_range": ("POST", f"{log}/compact", compaction(store, "0-1")),
        "create_memory": ("POST", f"{files}/memories", {"path": "/late.md", "content": "late"}),
        "update_memory": ("POST", f"{files}/memories/{updated.pk}", {"content": "late"}),
        "delete_memory": ("DELETE", f"{files}/memories/{deleted.pk}", None),
    }


def attaching(owner, store) -> tuple:
    """A request creating a session of `owner` that attaches `store` read-write."""
    environment = environment_services.create_environment(owner=owner, name="attach")
    resources = [{"type": "memory_store", "memory_store_id": str(store.pk), "access": "read_write"}]
    return ("POST", "/api/v1/sessions", {"agent": "a", "environment_id": str(environment.pk), "resources": resources})


def work_credential(owner, store) -> str:
    """The per-work credential of a running session of `owner` that attaches `store` read-write."""
    environment = environment_services.create_environment(owner=owner, name="farm")
    resources = [{"type": "memory_store", "memory_store_id": str(store.pk), "access": "read_write"}]
    session_services.create_session(
        owner=owner,
        environment_id=environment.pk,
        agent={"id": "agent_test", "version": 1},
        attach=session_selectors.stores_to_attach(owner, clean_resources(resources)),
        metadata={},
        title=None,
    )
    claimed = work_services.poll_work(environment=environment, block_ms=None, reclaim_older_than_ms=5000)
    work_services.heartbeat_work(work=work_services.acknowledge_work(work=claimed.work), expected_last_heartbeat=None)
    return sessions_token(claimed.secret)


def assert_nothing_written(store) -> None:
    fresh = Store.objects.select_related("project", "section").get(pk=store.pk)
    assert (fresh.entry_count, fresh.summary_count, fresh.memory_count) == (4, 0, 2)
    contents = set(Memory.objects.filter(store=store).values_list("path", "content"))
    assert contents == {("/a.md", "one"), ("/b.md", "one")}
    assert Version.objects.filter(store=store).count() == 2
    assert (fresh.project or fresh.section).rights_version == 1


def test_writes_queued_on_the_store_lock_by_a_member_removed_meanwhile_are_404(live_server):
    project, boss, dave, store = shared_project("late-writes")
    requests = member_writes(store, two_memories(store, boss))
    requests["attach to a session"] = attaching(dave, store)
    secret = account_services.issue_token(user=dave).secret

    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, removing(store, project=project, actor=boss, handle="dave")
    )

    assert blocked >= len(requests), f"only {blocked} of {len(requests)} writes queued on the store lock"
    for name, status, body in results:
        assert status == 404 and body["error"]["type"] == "not_found_error", (name, status, body)
    assert_nothing_written(store)
    assert not Session.objects.filter(owner=dave).exists()


def test_writes_queued_by_a_poster_made_reader_meanwhile_are_403(live_server):
    section = SectionFactory(slug="late-posts")  # public, members post
    boss, erin = UserFactory(handle="boss"), UserFactory(handle="erin")
    account_services.set_section_member(section=section, actor=None, handle="boss", role="owner")
    account_services.set_section_member(section=section, actor=None, handle="erin", role="poster")
    store = fill(board_store(section, name="Board"), 4, author=boss)
    requests = member_writes(store, two_memories(store, boss))
    requests["create_memory (per-work credential)"] = (
        "POST",
        f"/api/v1/memory_stores/{store.pk}/memories",
        {"path": "/agent.md", "content": "late"},
        work_credential(erin, store),
    )
    requests["attach read-write to a session"] = attaching(erin, store)
    secret = account_services.issue_token(user=erin).secret

    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, removing(store, section=section, role="reader", actor=boss, handle="erin")
    )

    assert blocked >= len(requests), f"only {blocked} of {len(requests)} writes queued on the store lock"
    for name, status, body in results:
        assert status == 403 and body["error"]["type"] == "permission_error", (name, status, body)
    assert_nothing_written(store)
    assert Session.objects.filter(owner=erin).count() == 1  # the per-work credential's, made before


def test_a_change_of_rights_that_narrows_nothing_for_the_writer_lets_its_queued_writes_land(live_server):
    """A version bump is not a refusal: the writer is judged again and, still a member, writes (once each)."""
    project = ProjectFactory(slug="still-in")
    boss, dave, frank = UserFactory(handle="boss"), UserFactory(handle="dave"), UserFactory(handle="frank")
    for user, role in ((boss, "owner"), (dave, "member"), (frank, "member")):
        account_services.ensure_project_membership(project=project, user=user, role=role)
    store = fill(project_store(project, name="Shared"), 4, author=boss)
    requests = member_writes(store, two_memories(store, boss))
    secret = account_services.issue_token(user=dave).secret

    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, removing(store, project=project, actor=boss, handle="frank")
    )

    assert blocked >= len(requests), f"only {blocked} of {len(requests)} writes queued on the store lock"
    statuses = {name: status for name, status, _ in results}
    assert statuses == {
        "note": 201,
        "note with a nonce": 201,
        "compact_range": 201,
        "create_memory": 200,
        "update_memory": 200,
        "delete_memory": 200,
    }, results
    fresh = Store.objects.select_related("project").get(pk=store.pk)
    assert (fresh.entry_count, fresh.summary_count, fresh.project.rights_version) == (6, 1, 1)
    assert set(Entry.objects.filter(store=store, seq__gte=4).values_list("author__handle", flat=True)) == {"dave"}


def test_a_removal_waits_for_no_store_lock_whatever_the_number_of_stores():
    """A narrowing bumps one row, its parent's: it neither locks nor updates the parent's stores, so a writer
    holding a store's lock for long (a big import chunk, a slow purge) does not hold it up, and the cost does
    not grow with the stores (a breaker's first version, which bumped every store, took 7 s and a 503 at
    50,000 stores, and stalled every store of the project behind one slow writer)."""
    project = ProjectFactory(slug="many-stores")
    boss, dave = UserFactory(handle="boss"), UserFactory(handle="dave")
    account_services.ensure_project_membership(project=project, user=boss, role="owner")
    account_services.ensure_project_membership(project=project, user=dave, role="member")
    stores = [project_store(project, name=f"Log {n}", canonical=False) for n in range(50)]
    holding, release = threading.Event(), threading.Event()

    def hold_every_store() -> None:
        try:
            with transaction.atomic():
                for store in stores:
                    Store.objects.select_for_update(no_key=True).get(pk=store.pk)
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_every_store)
    holder.start()
    try:
        assert holding.wait(30)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            account_services.set_project_member(project=project, actor=boss, handle="dave", active=False)
    finally:
        release.set()
        holder.join(30)
    project.refresh_from_db()
    assert project.rights_version == 1
    assert set(Store.objects.filter(project=project).values_list("rights_version", flat=True)) == {0}


def test_a_note_queued_by_a_user_deleted_meanwhile_is_401_not_500(live_server):
    """A stranger posting to an open board holds no membership, so deleting them bumps nothing (the back office
    refuses to delete a user who holds memberships): their queued note's entry then names no user — a 500 on
    the author's foreign key before, the 401 of a credential whose user is gone now."""
    section = SectionFactory(slug="open-board", posting="open")
    account_services.set_section_member(section=section, actor=None, handle=UserFactory(handle="boss").handle)
    store = board_store(section, name="Board")
    stranger = UserFactory(handle="passer-by")
    requests = {"note": ("POST", f"/api/v1/memories/{store.pk}/note", {"body_md": "hello"})}
    secret = account_services.issue_token(user=stranger).secret

    def delete_stranger() -> None:
        Store.objects.select_for_update(no_key=True).get(pk=store.pk)
        stranger.delete()

    blocked, results = queued_on_a_held_lock(live_server, secret, requests, delete_stranger)

    assert blocked == 1
    [(_, status, body)] = results
    assert status == 401 and body["error"]["type"] == "authentication_error", body
    assert Store.objects.get(pk=store.pk).entry_count == 0


def posted_while(client, url: str, data: dict, change) -> str:
    """POST the back-office page `url` with `data` while `change()` (an API service) holds its transaction
    open; the page waits for it (seen in pg_stat_activity), then it commits. Returns the page's body."""
    holding, release, answered = threading.Event(), threading.Event(), {}

    def hold() -> None:
        try:
            with transaction.atomic():
                change()
                holding.set()
                release.wait(60)
        finally:
            connections.close_all()

    def post() -> None:
        try:
            answered["page"] = client.post(url, data).content.decode()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=hold), threading.Thread(target=post)]
    threads[0].start()
    assert holding.wait(30)
    threads[1].start()
    assert_waiting(1)
    release.set()
    for thread in threads:
        thread.join(60)
    return answered["page"]


@pytest.fixture
def staff_pages(client):
    client.force_login(UserFactory(handle="staffer", is_staff=True, is_superuser=True))
    return client


def test_the_back_office_and_the_api_cannot_demote_the_last_two_owners_at_once(live_server, staff_pages):
    """The back office's membership page reads the row under its parent's lock (as the API's changes lock
    it): an owner demoting herself through the API while staff demote the other left no owner."""
    from django.urls import reverse

    from accounts.models import ProjectMembership
    from tests.backoffice.test_admin import _change_form_data

    project = ProjectFactory(slug="two-owners")
    alice, bob = UserFactory(handle="alice"), UserFactory(handle="bob")
    for user in (alice, bob):
        account_services.ensure_project_membership(project=project, user=user, role="owner")
    url = reverse("admin:accounts_projectmembership_change", args=[ProjectMembership.objects.get(user=alice).pk])
    demote_alice = {**_change_form_data(staff_pages.get(url)), "role": "member"}

    page = posted_while(
        staff_pages,
        url,
        demote_alice,
        lambda: account_services.set_project_member(project=project, actor=bob, handle="bob", role="member"),
    )

    assert "last active owner" in page
    owners = ProjectMembership.objects.filter(project=project, role="owner", active=True)
    assert list(owners.values_list("user__handle", flat=True)) == ["alice"]


def test_a_back_office_page_never_saves_back_what_the_api_narrowed_meanwhile(live_server, staff_pages):
    """A page loaded before an owner's change and saved while it commits: the change stands. Before, the
    page's copy was saved over it — a removed member active again, a project made private public again with
    its rights version rolled back (which let a queued write of the removed member land)."""
    from django.urls import reverse

    from accounts.models import Project, ProjectMembership
    from tests.backoffice.test_admin import _change_form_data

    project, boss, dave, _ = shared_project("stale-pages")
    project.visibility = "public"
    project.save()
    member_url = reverse("admin:accounts_projectmembership_change", args=[ProjectMembership.objects.get(user=dave).pk])
    project_url = reverse("admin:accounts_project_change", args=[project.pk])
    unchanged_member = _change_form_data(staff_pages.get(member_url))
    renamed_project = {**_change_form_data(staff_pages.get(project_url)), "name": "Renamed"}
    assert not any("rights_version" in key for key in renamed_project)  # never a form field

    page = posted_while(
        staff_pages,
        member_url,
        unchanged_member,
        lambda: account_services.set_project_member(project=project, actor=boss, handle="dave", active=False),
    )
    assert "only takes access away" in page
    assert not ProjectMembership.objects.get(user=dave).active
    page = posted_while(
        staff_pages,
        project_url,
        renamed_project,
        lambda: account_services.update_project(project=project, actor=boss, visibility="private"),
    )
    assert "only takes access away" in page
    after = Project.objects.values_list("visibility", "rights_version", "name").get(pk=project.pk)
    assert after == ("private", 2, project.name)


def test_a_nonce_replay_queued_by_a_member_removed_meanwhile_is_404(live_server):
    """A replay is judged at the rights of the moment like a note: before, it answered 200 with the entry."""
    project, boss, dave, store = shared_project("replays")
    append_entry(store=Store.objects.get(pk=store.pk), author=dave, body_md="once", client_nonce="n-0")
    requests = {"replay": ("POST", f"/api/v1/memories/{store.pk}/note", {"body_md": "once", "client_nonce": "n-0"})}
    secret = account_services.issue_token(user=dave).secret

    blocked, results = queued_on_a_held_lock(
        live_server, secret, requests, removing(store, project=project, actor=boss, handle="dave")
    )

    assert blocked == 1
    [(_, status, body)] = results
    assert status == 404 and body["error"]["type"] == "not_found_error", body
    assert Store.objects.get(pk=store.pk).entry_count == 5


def assert_waiting(count: int) -> None:
    """Wait (≤ 30 s) until `count` backends wait on a lock."""
    deadline = time.monotonic() + 30
    while waiting_on_locks() < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiting_on_locks() >= count
