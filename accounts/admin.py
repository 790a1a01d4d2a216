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

import psycopg
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import IntegrityError, router, transaction
from django.db.models import ProtectedError, RestrictedError
from django.http import HttpResponseRedirect
from django.urls import reverse

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
from config.admin import AtomicActionsAdmin, NoSecretLookups
from config.constraints import violates
from config.errors import DomainError
from stores import validation as store_validation


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
            shown = hidden.value_from_datadict(self.data, self.files, bound.html_initial_name)
            # What the page would show of the row now, exactly as the hidden input renders it: the strings
            # are compared, not cleaned values (a field's cleaning strips a name's outer spaces, and a name
            # stored with them then never matched: its page could not be saved at all; a breaker).
            now = hidden.format_value(field.prepare_value(bound.initial))
            if isinstance(hidden, forms.MultipleHiddenInput):  # an empty list renders no hidden input
                if sorted(str(value) for value in now or []) != sorted(shown or []):  # keys render as str()
                    moved.append(name)
            elif shown is None or shown != ("" if now is None else now):  # missing: not from the page
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
    widening_message = "The back office only takes access away; owners grant it through the API."
    # Names follow the API's rule (1–255 characters, no control characters): the back office stored names the
    # API refuses, and a project store created afterwards took the project's name with its escapes (a breaker).
    name_rule = staticmethod(store_validation.clean_name)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.instance.pk is None:
            return cleaned
        for field, widens in self.widening.items():
            if field in cleaned and widens(getattr(self.instance, field), cleaned[field], cleaned, self.instance):
                self.add_error(field, self.widening_message)
        return cleaned

    def clean_name(self) -> str:
        try:
            return self.name_rule(self.cleaned_data["name"])
        except DomainError as exc:
            raise ValidationError(exc.message) from None


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


class MembershipChangeAdmin(MembershipAdminMixin, AtomicActionsAdmin, RowLockedOnPost, admin.ModelAdmin):
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


class ParentAdmin(AtomicActionsAdmin, RowLockedOnPost, admin.ModelAdmin):
    """Projects and sections: not created here, slug fixed (see the module docstring). Making one private
    or closing its posting has its stores judge in-flight writes again (`services.parent_rights_changed`)."""

    readonly_fields = ["slug", "former_slugs", "created_at"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description="former slugs")
    def former_slugs(self, obj) -> str:
        """The slugs a rename retired (docs/access.md "Renamed slugs"): they still name this parent and nobody
        else can take them — what staff need to know when a create is refused `slug_taken`."""
        return ", ".join(sorted(obj.retired_slugs.values_list("slug", flat=True))) or "—"

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and {"visibility", "posting"} & set(form.changed_data):
            services.parent_rights_changed(obj)


class UserForm(NarrowingForm, UserChangeForm):
    """A user's change page: refused when the user changed since the page was loaded (`ShownStateForm`), and
    for a re-activation — it gives back every right the user's memberships hold, and with the owners' repair
    (`MembershipForm`) it let staff make any member an owner: deactivate the owner, repair, re-activate (a
    breaker). Operators re-activate with `manage.py reactivate_user HANDLE`."""

    widening = {"is_active": _turned_on}
    widening_message = (
        "Re-activating a user gives back every right their memberships hold: an operator does it with "
        "`manage.py reactivate_user HANDLE`."
    )

    def clean_display_name(self) -> str:
        """A display name, when given, follows the name rule (`stores.validation.clean_name`): the back office
        stored bidi overrides, bell characters and line breaks that every user list then showed (a tester)."""
        value = self.cleaned_data.get("display_name", "")
        if not value:
            return value
        try:
            return store_validation.clean_name(value, field="display_name")
        except DomainError as exc:
            raise ValidationError(exc.message) from None


class TokenForm(NarrowingForm):
    """A token's change page (its name only, by the API's token-name rule): refused when the name changed
    since the page was loaded."""

    name_rule = staticmethod(services.clean_token_name)

    class Meta:
        model = ApiToken
        fields = ["name"]


class NoKeyLockedOnPost(RowLockedOnPost):
    """Users and tokens: a no-key update lock, so rows that reference them can still be written meanwhile
    (a note's author check takes a key-share lock on its user)."""

    post_lock = {"of": ("self",), "no_key": True}


