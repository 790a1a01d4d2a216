"""Staff management of accounts, tokens, projects, sections and memberships (metadata only).

The back office may take access away and repair ownership; it never grants read access (SPEC §2: `is_staff`
gives no extra API access, private history is never exposed to admins). A staff member who could add
themselves to a private project, re-activate a membership or make a private project public would read its
history through the API the next minute (found by a breaker). So on these pages:

- memberships are changed one at a time on their own page (the inlines only list them): never added,
  deleted or moved to another user or parent, never re-activated or given back the right to post; they may
  be deactivated or demoted — but never the last active owner's (the API's last-owner rule,
  `services.keeps_an_owner`) — and an active member other than oneself may be made owner only where no
  active owner is left (the repair of a project whose owners' accounts were closed);
- projects and sections are not created here (the API makes the creator their owner); their slug cannot
  change (a freed slug let staff create a project under it and receive its members' notes), visibility
  only goes from public to private, posting only from open to members-only.

New members join through the API, by an owner's request (`POST …/members`).

Every change page here saves only what it showed as it still is: the form carries each field's value at load
(`ShownStateForm`), the row is read again under its lock on POST (`RowLockedOnPost`), a page whose values
no longer match the row is refused ("changed since this page was loaded") and a saved page writes only the
fields it changed (`update_fields`). Without that, a page loaded before an owner's API promotion and saved
unchanged demoted the member again (found by a fresh tester), and a token page saved while the API revoked
the token could write `revoked_at` back empty.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.core.exceptions import ValidationError
from django.db import router, transaction

from accounts import services
from accounts.models import (
    ApiToken,
    Posting,
    Project,
    ProjectMembership,
    Role,
    Section,
    SectionMembership,
    User,
    Visibility,
)


class ShownStateForm(forms.BaseForm):
    """A change form that remembers what its page showed and refuses a save when the row moved since.

    Each field renders its value at load as a hidden input too (Django's `show_hidden_initial`, named
    ``initial-<field>``). On POST the form is built from the row as read again under its lock
    (`RowLockedOnPost`), so the field's initial is the row as it is now: any field whose shown value differs
    from it (or a single-valued field whose shown value is missing: the POST did not come from the page)
    makes the form invalid with one non-field error naming the fields. Mixed in before the ModelForm class.
    """

    stale_message = (
        "Changed since this page was loaded ({fields}): someone saved it meanwhile. Nothing was saved. "
        "Reload the page to see it as it is now, then make your change again."
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.show_hidden_initial = not field.disabled

    def changed_since_shown(self) -> list[str]:
        """The names of the fields whose value in the row (this form's initial) is not what the page showed;
        empty for an unbound form or one for a new row."""
        if not self.is_bound or getattr(self.instance, "pk", None) is None:
            return []
        moved = []
        for name, field in self.fields.items():
            if field.disabled:
                continue
            bound, hidden = self[name], field.hidden_widget()
            if not isinstance(hidden, forms.MultipleHiddenInput) and bound.html_initial_name not in self.data:
                moved.append(name)  # an empty list renders no hidden input; any other value renders one
                continue
            shown = hidden.value_from_datadict(self.data, self.files, bound.html_initial_name)
            try:
                if field.has_changed(bound.initial, shown):
                    moved.append(name)
            except ValidationError:
                moved.append(name)
        return moved

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        moved = self.changed_since_shown()
        if moved:
            labels = ", ".join(str(self.fields[name].label or name) for name in moved)
            self.add_error(None, self.stale_message.format(fields=labels))
        return cleaned


class NarrowingForm(ShownStateForm, forms.ModelForm):
    """A change form that refuses any change widening who may read (or post): `widening` maps a field to a
    predicate ``(before, after) -> bool`` that is True for a change the back office must not make."""

    widening: dict[str, Any] = {}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.instance.pk is None:
            return cleaned
        for field, widens in self.widening.items():
            if field in cleaned and widens(getattr(self.instance, field), cleaned[field], cleaned, self.instance):
                self.add_error(field, "The back office only takes access away; owners grant it through the API.")
        return cleaned


def _to_public(before, after, cleaned, instance) -> bool:
    return before != Visibility.PUBLIC and after == Visibility.PUBLIC


def _to_open(before, after, cleaned, instance) -> bool:
    return before != Posting.OPEN and after == Posting.OPEN


def _turned_on(before, after, cleaned, instance) -> bool:
    return not before and after


class ProjectForm(NarrowingForm):
    widening = {"visibility": _to_public}


class SectionForm(NarrowingForm):
    widening = {"visibility": _to_public, "posting": _to_open}


class MembershipForm(NarrowingForm):
    """One membership's change page (see the module docstring). `acting_user` is set per request."""

    widening = {"active": _turned_on, "can_post": _turned_on}
    acting_user: User | None = None
    parent_field = ""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        before = self.instance  # read under its parent's row lock (`MembershipChangeAdmin.get_object`)
        parent = getattr(before, self.parent_field)
        active, role = cleaned.get("active", before.active), cleaned.get("role", before.role)
        siblings = type(before).objects.filter(**{self.parent_field: parent})
        was_owner = before.active and before.role == Role.OWNER
        if (
            was_owner
            and not (active and role == Role.OWNER)
            and not services.keeps_an_owner(siblings, without=before.user)
        ):
            self.add_error(None, "This is the last active owner: a project or section always keeps one.")
        if role == Role.OWNER and before.role != Role.OWNER:
            if not (before.active and active):
                self.add_error("role", "Only an active member can be made owner.")
            elif self.acting_user is not None and before.user_id == self.acting_user.pk:
                self.add_error("role", "Staff cannot make themselves owner here.")
            elif services.keeps_an_owner(siblings):
                self.add_error("role", "It has an active owner, who can do this through the API.")
        return cleaned


class ProjectMembershipForm(MembershipForm):
    parent_field = "project"


class SectionMembershipForm(MembershipForm):
    parent_field = "section"


class RowLockedOnPost:
    """Admin pages that read the row under its lock on POST (inside the page's transaction) and save only
    the fields their form changed.

    `post_lock` are `select_for_update` arguments: the parents' pages take the lock the API's changes take
    (FOR UPDATE: writes hold parents in key-share mode to judge rights), users' and tokens' pages a no-key
    update lock (their rows' foreign keys stay usable meanwhile). The form's checks (`ShownStateForm`, the
    narrowing and last-owner rules) then judge the row as it is, and nobody changes it before the page
    commits. Saving with `update_fields` keeps every column the page does not edit as the row has it."""

    post_lock: dict[str, Any] = {"of": ("self",)}

    def lock_before(self, found) -> None:
        """Lock what the API's changes lock before this row (`found`, read without a lock); nothing here."""

    def get_object(self, request, object_id, from_field=None):
        found = super().get_object(request, object_id, from_field)
        in_transaction = transaction.get_connection(router.db_for_write(self.model)).in_atomic_block
        if found is None or request.method != "POST" or not in_transaction:
            return found
        self.lock_before(found)
        return self.get_queryset(request).select_for_update(**self.post_lock).filter(pk=found.pk).first()

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            return super().save_model(request, obj, form, change)
        columns = {field.name for field in obj._meta.concrete_fields}
        changed = [name for name in form.changed_data if name in columns]
        if changed:
            obj.save(update_fields=changed)


class MembershipAdminMixin:
    """Memberships are never added, deleted or moved here (see the module docstring)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None):
        return ["user", self.parent_field, "created_at"]


class MembershipInlineMixin(MembershipAdminMixin):
    """The memberships on a project's or section's page: listed only; each is changed on its own page, so
    every change is judged against the others as stored (two rows changed in one form could each leave the
    other as the last owner)."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class MembershipChangeAdmin(MembershipAdminMixin, RowLockedOnPost, admin.ModelAdmin):
    """A membership's own page: its form knows who is acting (staff never make themselves owner). A saved
    change has the parent's stores judge in-flight writes again (`services.parent_rights_changed`)."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"acting_user": request.user})

    def lock_before(self, found) -> None:
        """On a POST the parent's row is locked first, as the API's membership changes lock it, and the
        membership read after (`RowLockedOnPost`): the form's checks (never re-activate, the last-owner rule)
        and the save then work on the row as it is. Read before the lock, a removal through the API
        committing meanwhile was saved back over (a breaker's removed member was active again), and two
        owners could be demoted at once."""
        parent_model = self.model._meta.get_field(self.parent_field).related_model
        parent_model.objects.select_for_update().filter(pk=getattr(found, f"{self.parent_field}_id")).first()

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and form.changed_data:
            services.parent_rights_changed(getattr(obj, self.parent_field))


class ParentAdmin(RowLockedOnPost, admin.ModelAdmin):
    """Projects and sections: not created here, slug fixed (see the module docstring). Making one private
    or closing its posting has its stores judge in-flight writes again (`services.parent_rights_changed`)."""

    readonly_fields = ["slug", "created_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and {"visibility", "posting"} & set(form.changed_data):
            services.parent_rights_changed(obj)


class UserForm(ShownStateForm, UserChangeForm):
    """A user's change page: refused when the user changed since the page was loaded (`ShownStateForm`)."""


class TokenForm(ShownStateForm, forms.ModelForm):
    """A token's change page (its name only): refused when the name changed since the page was loaded."""

    class Meta:
        model = ApiToken
        fields = ["name"]


class NoKeyLockedOnPost(RowLockedOnPost):
    """Users and tokens: a no-key update lock, so rows that reference them can still be written meanwhile
    (a note's author check takes a key-share lock on its user)."""

    post_lock = {"of": ("self",), "no_key": True}


@admin.register(User)
class UserAdmin(NoKeyLockedOnPost, BaseUserAdmin):
    """Users: `last_login` and `date_joined` are facts, shown not edited. A stale page is refused and a
    saved one writes only what it changed (see the module docstring); a password set here reads and saves
    the user in one transaction under the same lock."""

    form = UserForm
    readonly_fields = ["last_login", "date_joined"]
    ordering = ["handle"]
    list_display = ["handle", "display_name", "is_active", "is_staff", "date_joined"]
    list_filter = ["is_active", "is_staff"]
    search_fields = ["handle", "display_name"]
    fieldsets = [
        (None, {"fields": ["handle", "display_name", "password"]}),
        ("Status", {"fields": ["is_active", "is_staff", "is_superuser", "groups", "user_permissions"]}),
        ("Dates", {"fields": ["last_login", "date_joined"]}),
    ]
    add_fieldsets = [(None, {"classes": ["wide"], "fields": ["handle", "password1", "password2"]})]

    def get_deleted_objects(self, objs, request):
        """Purge deleted stores first, for up to `STORE_PURGE_SECONDS`: the entries and summaries a user wrote
        in a deleted store (rows waiting for the purge, docs/decisions.md "Deleting a store of any size")
        would otherwise protect the user until `manage.py purge_stores` has run. Used by the delete page and
        the bulk delete action alike."""
        from stores.services import purge_deleted_stores  # stores builds on accounts, not the reverse

        purge_deleted_stores(seconds=settings.STORE_PURGE_SECONDS)
        return super().get_deleted_objects(objs, request)

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic(using=router.db_for_write(self.model)):
            return super().user_change_password(request, id, form_url)


@admin.register(ApiToken)
class ApiTokenAdmin(NoKeyLockedOnPost, admin.ModelAdmin):
    """Tokens: prefix, scopes, dates and a revoke action; the secret is never stored, so never shown.

    Only the name can be edited. The owner, scopes and expiry are read-only (SPEC §2: `is_staff` gives no
    extra API access): with `user` editable, staff moved their own token to another user and read that
    user's private stores through the API with it (found by a breaker)."""

    list_display = ["prefix", "user", "name", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_select_related = ["user"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "user__handle", "name"]
    fields = ["id", "user", "name", "prefix", "scopes", "expires_at", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = [name for name in fields if name != "name"]
    form = TokenForm
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False  # tokens are issued with `manage.py create_token`, which shows the secret once

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            services.revoke_token(token=token)
        self.message_user(request, f"Revoked {queryset.count()} token(s).", messages.SUCCESS)


class ProjectMembershipInline(MembershipInlineMixin, admin.TabularInline):
    model = ProjectMembership
    parent_field = "project"
    extra = 0
    show_change_link = True


@admin.register(Project)
class ProjectAdmin(ParentAdmin):
    """Projects are created through the API (any user); here staff rename them or make them private."""

    form = ProjectForm
    list_display = ["slug", "name", "visibility", "created_at"]
    list_filter = ["visibility"]
    search_fields = ["slug", "name", "id"]
    inlines = [ProjectMembershipInline]


class SectionMembershipInline(MembershipInlineMixin, admin.TabularInline):
    model = SectionMembership
    parent_field = "section"
    extra = 0
    show_change_link = True


@admin.register(Section)
class SectionAdmin(ParentAdmin):
    form = SectionForm
    list_display = ["slug", "name", "visibility", "posting", "created_at"]
    list_filter = ["visibility", "posting"]
    search_fields = ["slug", "name", "id"]
    inlines = [SectionMembershipInline]


@admin.register(ProjectMembership)
class ProjectMembershipAdmin(MembershipChangeAdmin):
    form = ProjectMembershipForm
    parent_field = "project"
    list_display = ["project", "user", "role", "active"]
    list_select_related = ["project", "user"]
    list_filter = ["role", "active"]
    search_fields = ["project__slug", "user__handle"]


@admin.register(SectionMembership)
class SectionMembershipAdmin(MembershipChangeAdmin):
    form = SectionMembershipForm
    parent_field = "section"
    list_display = ["section", "user", "role", "can_post", "active"]
    list_select_related = ["section", "user"]
    list_filter = ["role", "can_post", "active"]
    search_fields = ["section__slug", "user__handle"]
