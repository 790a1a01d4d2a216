"""A breaker's findings on the back office (2026-12-06), each a test that failed before its fix:

list actions all or nothing and only for staff who may change (`config.admin.AtomicActionsAdmin`), malformed
selections refused, a user deleted while they post, two handles renamed at once, names by the API's rules,
re-activation and superuser rights not granted here, and 403/404 pages for people.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connections
from django.urls import reverse

from accounts import services as account_services
from accounts.models import ApiToken, Project, User
from config.text import quoted
from memories.services import append_entry
from stores.models import Store
from tests.backoffice.test_admin import _change_form_data
from tests.contract.test_rights_races_lock import posted_while
from tests.factories import ProjectFactory, SectionFactory, UserFactory, board_store
from tests.threads import held_past_the_lock_budget

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def staff_pages(client):
    client.force_login(UserFactory(handle="staffer", is_staff=True, is_superuser=True))
    return client


def signed_in_staff(client, handle: str, *codenames: str) -> User:
    """A staff member who is not a superuser, holding only the permissions `codenames`, signed in on `client`."""
    user = UserFactory(handle=handle, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


def test_a_bulk_revoke_that_meets_a_lock_timeout_revokes_nothing(staff_pages):
    """Tokens are listed newest first: the first is revoked, the second is locked by someone else until the
    lock budget runs out. Before, the first stayed revoked under a page saying nothing was saved."""
    holder = UserFactory(handle="holder")
    older, newer = (account_services.issue_token(user=holder, name=name).token for name in ("older", "newer"))
    with held_past_the_lock_budget(lambda: ApiToken.objects.select_for_update(no_key=True).get(pk=older.pk)):
        page = staff_pages.post(
            reverse("admin:accounts_apitoken_changelist"),
            {"action": "revoke", "_selected_action": [str(newer.pk), str(older.pk)]},
        )

    assert page.status_code == 503 and "nothing was saved" in page.content.decode()
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()


def test_staff_who_may_only_view_tokens_cannot_revoke_them(client):
    signed_in_staff(client, "viewer", "view_apitoken")
    token = account_services.issue_token(user=UserFactory(handle="carol")).token
    url = reverse("admin:accounts_apitoken_changelist")

    assert 'value="revoke"' not in client.get(url).content.decode()
    client.post(url, {"action": "revoke", "_selected_action": [str(token.pk)]})

    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


def test_the_revoke_action_counts_only_the_tokens_it_revoked(staff_pages):
    holder = UserFactory(handle="holder")
    live, gone = (account_services.issue_token(user=holder).token for _ in range(2))
    account_services.revoke_token(token=gone)
    url = reverse("admin:accounts_apitoken_changelist")

    done = staff_pages.post(url, {"action": "revoke", "_selected_action": [str(live.pk), str(gone.pk)]}, follow=True)

    assert "Revoked 1 token(s) (1 already revoked, left as they were)." in messages_of(done)


@pytest.mark.parametrize(
    ("changelist", "action"),
    [
        ("admin:accounts_apitoken_changelist", "revoke"),
        ("admin:accounts_user_changelist", "delete_selected"),
        ("admin:accounts_project_changelist", "delete_selected"),
        ("admin:stores_store_changelist", "archive_selected"),
    ],
)
@pytest.mark.parametrize("selected", ["notauuid", "\x00", "\ufffd\ufffd", "1"])
def test_a_malformed_selection_is_refused_with_a_message_not_a_500(staff_pages, changelist, action, selected):
    account_services.issue_token(user=UserFactory(handle="holder"))
    url = reverse(changelist)

    refused = staff_pages.post(url, {"action": action, "_selected_action": [selected]}, follow=True)

    assert refused.status_code == 200
    assert "names an item that does not exist; nothing was done" in " ".join(messages_of(refused))
    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()


def test_a_user_deleted_while_they_post_is_kept_with_a_message_not_a_500(staff_pages, monkeypatch):
    """The deletion collects what protects the user, then the user's note commits, then the deletion meets
    it at commit (a foreign key violation): before, a 500; the breaker saw 6 of 8 such deletions fail so."""
    from accounts import admin as accounts_admin

    board = board_store(SectionFactory(slug="open-board", posting="open"), name="Open board")
    poster = UserFactory(handle="poster")
    collect = accounts_admin.UserAdmin.get_deleted_objects

    def collect_then_a_note_lands(self, objs, request):
        found = collect(self, objs, request)

        def note() -> None:
            try:
                append_entry(store=Store.objects.get(pk=board.pk), author=poster, body_md="still here")
            finally:
                connections.close_all()

        thread = threading.Thread(target=note)
        thread.start()
        thread.join(30)
        return found

    monkeypatch.setattr(accounts_admin.UserAdmin, "get_deleted_objects", collect_then_a_note_lands)
    url = reverse("admin:accounts_user_delete", args=[poster.pk])

    answer = staff_pages.post(url, {"post": "yes"}, follow=True)

    assert answer.status_code == 200
    assert "the user wrote something while the deletion ran" in " ".join(messages_of(answer))
    assert User.objects.filter(pk=poster.pk).exists()
    assert Store.objects.get(pk=board.pk).entry_count == 1


def test_two_users_added_with_one_handle_at_once_is_a_message_not_a_500(staff_pages):
    """The form's uniqueness check ran before either user committed; the loser met the constraint."""
    url = reverse("admin:accounts_user_add")
    added = {"handle": "Taken", "password1": "a long passphrase 1", "password2": "a long passphrase 1"}

    page = posted_while(staff_pages, url, added, lambda: UserFactory(handle="taken"))

    assert page == ""  # a redirect: the message is on the next page
    assert list(User.objects.filter(handle__iexact="taken").values_list("handle", flat=True)) == ["taken"]
    follow = staff_pages.get(url)
    assert "That handle was just taken by another user; nothing was saved." in " ".join(messages_of(follow))


