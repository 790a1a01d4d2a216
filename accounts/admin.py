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
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.core.exceptions import ValidationError

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


class NarrowingForm(forms.ModelForm):
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


class MembershipChangeAdmin(MembershipAdminMixin, admin.ModelAdmin):
    """A membership's own page: its form knows who is acting (staff never make themselves owner). A saved
    change has the parent's stores judge in-flight writes again (`services.parent_rights_changed`)."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"acting_user": request.user})

    def get_object(self, request, object_id, from_field=None):
        """On a POST (inside the page's transaction), the parent's row is locked first, as the API's changes
        lock it, and the membership read after: the form's checks (never re-activate, the last-owner rule)
        and the save then work on the row as it is, which no one can change before this page commits. Read
        before the lock, a removal through the API committing meanwhile was saved back over (a breaker's
        removed member was active again), and two owners could be demoted at once."""
        found = super().get_object(request, object_id, from_field)
        if found is None or request.method != "POST":
            return found
        parent = getattr(found, self.parent_field)
        type(parent).objects.select_for_update().filter(pk=parent.pk).first()
        return super().get_object(request, object_id, from_field)

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and form.changed_data:
            services.parent_rights_changed(getattr(obj, self.parent_field))


class ParentAdmin(admin.ModelAdmin):
    """Projects and sections: not created here, slug fixed (see the module docstring). Making one private
    or closing its posting has its stores judge in-flight writes again (`services.parent_rights_changed`)."""

    readonly_fields = ["slug", "created_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def get_object(self, request, object_id, from_field=None):
        """On a POST (inside the page's transaction), read the row under its lock, as the API's changes
        lock it: the narrowing checks and the save work on the row as it is. Read before the lock, an
        owner's change through the API committing meanwhile was saved back over (a project made private was
        public again, its rights version rolled back)."""
        if request.method != "POST":
            return super().get_object(request, object_id, from_field)
        queryset = self.get_queryset(request).select_for_update(of=("self",))
        field = self.model._meta.pk if from_field is None else self.model._meta.get_field(from_field)
        try:
            return queryset.get(**{field.name: field.to_python(object_id)})
        except (self.model.DoesNotExist, ValidationError, ValueError):
            return None

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and {"visibility", "posting"} & set(form.changed_data):
            services.parent_rights_changed(obj)


@admin.register(User)
class UserAdmin(BaseUserAdmin):
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


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
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
