"""The staff surface for agent access (SPEC §6): environments (keys by prefix only), sessions and work items
as metadata. Nothing here shows a secret, a credential or a store's content; the writes are "revoke
keys" and "archive session", through the same services as the API."""

from __future__ import annotations

from django.contrib import admin, messages

from config.admin import AtomicActionsAdmin, NoSecretLookups
from config.errors import DomainError
from sessions.models import Attachment, Environment, EnvironmentKey, Session, Work, WorkClaim
from sessions.services import environments as environment_services
from sessions.services import sessions as session_services


class ReadOnlyAdmin(AtomicActionsAdmin, admin.ModelAdmin):
    """Metadata pages: no add, change or delete from the admin (its actions call services instead)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class EnvironmentKeyInline(ReadOnlyInline):
    model = EnvironmentKey
    fields = ["prefix", "name", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    ordering = ["-created_at"]


@admin.register(Environment)
class EnvironmentAdmin(ReadOnlyAdmin):
    list_display = ["name", "owner", "created_at", "archived_at"]
    list_select_related = ["owner"]
    list_filter = [("archived_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "owner__handle", "id"]
    ordering = ["-created_at"]
    fields = ["id", "name", "owner", "description", "scope", "config", "metadata", "created_at", "updated_at"]
    fields += ["archived_at"]
    readonly_fields = fields
    inlines = [EnvironmentKeyInline]


@admin.register(EnvironmentKey)
class EnvironmentKeyAdmin(NoSecretLookups, ReadOnlyAdmin):
    """Keys by prefix: the secret is never stored, so never shown. Mint keys with
    `manage.py create_environment_key` or the API, which show the secret once."""

    list_display = ["prefix", "name", "environment", "created_at", "last_used_at", "revoked_at"]
    list_select_related = ["environment"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "environment__name", "environment__id"]
    ordering = ["-created_at"]
    fields = ["id", "prefix", "name", "environment", "created_by", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_revoke_permission(self, request) -> bool:
        return request.user.is_active and request.user.has_perm("agent_sessions.change_environmentkey")

    @admin.action(description="Revoke selected keys", permissions=["revoke"])
    def revoke(self, request, queryset):
        for key in queryset:
            environment_services.revoke_environment_key(key=key)
        self.message_user(request, f"Revoked {len(queryset)} key(s).", messages.SUCCESS)


class AttachmentInline(ReadOnlyInline):
    model = Attachment
    fields = ["position", "store_id", "name", "access", "mount_path", "instructions"]
    readonly_fields = fields
    ordering = ["position"]


class WorkInline(ReadOnlyInline):
    model = Work
    fields = ["id", "state", "created_at", "acknowledged_at", "last_heartbeat_at", "lease_expires_at", "stopped_at"]
    readonly_fields = fields


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    """Session metadata with its attachments and work items; "archive" stops its work for good."""

    list_display = ["id", "title", "owner", "environment", "status_display", "created_at", "archived_at"]
    list_select_related = ["owner", "environment"]
    list_filter = [("archived_at", admin.EmptyFieldListFilter)]
    search_fields = ["id", "title", "owner__handle", "environment__name"]
    ordering = ["-created_at"]
    fields = ["id", "title", "owner", "environment", "status_display", "agent", "metadata", "created_at"]
    fields += ["updated_at", "archived_at"]
    readonly_fields = fields
    inlines = [AttachmentInline, WorkInline]
    actions = ["archive"]

    def get_queryset(self, request):
        return super().get_queryset(request).with_status()

    @admin.display(description="status")
    def status_display(self, session: Session) -> str:
        return session.status

    def has_archive_permission(self, request) -> bool:
        return request.user.is_active and request.user.has_perm("agent_sessions.change_session")

    @admin.action(description="Archive selected sessions (stops their work for good)", permissions=["archive"])
    def archive(self, request, queryset):
        archived, already = [], []
        for session in queryset:
            try:
                _, changed = session_services.archive_session(session=session)
            except DomainError as exc:
                self.message_user(request, f"{session.pk}: {exc.message}", messages.ERROR)
                continue
            (archived if changed else already).append(str(session.pk))
        if archived:
            self.message_user(request, f"Archived: {', '.join(archived)}.", messages.SUCCESS)
        if already:
            self.message_user(request, f"Already archived: {', '.join(already)}.", messages.WARNING)


class WorkClaimInline(ReadOnlyInline):
    model = WorkClaim
    fields = ["prefix", "worker_id", "created_at", "ended_at"]
    readonly_fields = fields
    ordering = ["-created_at"]


@admin.register(Work)
class WorkAdmin(ReadOnlyAdmin):
    """Work items and their claims (credential prefixes only)."""

    list_display = ["id", "state", "environment", "session", "created_at", "last_heartbeat_at", "lease_expires_at"]
    list_select_related = ["environment", "session"]
    list_filter = ["state"]
    search_fields = ["id", "session__id", "environment__name", "worker_id"]
    ordering = ["-created_at"]
    fields = ["id", "state", "environment", "session", "worker_id", "metadata", "created_at", "queued_at"]
    fields += ["polled_at", "acknowledged_at", "started_at", "last_heartbeat_at", "lease_expires_at"]
    fields += ["lease_ttl_seconds", "stop_requested_at", "stopped_at"]
    readonly_fields = fields
    inlines = [WorkClaimInline]