def test_a_handle_never_changes_so_nobody_can_take_over_anothers_grants(staff_pages, client):
    """A tester: staff renamed bob to free "bob", took the handle, and received the store its owner then
    shared "with bob". Handles are read-only on every change page, the staff member's own included."""
    bob = UserFactory(handle="bob")
    url = reverse("admin:accounts_user_change", args=[bob.pk])
    page = staff_pages.get(url)
    assert 'name="handle"' not in page.content.decode()
    staff_pages.post(url, {**_change_form_data(page), "handle": "bob-old", "display_name": "Bob"})
    bob.refresh_from_db()
    assert (bob.handle, bob.display_name) == ("bob", "Bob")  # the rest of the page still saves
    me = signed_in_staff(client, "staffer2", "change_user", "view_user")
    mine = reverse("admin:accounts_user_change", args=[me.pk])
    client.post(mine, {**_change_form_data(client.get(mine)), "handle": "bob"})
    me.refresh_from_db()
    assert me.handle == "staffer2"


@pytest.mark.parametrize(
    "handle", ["me", "ME", "00000000-0000-0000-0000-000000000000", "0f2c8a4e9b1d4c3aa1b2c3d4e5f60718"]
)
def test_a_handle_the_api_could_not_address_is_refused_everywhere_a_user_is_made(staff_pages, handle):
    added = {"handle": handle, "password1": "a long passphrase 1", "password2": "a long passphrase 1"}
    page = staff_pages.post(reverse("admin:accounts_user_add"), added)
    assert page.status_code == 200 and "errorlist" in page.content.decode()
    with pytest.raises(ValidationError):
        User.objects.create_user(handle)
    with pytest.raises(CommandError):
        call_command("create_token", "--handle", handle, "--create-user")
    assert not User.objects.filter(handle__iexact=handle).exists()


@pytest.mark.parametrize("name", ["\u202eevil", "bell\x07", "two\nlines", "\ufeff", "\u200b"])
def test_a_display_name_follows_the_name_rule(staff_pages, name):
    user = UserFactory(handle="named", display_name="Named")
    url = reverse("admin:accounts_user_change", args=[user.pk])
    page = staff_pages.post(url, {**_change_form_data(staff_pages.get(url)), "display_name": name})
    assert page.status_code == 200 and "errorlist" in page.content.decode()
    user.refresh_from_db()
    assert user.display_name == "Named"