@admin.register(User)
class UserAdmin(AtomicActionsAdmin, NoKeyLockedOnPost, BaseUserAdmin):
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

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except (IntegrityError, ProtectedError, RestrictedError) as exc:
            return self._wrote_meanwhile(request, exc, reverse("admin:accounts_user_change", args=[object_id]))

    def response_action(self, request, queryset):
        try:
            return super().response_action(request, queryset)
        except (IntegrityError, ProtectedError, RestrictedError) as exc:
            return self._wrote_meanwhile(request, exc, request.get_full_path())

    def _wrote_meanwhile(self, request, exc: Exception, then: str):
        """A user who wrote (a note, say) while their deletion ran: the rows that protect them were collected
        before the write committed, and the deletion met it — Django's collector when it deleted
        (ProtectedError), or the foreign key when it committed (IntegrityError); everything rolled back. An
        error message, not a 500 (a breaker deleted users as they posted)."""
        collected = isinstance(exc, (ProtectedError, RestrictedError))  # subclasses of IntegrityError
        if not collected and not isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
            raise exc
        self.message_user(
            request,
            "Not deleted: the user wrote something while the deletion ran, and what they write protects them. "
            "Nothing was deleted; deactivate them instead.",
            messages.ERROR,
        )
        return HttpResponseRedirect(then)

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic(using=router.db_for_write(self.model)):
            return super().user_change_password(request, id, form_url)

    def get_readonly_fields(self, request, obj=None):
        """Only superusers grant staff or superuser status, groups and permissions: a staff member allowed to
        change users could otherwise make themselves superuser, or set the password of a user who kept a
        group's permissions and make them staff, then sign in as them (two breakers).

        A handle never changes once the user exists, for anyone: it is how shares, memberships, `--user`
        and import files address the user. A tester renamed a user to free their handle, took it for
        themselves and received the private store its owner then shared "with bob"."""
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            fields.append("handle")
            if not request.user.is_superuser:
                fields += ["is_staff", "is_superuser", "groups", "user_permissions"]
        return fields

    def has_change_permission(self, request, obj=None) -> bool:
        """A staff member who is not a superuser changes only users who are not staff, and themselves: one
        allowed to change users set a superuser's password and signed in as them (a breaker). The password
        page asks the same (Django's `user_change_password`)."""
        if not super().has_change_permission(request, obj):
            return False
        if obj is None or request.user.is_superuser or obj.pk == request.user.pk:
            return True
        return not (obj.is_staff or obj.is_superuser)

    def has_delete_permission(self, request, obj=None) -> bool:
        """As `has_change_permission`: staff and superusers are deleted by superusers only."""
        if not super().has_delete_permission(request, obj):
            return False
        return obj is None or request.user.is_superuser or not (obj.is_staff or obj.is_superuser)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """A handle taken by a parallel save (the case-insensitive unique constraint decides: the form's check
        ran before either saved) is an error message and nothing saved, not a 500 (a breaker)."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except IntegrityError as exc:
            if not violates(exc, "user_handle_ci_unique"):
                raise
            self.message_user(
                request,
                "That handle was just taken by another user; nothing was saved. Choose another.",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())


admin.site.unregister(Group)


@admin.register(Group)
class SuperuserGroupAdmin(GroupAdmin):
    """Groups carry permissions: only superusers change them — a staff member allowed to change groups gave
    their own group every permission (a breaker); they may still view them."""

    def has_add_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser


@admin.register(ApiToken)
class ApiTokenAdmin(NoSecretLookups, AtomicActionsAdmin, NoKeyLockedOnPost, admin.ModelAdmin):
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

    def has_revoke_permission(self, request) -> bool:
        """Revoking changes a token: staff who may only view tokens revoked every one (found by a breaker)."""
        return request.user.is_active and request.user.has_perm("accounts.change_apitoken")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request, queryset):
        """Revoke each selected token (in one transaction: `AtomicActionsAdmin`); counts only those that were
        live, an already-revoked token keeps its first `revoked_at`."""
        live = [token for token in queryset if token.revoked_at is None]
        for token in live:
            services.revoke_token(token=token)
        already = len(queryset) - len(live)
        note = f" ({already} already revoked, left as they were)" if already else ""
        self.message_user(request, f"Revoked {len(live)} token(s){note}.", messages.SUCCESS)


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
    search_fields = ["slug", "retired_slugs__slug", "name", "id"]
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
    search_fields = ["slug", "retired_slugs__slug", "name", "id"]
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
