"""The back office (SPEC §6): staff only, metadata only, archive with an audited reason."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.urls import reverse

from backoffice.models import AuditEvent
from memories.models import Entry, Summary
from stores.models import Store
from tests.factories import ProjectFactory, StoreFactory, UserFactory, project_store

pytestmark = pytest.mark.django_db

SECRET = "Zanzibar-7f3c-private-history"


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def seeded_store(owner):
    """A store whose entries and summary carry the secret word (and a public one beside it)."""
    store = StoreFactory(owner=owner, name="Owner private log", entry_count=2, summary_count=1)
    for seq in range(2):
        Entry.objects.create(store=store, seq=seq, author=owner, body_md=f"{SECRET} {seq}", size_bytes=40)
    Summary.objects.create(
        store=store,
        start=0,
        end=1,
        level=1,
        summary_md=f"summary of {SECRET}",
        size_bytes=40,
        model="test",
        author=owner,
        source_digest="0" * 64,
        generation=1,
    )
    project_store(ProjectFactory(), name="Team log")
    return store


def archive_url(store: Store) -> str:
    return reverse("admin:stores_store_archive_one", args=[store.pk])


def test_non_staff_cannot_reach_the_back_office(client, owner, seeded_store):
    owner.set_password("pw")
    owner.save()
    client.force_login(owner)
    for url in [reverse("admin:index"), reverse("admin:stores_store_changelist"), archive_url(seeded_store)]:
        response = client.get(url)
        assert response.status_code == 302
        assert "/login/" in response["Location"]


def test_anonymous_is_sent_to_login(client, seeded_store):
    response = client.get(reverse("admin:stores_store_changelist"))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_staff_see_store_metadata_in_the_list(staff_client, seeded_store):
    response = staff_client.get(reverse("admin:stores_store_changelist"))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Owner private log" in page and "Team log" in page
    assert "@owner" in page


def test_store_list_filters_and_search(staff_client, seeded_store):
    url = reverse("admin:stores_store_changelist")
    assert "Team log" not in staff_client.get(url, {"scope": "user"}).content.decode()
    assert "Owner private log" in staff_client.get(url, {"q": str(seeded_store.pk)}).content.decode()
    assert "Owner private log" in staff_client.get(url, {"q": "owner"}).content.decode()
    assert "Owner private log" not in staff_client.get(url, {"archived": "yes"}).content.decode()
    assert "Owner private log" in staff_client.get(url, {"visibility": "private"}).content.decode()


def test_store_list_has_no_n_plus_one(staff_client, django_assert_max_num_queries):
    for _ in range(30):
        StoreFactory()
    project_store(ProjectFactory())
    with django_assert_max_num_queries(12):
        assert staff_client.get(reverse("admin:stores_store_changelist")).status_code == 200


def test_content_models_are_not_registered():
    registered = {model._meta.label for model in admin.site._registry}
    assert "memories.Entry" not in registered
    assert "memories.Summary" not in registered
    assert "versions.Memory" not in registered
    assert "versions.Version" not in registered


def test_archiving_requires_a_reason(staff_client, seeded_store):
    for reason in ["", "   \n "]:
        response = staff_client.post(archive_url(seeded_store), {"reason": reason})
        assert response.status_code == 200  # the form again, with an error
        assert "This field is required" in response.content.decode()
    seeded_store.refresh_from_db()
    assert seeded_store.archived_at is None
    assert not AuditEvent.objects.exists()


def test_archiving_with_a_reason_archives_and_writes_an_audit_event(staff_client, staff, seeded_store):
    response = staff_client.post(archive_url(seeded_store), {"reason": "Spam reported by three users"})
    assert response.status_code == 302
    seeded_store.refresh_from_db()
    assert seeded_store.archived_at is not None
    event = AuditEvent.objects.get()
    assert event.actor == staff and event.actor_handle == staff.handle
    assert event.action == "archive_store"
    assert event.store_id == seeded_store.pk and event.store_name == "Owner private log"
    assert event.reason == "Spam reported by three users"
    assert event.request_id.startswith("req_")


def test_already_archived_stores_are_reported_not_rearchived(staff_client, seeded_store):
    staff_client.post(archive_url(seeded_store), {"reason": "first"})
    seeded_store.refresh_from_db()
    first_archived_at = seeded_store.archived_at
    response = staff_client.post(archive_url(seeded_store), {"reason": "second"}, follow=True)
    assert "Already archived" in response.content.decode()
    seeded_store.refresh_from_db()
    assert seeded_store.archived_at == first_archived_at
    assert AuditEvent.objects.count() == 1


def test_bulk_archive_action_answers_the_reason_form_which_posts_the_ids_in_its_body(staff_client, seeded_store):
    """A tester: the action redirected with every id in the URL, a request line over the HTTP layer's 8 KiB
    (a 414) past ~220 stores. The form is now the action's own answer; 300 stores go through."""
    others = [StoreFactory(name=f"Bulk {i}") for i in range(300)]
    selected = [seeded_store.pk, *(store.pk for store in others)]
    page = staff_client.post(
        reverse("admin:stores_store_changelist"), {"action": "archive_selected", "_selected_action": selected}
    )
    assert page.status_code == 200
    body = page.content.decode()
    assert "Owner private log" in body and "Bulk 299" in body
    assert f'action="{reverse("admin:stores_store_archive")}"' in body
    ids = page.context["ids"]
    assert len(ids) > 8192 and set(ids.split(",")) == {str(pk) for pk in selected}
    staff_client.post(reverse("admin:stores_store_archive"), {"reason": "bulk clean-up", "ids": ids})
    assert Store.objects.filter(archived_at__isnull=False).count() == 301
    assert AuditEvent.objects.count() == 301