@pytest.mark.parametrize("reason", ["\u200b", "\u202eevil", "\u2800", "\u3164", "\u2066\u2069", "bell\x07"])
def test_an_archive_reason_is_written_text(staff_pages, reason):
    """A tester archived a store with a reason of one zero-width space (and bidi controls, a bell)."""
    store = Store.objects.get(pk=board_store(SectionFactory(slug="needhelp")).pk)
    page = staff_pages.post(reverse("admin:stores_store_archive_one", args=[store.pk]), {"reason": reason})
    assert page.status_code == 200 and "reason" in page.content.decode()
    store.refresh_from_db()
    assert store.archived_at is None
    lines = staff_pages.post(
        reverse("admin:stores_store_archive_one", args=[store.pk]), {"reason": "Spam.\r\nReported twice.\tDone"}
    )
    assert lines.status_code == 302
    store.refresh_from_db()
    assert store.archived_at is not None


def test_a_bulk_archive_larger_than_one_transaction_may_take_is_refused_whole(staff_pages, monkeypatch):
    """A tester: 1,600 stores in one archive ran past the request's database deadline on every try (a 503
    whose "try again" could not succeed). Over `ARCHIVE_BATCH_MAX` the action and the form say so and
    archive nothing."""
    from backoffice import admin as backoffice_admin

    monkeypatch.setattr(backoffice_admin, "ARCHIVE_BATCH_MAX", 3)
    stores = [Store.objects.get(pk=board_store(SectionFactory(slug=f"s{i}")).pk) for i in range(4)]
    ids = [str(store.pk) for store in stores]
    action = staff_pages.post(
        reverse("admin:stores_store_changelist"),
        {"action": "archive_selected", "_selected_action": ids},
        follow=True,
    )
    assert "4 stores selected: archive at most" in " ".join(messages_of(action))
    form = staff_pages.post(reverse("admin:stores_store_archive"), {"ids": ",".join(ids), "reason": "x"}, follow=True)
    assert "4 stores selected" in " ".join(messages_of(form))
    assert not Store.objects.filter(archived_at__isnull=False).exists()
    three = staff_pages.post(reverse("admin:stores_store_archive"), {"ids": ",".join(ids[:3]), "reason": "x"})
    assert three.status_code == 302 and Store.objects.filter(archived_at__isnull=False).count() == 3


def test_view_on_site_with_an_id_its_model_cannot_hold_is_a_404(staff_pages):
    """A tester: `/backoffice/r/<content type>/notauuid/` was a 500 for every model keyed by a UUID."""
    from django.contrib.contenttypes.models import ContentType

    for model in (User, Store, ApiToken, Project):
        content_type = ContentType.objects.get_for_model(model)
        for bad in ("notauuid", "1", "0f2c8a4e-9b1d-4c3a-a1b2-c3d4e5f6071"):
            page = staff_pages.get(f"/backoffice/r/{content_type.pk}/{bad}/")
            assert page.status_code == 404, (model, bad, page.status_code)


def test_view_on_site_still_needs_a_staff_login(client):
    from django.contrib.contenttypes.models import ContentType

    content_type = ContentType.objects.get_for_model(User)
    page = client.get(f"/backoffice/r/{content_type.pk}/notauuid/")
    assert page.status_code == 302 and "login" in page["Location"]


def test_no_list_filters_on_credential_digests(staff_pages):
    """A tester read each token's SHA-256 a character at a time through `?digest__startswith=`."""
    from sessions.services import environments as environment_services

    holder = UserFactory(handle="holder")
    account_services.issue_token(user=holder)
    environment = environment_services.create_environment(owner=holder, name="Farm")
    environment_services.issue_environment_key(environment=environment, name="worker")
    for name in ("accounts_apitoken", "agent_sessions_environmentkey"):
        changelist = reverse(f"admin:{name}_changelist")
        assert staff_pages.get(changelist).status_code == 200
        for lookup in ("digest__startswith", "digest", "digest__gt", "digest__regex"):
            page = staff_pages.get(changelist, {lookup: "a"})
            assert page.status_code == 400, (name, lookup, page.status_code)
        assert staff_pages.get(changelist, {"prefix__startswith": "m"}).status_code == 200


