"""Staff management of accounts, tokens, projects, sections and memberships (metadata only)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from accounts import services
from accounts.models import ApiToken, Project, ProjectMembership, Section, SectionMembership, User


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


class ProjectMembershipInline(admin.TabularInline):
    model = ProjectMembership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "visibility", "created_at"]
    list_filter = ["visibility"]
    search_fields = ["slug", "name", "id"]
    inlines = [ProjectMembershipInline]


class SectionMembershipInline(admin.TabularInline):
    model = SectionMembership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Section)
class SectionAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "visibility", "posting", "created_at"]
    list_filter = ["visibility", "posting"]
    search_fields = ["slug", "name", "id"]
    inlines = [SectionMembershipInline]


@admin.register(ProjectMembership)
class ProjectMembershipAdmin(admin.ModelAdmin):
    list_display = ["project", "user", "role", "active"]
    list_select_related = ["project", "user"]
    list_filter = ["role", "active"]
    search_fields = ["project__slug", "user__handle"]
    autocomplete_fields = ["user", "project"]


@admin.register(SectionMembership)
class SectionMembershipAdmin(admin.ModelAdmin):
    list_display = ["section", "user", "role", "can_post", "active"]
    list_select_related = ["section", "user"]
    list_filter = ["role", "can_post", "active"]
    search_fields = ["section__slug", "user__handle"]
    autocomplete_fields = ["user", "section"]