def test_staff_without_store_permissions_cannot_archive(client, seeded_store):
    plain_staff = UserFactory(is_staff=True)
    client.force_login(plain_staff)
    assert client.post(archive_url(seeded_store), {"reason": "x"}).status_code == 403
    seeded_store.refresh_from_db()
    assert seeded_store.archived_at is None


def test_audit_events_cannot_be_added_changed_or_deleted(staff_client, seeded_store):
    staff_client.post(archive_url(seeded_store), {"reason": "keep me"})
    event = AuditEvent.objects.get()
    assert staff_client.get(reverse("admin:backoffice_auditevent_add")).status_code == 403
    change = staff_client.post(reverse("admin:backoffice_auditevent_change", args=[event.pk]), {"reason": "edited"})
    assert change.status_code == 403
    delete = staff_client.post(reverse("admin:backoffice_auditevent_delete", args=[event.pk]), {"post": "yes"})
    assert delete.status_code == 403
    bulk = staff_client.post(
        reverse("admin:backoffice_auditevent_changelist"), {"action": "delete_selected", "_selected_action": [event.pk]}
    )
    assert bulk.status_code in (200, 302)
    event.refresh_from_db()
    assert event.reason == "keep me"
    assert AuditEvent.objects.count() == 1


def test_audit_events_are_listed(staff_client, seeded_store):
    staff_client.post(archive_url(seeded_store), {"reason": "listed reason"})
    page = staff_client.get(reverse("admin:backoffice_auditevent_changelist")).content.decode()
    assert "listed reason" in page and "Owner private log" in page


def test_no_admin_page_renders_content(staff_client, seeded_store):
    """Crawl every registered model's list and change page (and the archive page): the secret never shows."""
    pages = [reverse("admin:index"), archive_url(seeded_store)]
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        pages.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        first = model_admin.get_queryset(_FakeRequest()).first()
        if first is not None:
            pages.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk]))
    pages.append(reverse("admin:stores_store_change", args=[seeded_store.pk]))
    for url in pages:
        response = staff_client.get(url)
        assert response.status_code == 200, url
        assert SECRET not in response.content.decode(), url


class _FakeRequest:
    """Enough of a request for ModelAdmin.get_queryset (ordering only)."""

    class user:
        is_superuser = True


def test_staff_cannot_move_a_token_to_another_user_or_widen_it(staff_client, staff, owner, client):
    """The token change form took `user`, `scopes` and `expires_at`: staff moved their own token to a user
    and read that user's private stores through the API with it. Only the name is editable now."""
    from accounts import services as account_services
    from accounts.models import ApiToken

    issued = account_services.issue_token(user=staff, scopes=["agent:read"], name="mine", expires_in_days=1)
    before = ApiToken.objects.get(pk=issued.token.pk)
    url = reverse("admin:accounts_apitoken_change", args=[before.pk])
    page = staff_client.get(url)
    assert 'name="name"' in page.content.decode()
    assert 'name="user"' not in page.content.decode() and 'name="scopes"' not in page.content.decode()
    response = staff_client.post(
        url,
        {
            **_change_form_data(page),
            "user": owner.pk,
            "name": "renamed",
            "scopes": "agent:read memories:write",
            "expires_at": "",
        },
    )
    assert response.status_code == 302
    after = ApiToken.objects.get(pk=before.pk)
    assert (after.user_id, after.scopes, after.expires_at) == (staff.pk, before.scopes, before.expires_at)
    assert after.name == "renamed"
    me = client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    assert me.json()["data"]["handle"] == staff.handle