def test_names_follow_the_apis_rules_on_every_page(staff_pages):
    """The back office stored a project name with escapes and bidi controls, which a project store created
    afterwards then took as its name, and token names the API refuses (empty, control characters)."""
    project = ProjectFactory(slug="apollo", name="Apollo")
    token = account_services.issue_token(user=UserFactory(handle="holder"), name="laptop").token
    project_url = reverse("admin:accounts_project_change", args=[project.pk])
    token_url = reverse("admin:accounts_apitoken_change", args=[token.pk])

    for url, name in [(project_url, "Apo\x1b[31mllo\x07"), (token_url, "x\x1by"), (token_url, "")]:
        refused = staff_pages.post(url, {**_change_form_data(staff_pages.get(url)), "name": name})
        assert refused.status_code == 200 and "errorlist" in refused.content.decode(), (url, name)

    assert Project.objects.get(pk=project.pk).name == "Apollo"
    assert ApiToken.objects.get(pk=token.pk).name == "laptop"


def test_the_back_office_never_re_activates_a_user_and_an_operator_can(staff_pages):
    """Deactivate the owner, repair the ownership with another member, re-activate the owner: staff made a
    member of their choice an owner beside the real one (a breaker). Re-activation is an operator's act."""
    leaver = UserFactory(handle="leaver", is_active=False)
    url = reverse("admin:accounts_user_change", args=[leaver.pk])

    refused = staff_pages.post(url, {**_change_form_data(staff_pages.get(url)), "is_active": "on"})

    assert "manage.py reactivate_user" in refused.content.decode()
    assert not User.objects.get(pk=leaver.pk).is_active
    call_command("reactivate_user", "LEAVER")
    assert User.objects.get(pk=leaver.pk).is_active


@pytest.mark.parametrize("handle", ["\udcff", "a\x00b", "ghost"])
def test_re_activating_a_handle_no_user_has_is_a_clear_error(handle):
    """Bytes that are not UTF-8 in argv (`\\udcff` to Python) raised a UnicodeEncodeError in the driver
    (helper-94): every handle no user can hold is the one 'No user with handle …' error."""
    with pytest.raises(CommandError) as refused:
        call_command("reactivate_user", handle)
    assert str(refused.value) == f"No user with handle {quoted(handle, 80)}."


def test_staff_who_are_not_superusers_cannot_grant_superuser_rights(client):
    editor = signed_in_staff(client, "editor", "view_user", "change_user")
    url = reverse("admin:accounts_user_change", args=[editor.pk])

    page = client.get(url)
    assert 'name="is_superuser"' not in page.content.decode()
    client.post(url, {**_change_form_data(page), "is_superuser": "on", "display_name": "Editor"})

    assert User.objects.values_list("is_superuser", "display_name").get(pk=editor.pk) == (False, "Editor")


def test_forbidden_and_missing_back_office_pages_are_html_for_people(client):
    signed_in_staff(client, "viewer", "view_apitoken")

    forbidden = client.get(reverse("admin:accounts_project_changelist"))
    missing = client.get("/backoffice/accounts/apitoken/00000000-0000-4000-8000-000000000000/change/", follow=True)
    nowhere = client.get("/backoffice/no/such/page/")

    assert forbidden.status_code == 403 and forbidden["Content-Type"].startswith("text/html")
    assert "Not allowed" in forbidden.content.decode()
    assert nowhere.status_code == 404 and nowhere["Content-Type"].startswith("text/html")
    assert "Not found" in nowhere.content.decode()
    assert missing.status_code == 200  # the admin's own answer: back to the list with a message


