"""A back-office change page saves only what it showed as it still is (accounts/admin.py `ShownStateForm`,
`RowLockedOnPost`; docs/access.md "The back office and the API at once").

A page loaded before someone else's change (an owner's through the API, another staff member's) and then
saved is refused with "Changed since this page was loaded", naming the fields, and changes nothing: before,
a membership page saved unchanged demoted a member the owner had just promoted (a fresh tester's finding).
A page saved while another change commits waits for it under the row's lock and then judges the row as it
is; a saved page writes only the columns it changed, so a token revoked meanwhile stays revoked.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.hashers import check_password
from django.urls import reverse

from accounts import services as account_services
from accounts.models import ApiToken, Project, ProjectMembership, SectionMembership, User
from tests.backoffice.test_admin import _change_form_data
from tests.contract.test_rights_races_lock import posted_while
from tests.factories import ProjectFactory, SectionFactory, UserFactory
from tests.threads import held_past_the_lock_budget

pytestmark = [pytest.mark.django_db(transaction=True)]

STALE = "Changed since this page was loaded"


@pytest.fixture
def staff_pages(client):
    client.force_login(UserFactory(handle="staffer", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def apollo():
    """(project apollo, public; boss its owner; bob a member)."""
    project = ProjectFactory(slug="apollo", visibility="public", name="Apollo")
    boss, bob = UserFactory(handle="boss"), UserFactory(handle="bob")
    ProjectMembership.objects.create(project=project, user=boss, role="owner")
    ProjectMembership.objects.create(project=project, user=bob, role="member")
    return project, boss, bob


def test_a_membership_page_saved_unchanged_after_an_owners_promotion_is_refused(staff_pages, apollo):
    project, boss, bob = apollo
    url = reverse("admin:accounts_projectmembership_change", args=[ProjectMembership.objects.get(user=bob).pk])
    as_loaded = _change_form_data(staff_pages.get(url))

    account_services.set_project_member(project=project, actor=boss, handle="bob", role="owner")
    version = Project.objects.get(pk=project.pk).rights_version
    refused = staff_pages.post(url, as_loaded)

    assert refused.status_code == 200
    page = refused.content.decode()
    assert STALE in page and "(Role)" in page
    assert ProjectMembership.objects.values_list("role", "active").get(user=bob) == ("owner", True)
    assert Project.objects.get(pk=project.pk).rights_version == version  # nothing saved, nothing bumped

    reloaded = _change_form_data(staff_pages.get(url))
    assert staff_pages.post(url, {**reloaded, "role": "member"}).status_code == 302  # judged as it is now
    assert ProjectMembership.objects.get(user=bob).role == "member"


def test_a_section_membership_page_saved_after_a_change_of_role_is_refused(staff_pages):
    section = SectionFactory(slug="help")
    boss, carol = UserFactory(handle="boss"), UserFactory(handle="carol")
    SectionMembership.objects.create(section=section, user=boss, role="owner")
    membership = SectionMembership.objects.create(section=section, user=carol, role="member", can_post=False)
    url = reverse("admin:accounts_sectionmembership_change", args=[membership.pk])
    as_loaded = _change_form_data(staff_pages.get(url))

    account_services.set_section_member(section=section, actor=boss, handle="carol", role="poster")
    refused = staff_pages.post(url, {k: v for k, v in as_loaded.items() if k != "active"})

    assert STALE in refused.content.decode() and "Can post" in refused.content.decode()
    assert SectionMembership.objects.values_list("can_post", "active").get(pk=membership.pk) == (True, True)


def test_a_project_page_loaded_before_an_api_rename_is_refused_and_keeps_the_rename(staff_pages, apollo):
    project, boss, _ = apollo
    url = reverse("admin:accounts_project_change", args=[project.pk])
    as_loaded = _change_form_data(staff_pages.get(url))

    account_services.update_project(project=project, actor=boss, name="Apollo 11")
    refused = staff_pages.post(url, {**as_loaded, "visibility": "private"})

    assert STALE in refused.content.decode() and "(Name)" in refused.content.decode()
    assert Project.objects.values_list("name", "visibility", "rights_version").get(pk=project.pk) == (
        "Apollo 11",
        "public",
        0,
    )


def test_a_post_that_does_not_say_what_its_page_showed_is_refused(staff_pages, apollo):
    """A scripted POST without the hidden values (or with them edited) cannot skip the check."""
    _, _, bob = apollo
    url = reverse("admin:accounts_projectmembership_change", args=[ProjectMembership.objects.get(user=bob).pk])
    as_loaded = _change_form_data(staff_pages.get(url))
    bare = {k: v for k, v in as_loaded.items() if not k.startswith("initial-")}

    for data in (bare, {**as_loaded, "initial-role": "owner"}):
        refused = staff_pages.post(url, {k: v for k, v in data.items() if k != "active"})
        assert STALE in refused.content.decode()
        assert ProjectMembership.objects.get(user=bob).active


def test_a_user_page_loaded_before_a_deactivation_never_reactivates_the_user(client, staff_pages):
    """Two staff members: one deactivates a user, the other saves a page loaded before that (to change the
    display name). Before, the second page saved `is_active` back on."""
    target = UserFactory(handle="leaver", display_name="Leaver")
    url = reverse("admin:accounts_user_change", args=[target.pk])
    as_loaded = _change_form_data(staff_pages.get(url))
    client_b = type(client)()
    client_b.force_login(UserFactory(handle="other-staffer", is_staff=True, is_superuser=True))
    deactivate = {k: v for k, v in _change_form_data(client_b.get(url)).items() if k != "is_active"}
    assert client_b.post(url, deactivate).status_code == 302

    refused = staff_pages.post(url, {**as_loaded, "display_name": "Renamed"})

    assert STALE in refused.content.decode() and "(Is active)" in refused.content.decode()
    assert User.objects.values_list("is_active", "display_name").get(pk=target.pk) == (False, "Leaver")


def test_a_token_page_saved_while_the_api_revokes_the_token_keeps_it_revoked(staff_pages):
    """The page's POST waits for the revocation under the row's lock, then writes only the name."""
    owner = UserFactory(handle="holder")
    issued = account_services.issue_token(user=owner, name="laptop")
    url = reverse("admin:accounts_apitoken_change", args=[issued.token.pk])
    renamed = {**_change_form_data(staff_pages.get(url)), "name": "old laptop"}

    page = posted_while(staff_pages, url, renamed, lambda: account_services.revoke_token(token=issued.token))

    assert STALE not in page
    token = ApiToken.objects.get(pk=issued.token.pk)
    assert token.name == "old laptop" and token.revoked_at is not None


def test_a_password_set_while_the_user_is_deactivated_keeps_the_user_inactive(staff_pages):
    """The password page saves the whole user: it now reads and saves it in one transaction under the row's
    lock, so a deactivation committing meanwhile is not written back as active."""
    target = UserFactory(handle="leaver")
    url = reverse("admin:auth_user_password_change", args=[target.pk])
    new_password = "a long and new passphrase 42"
    data = {"password1": new_password, "password2": new_password, "usable_password": "true"}

    def deactivate() -> None:
        User.objects.select_for_update(no_key=True).get(pk=target.pk)
        User.objects.filter(pk=target.pk).update(is_active=False)

    posted_while(staff_pages, url, data, deactivate)

    target = User.objects.get(pk=target.pk)
    assert not target.is_active
    assert check_password(new_password, target.password)


def test_a_page_that_waits_too_long_for_a_lock_is_an_html_503_and_saves_nothing(staff_pages, apollo):
    """An owner's change holds the project's row longer than the lock budget: the membership page's save is
    a 503 page for a person (not the API's JSON) that says nothing was saved — and nothing was."""
    project, _, bob = apollo
    url = reverse("admin:accounts_projectmembership_change", args=[ProjectMembership.objects.get(user=bob).pk])
    deactivate_bob = {k: v for k, v in _change_form_data(staff_pages.get(url)).items() if k != "active"}
    with held_past_the_lock_budget(lambda: Project.objects.select_for_update().get(pk=project.pk)):
        page = staff_pages.post(url, deactivate_bob)

    assert page.status_code == 503 and page["Content-Type"].startswith("text/html")
    assert page["Retry-After"] and "nothing was saved" in page.content.decode()
    assert ProjectMembership.objects.get(user=bob).active


def test_a_name_with_outer_spaces_does_not_make_its_page_look_stale(staff_pages):
    """The API stores names as sent; the stale check compared the page's shown value, stripped by the
    field's cleaning, with the row's: such a page was refused on every save (a breaker: an owner could keep
    staff from making the project private)."""
    project = ProjectFactory(slug="padded", visibility="public", name=" Leaky  ")
    token = account_services.issue_token(user=UserFactory(handle="holder"), name=" spaced ")
    project_url = reverse("admin:accounts_project_change", args=[project.pk])
    token_url = reverse("admin:accounts_apitoken_change", args=[token.token.pk])

    made_private = staff_pages.post(
        project_url, {**_change_form_data(staff_pages.get(project_url)), "visibility": "private"}
    )
    renamed = staff_pages.post(token_url, {**_change_form_data(staff_pages.get(token_url)), "name": "laptop"})

    assert made_private.status_code == 302 and renamed.status_code == 302
    assert Project.objects.values_list("visibility", "name").get(pk=project.pk) == ("private", " Leaky  ")
    assert ApiToken.objects.get(pk=token.token.pk).name == "laptop"