class _ShownValues(HTMLParser):
    """The page's hidden ``initial-…`` inputs (what each field showed at load, `ShownStateForm`), as a
    browser would post them: one value per input, lists for repeated names."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, list[str]] = {}

    def handle_starttag(self, tag, attrs) -> None:
        attributes = dict(attrs)
        name = attributes.get("name") or ""
        if tag == "input" and attributes.get("type") == "hidden" and name.startswith("initial-"):
            self.values.setdefault(name, []).append(attributes.get("value") or "")


def _change_form_data(response) -> dict:
    """The POST data of an admin change page as it was rendered (the object's and each inline's values,
    and the hidden values the page carries of what it showed)."""
    from django.forms.models import model_to_dict

    def values(form) -> dict:
        raw = {**model_to_dict(form.instance), **form.initial} if form.instance.pk else dict(form.initial)
        out = {}
        for name in form.fields:
            value = raw.get(name)
            if value is None or value is False:
                continue
            if isinstance(value, list | tuple):  # many-to-many: the keys, as the select posts them
                out[form.add_prefix(name)] = [str(getattr(item, "pk", item)) for item in value]
                continue
            out[form.add_prefix(name)] = "on" if value is True else getattr(value, "pk", value)
        return out

    data = values(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update({management.add_prefix(k): v for k, v in management.initial.items()})
        for form in formset.forms:
            data.update(values(form))
    shown = _ShownValues()
    shown.feed(response.content.decode())
    data.update({name: found[0] if len(found) == 1 else found for name, found in shown.values.items()})
    return data


@pytest.fixture
def private_project(owner):
    from accounts.models import ProjectMembership
    from tests.factories import ProjectFactory

    project = ProjectFactory(slug="hush", visibility="private")
    ProjectMembership.objects.create(project=project, user=owner, role="owner")
    return project


def test_the_back_office_never_makes_a_private_project_readable(staff_client, staff, private_project):
    """A breaker's staff member added themselves to a private project in the back office and read its history
    through the API; another made themselves owner of a project they were a member of, then opened it to
    anyone; another renamed a project's slug and created a project of their own under it, which its members'
    notes then went to. Staff may take access away, never grant it."""
    from accounts.models import ProjectMembership

    assert staff_client.get(reverse("admin:accounts_projectmembership_add")).status_code == 403
    assert staff_client.get(reverse("admin:accounts_project_add")).status_code == 403
    assert staff_client.get(reverse("admin:accounts_section_add")).status_code == 403
    url = reverse("admin:accounts_project_change", args=[private_project.pk])
    data = _change_form_data(staff_client.get(url))
    assert "slug" not in data  # read-only; so are the membership rows listed on the page
    refused = staff_client.post(url, {**data, "visibility": "public", "slug": "taken-over"})
    assert refused.status_code == 200 and "only takes access away" in refused.content.decode()
    private_project.refresh_from_db()
    assert (private_project.visibility, private_project.slug) == ("private", "hush")
    former = ProjectMembership.objects.create(project=private_project, user=staff, role="member", active=False)
    member_url = reverse("admin:accounts_projectmembership_change", args=[former.pk])
    member_data = _change_form_data(staff_client.get(member_url))
    for change in ({"active": "on"}, {"active": "on", "role": "owner"}, {"role": "owner"}):
        response = staff_client.post(member_url, {**member_data, **change})
        assert response.status_code == 200 and "errorlist" in response.content.decode(), change
        former.refresh_from_db()
        assert (former.active, former.role) == (False, "member"), change
    ProjectMembership.objects.filter(pk=former.pk).update(active=True)  # an owner added staff as a member
    response = staff_client.post(member_url, {**member_data, "active": "on", "role": "owner"})
    assert "Staff cannot make themselves owner" in response.content.decode()
    former.refresh_from_db()
    assert former.role == "member"
    assert staff_client.post(reverse("admin:accounts_projectmembership_delete", args=[former.pk])).status_code == 403


def test_the_back_office_may_narrow_access_and_repair_ownership(staff_client, owner, private_project):
    from accounts.models import ProjectMembership, User
    from tests.factories import UserFactory

    private_project.visibility = "public"
    private_project.save()
    url = reverse("admin:accounts_project_change", args=[private_project.pk])
    data = _change_form_data(staff_client.get(url))
    assert staff_client.post(url, {**data, "visibility": "private", "name": "Hush"}).status_code == 302
    private_project.refresh_from_db()
    assert (private_project.visibility, private_project.name) == ("private", "Hush")
    owners = ProjectMembership.objects.get(project=private_project, user=owner)
    owner_url = reverse("admin:accounts_projectmembership_change", args=[owners.pk])
    owner_data = _change_form_data(staff_client.get(owner_url))
    last = staff_client.post(owner_url, {k: v for k, v in owner_data.items() if k != "active"})
    assert "last active owner" in last.content.decode()  # the API's rule, here too
    helper = ProjectMembership.objects.create(project=private_project, user=UserFactory(handle="helper"))
    member_url = reverse("admin:accounts_projectmembership_change", args=[helper.pk])
    member_data = _change_form_data(staff_client.get(member_url))
    busy = staff_client.post(member_url, {**member_data, "role": "owner"})
    assert "It has an active owner" in busy.content.decode()  # the owner can do it through the API
    User.objects.filter(pk=owner.pk).update(is_active=False)  # the owner's account was closed: the repair
    assert staff_client.post(member_url, {**member_data, "role": "owner"}).status_code == 302
    helper.refresh_from_db()
    assert (helper.role, helper.active) == ("owner", True)
    without_active = {k: v for k, v in member_data.items() if k != "active"}
    assert "last active owner" in staff_client.post(member_url, {**without_active, "role": "owner"}).content.decode()


def test_a_write_judged_before_a_back_office_narrowing_is_judged_again(staff_client, owner, private_project):
    """The back office's changes bump the project's `rights_version` as the API's do (docs/access.md "Writes
    racing a removal"): a note or file write whose access check ran before staff deactivated its author is
    refused, not stored; one whose author keeps the right is stored; making a project private bumps too."""
    from accounts.models import ProjectMembership
    from memories.services import append_entry
    from stores.errors import StoreNotFound
    from stores.selectors import get_store_for
    from versions import services as version_services
    from versions.actors import Actor

    store = project_store(private_project, name="Team log")
    dave = UserFactory(handle="dave")
    membership = ProjectMembership.objects.create(project=private_project, user=dave, role="member")
    judged, still = get_store_for(dave, store.pk, need="write"), get_store_for(owner, store.pk, need="write")
    member_url = reverse("admin:accounts_projectmembership_change", args=[membership.pk])
    data = _change_form_data(staff_client.get(member_url))
    assert staff_client.post(member_url, {k: v for k, v in data.items() if k != "active"}).status_code == 302
    with pytest.raises(StoreNotFound):
        append_entry(store=judged, author=dave, body_md="late")
    with pytest.raises(StoreNotFound):
        version_services.create_memory(store=judged, actor=Actor.user(dave.pk), path="/late.md", content="late")
    assert append_entry(store=still, author=owner, body_md="mine").created
    store.refresh_from_db()
    private_project.refresh_from_db()
    assert (store.entry_count, store.memory_count, private_project.rights_version) == (1, 0, 1)
    type(private_project).objects.filter(pk=private_project.pk).update(visibility="public")
    url = reverse("admin:accounts_project_change", args=[private_project.pk])
    assert (
        staff_client.post(url, {**_change_form_data(staff_client.get(url)), "visibility": "private"}).status_code == 302
    )
    private_project.refresh_from_db()
    assert private_project.rights_version == 2


def test_staff_find_a_renamed_project_by_its_former_slug_and_see_it_on_the_page(staff_client, owner):
    """A retired slug still names its project and nobody else can take it (docs/access.md "Renamed slugs"):
    staff who see a create refused `slug_taken` find the project holding it."""
    from accounts import services as account_services

    project = account_services.create_project(creator=owner, slug="apollo", name="Moon program")
    account_services.update_project(project=project, actor=owner, slug="artemis")
    found = staff_client.get(reverse("admin:accounts_project_changelist"), {"q": "apollo"}).content.decode()
    assert "artemis" in found
    page = staff_client.get(reverse("admin:accounts_project_change", args=[project.pk])).content.decode()
    assert "former slugs" in page.lower() and "apollo" in page