def test_the_screenings_refusals_on_back_office_paths_are_html_pages(client):
    """The hostile-input screening answers the back office's people with its HTML page, naming the problem;
    the API keeps SPEC §2's JSON for the same refusal."""
    signed_in_staff(client, "viewer", "view_apitoken")

    page = client.get("/backoffice/accounts/apitoken/?q=%00")
    api = client.get("/api/v1/memories?q=%00")

    assert page.status_code == 400 and page["Content-Type"] == "text/html; charset=utf-8"
    assert "Bad request" in page.content.decode() and "Query string" in page.content.decode()
    assert page["Request-Id"] in page.content.decode()
    assert api.status_code == 400 and api.json()["error"]["message"].startswith("Query string")


def test_a_user_with_groups_and_permissions_can_be_saved_unchanged_and_deactivated(staff_pages):
    """The stale check compared the page's keys (strings) with the row's (integers): any user with a group or
    a permission could not be saved at all, so not deactivated either (a breaker)."""
    from django.contrib.auth.models import Group

    member = UserFactory(handle="member", is_staff=True)
    member.groups.add(Group.objects.create(name="ops"))
    member.user_permissions.add(Permission.objects.get(codename="view_apitoken"))
    url = reverse("admin:accounts_user_change", args=[member.pk])

    deactivated = staff_pages.post(
        url, {k: v for k, v in _change_form_data(staff_pages.get(url)).items() if k != "is_active"}
    )

    assert deactivated.status_code == 302
    assert not User.objects.get(pk=member.pk).is_active


def test_staff_who_are_not_superusers_cannot_change_staff_or_their_passwords(client):
    """One allowed to change users set a superuser's password and signed in as them (a breaker)."""
    signed_in_staff(client, "editor", "view_user", "change_user")
    boss = UserFactory(handle="boss", is_staff=True, is_superuser=True)
    agent = UserFactory(handle="agent")
    password = {"password1": "Pwned-by-editor-42", "password2": "Pwned-by-editor-42", "usable_password": "true"}

    assert client.post(reverse("admin:auth_user_password_change", args=[boss.pk]), password).status_code == 403
    page = client.get(reverse("admin:accounts_user_change", args=[boss.pk]))
    assert 'name="is_active"' not in page.content.decode()  # view only
    assert not User.objects.get(pk=boss.pk).check_password("Pwned-by-editor-42")
    changed = client.post(reverse("admin:auth_user_password_change", args=[agent.pk]), password)
    assert changed.status_code == 302 and User.objects.get(pk=agent.pk).check_password("Pwned-by-editor-42")


def test_only_superusers_change_groups(client):
    """A staff member allowed to change groups gave their own group every permission (a breaker)."""
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="ops")
    editor = signed_in_staff(client, "editor", "view_group", "change_group")
    editor.groups.add(group)
    everything = [str(pk) for pk in Permission.objects.values_list("pk", flat=True)]

    client.post(reverse("admin:auth_group_change", args=[group.pk]), {"name": "ops", "permissions": everything})

    assert group.permissions.count() == 0
    assert not User.objects.get(pk=editor.pk).has_perm("accounts.change_user")


def test_a_malformed_back_office_request_is_an_html_400(staff_pages):
    fields = {"action": "revoke", "_selected_action": [str(n) for n in range(1200)]}  # > DATA_UPLOAD_MAX_NUMBER_FIELDS

    refused = staff_pages.post(reverse("admin:accounts_apitoken_changelist"), fields)

    assert refused.status_code == 400 and refused["Content-Type"].startswith("text/html")
    assert "Bad request" in refused.content.decode()


def test_staff_who_are_not_superusers_cannot_make_anyone_staff(client):
    """A third breaker: set the password of a non-staff user who kept a group's permissions, make them
    staff, sign in as them — and act with every permission the group holds."""
    from django.contrib.auth.models import Group

    admins = Group.objects.create(name="admins")
    admins.permissions.set(Permission.objects.all())
    dormant = UserFactory(handle="dormant")
    dormant.groups.add(admins)
    signed_in_staff(client, "editor", "view_user", "change_user")
    url = reverse("admin:accounts_user_change", args=[dormant.pk])

    page = client.get(url)
    assert 'name="is_staff"' not in page.content.decode()
    client.post(url, {**_change_form_data(page), "is_staff": "on", "display_name": "Dormant"})

    assert User.objects.values_list("is_staff", "display_name").get(pk=dormant.pk) == (False, "Dormant")
