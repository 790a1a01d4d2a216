"""The staff surface for stores and audit events (SPEC §6): metadata only, archive with a reason.

Entry redactions (SPEC §4) have their own read-only page, "Entry redactions": who redacted which seq of
which store, when and why, the entry's author, time and size, and which summaries went with it — never
any entry or summary text (the text is gone from the database by then anyway).

Entries, summaries, file memories and versions are deliberately not registered anywhere: staff status
never reveals content. Store pages are view-only; the one write is Archive, which asks for a reason and
goes through `backoffice.services.archive_store_with_reason` (the API's archive service plus an AuditEvent).
"""

from __future__ import annotations

import contextlib
import uuid

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from backoffice import services
from backoffice.models import REASON_MAX_CHARS, AuditEvent, RedactionEvent
from config.admin import AtomicActionsAdmin
from config.errors import DomainError
from stores.models import Scope, Store


class ArchivedFilter(admin.SimpleListFilter):
    title = "archived"
    parameter_name = "archived"

    def lookups(self, request, model_admin):
        return [("yes", "Archived"), ("no", "Not archived")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(archived_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(archived_at__isnull=True)
        return queryset


class VisibilityFilter(admin.SimpleListFilter):
    """Effective visibility: a user store's own, a project's or a section's for the others."""

    title = "visibility"
    parameter_name = "visibility"

    def lookups(self, request, model_admin):
        return [("public", "public"), ("private", "private")]

    def queryset(self, request, queryset):
        value = self.value()
        if value not in ("public", "private"):
            return queryset
        return queryset.filter(
            Q(scope=Scope.USER, visibility=value)
            | Q(scope=Scope.PROJECT, project__visibility=value)
            | Q(scope=Scope.BOARD, section__visibility=value)
        )


# Stores one archive may take: the batch is one transaction (all or nothing), which must end within the
# request's database deadline; 1,600 stores ran past it on every try, a 503 whose "try again" could never
# succeed (a tester; 600 took 4 s on a 2-core VM).
ARCHIVE_BATCH_MAX = 500
TOO_MANY_TO_ARCHIVE = (
    "{count} stores selected: archive at most " + f"{ARCHIVE_BATCH_MAX:,}" + " at a time (each batch is one "
    "transaction that must finish within the request's deadline). Nothing was archived."
)


class ArchiveForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        max_length=REASON_MAX_CHARS,
        strip=True,
        help_text="Why this store is archived. Recorded in the audit log; archiving cannot be undone.",
    )

    def clean_reason(self) -> str:
        """The service's rule (`services.clean_reason`), shown on the form rather than once per store."""
        try:
            return services.clean_reason(self.cleaned_data["reason"])
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from None


def can_archive(request) -> bool:
    """Staff with the change permission on stores (superusers always) may archive."""
    return request.user.is_active and request.user.is_staff and request.user.has_perm("stores.change_store")


@admin.register(Store)
class StoreAdmin(AtomicActionsAdmin, admin.ModelAdmin):
    list_display = [
        "name",
        "scope",
        "subject",
        "effective_visibility_display",
        "entries",
        "files",
        "created_at",
        "archived_at",
    ]
    list_select_related = ["owner", "project", "section"]
    list_filter = ["scope", VisibilityFilter, ArchivedFilter]
    search_fields = ["name", "owner__handle", "project__slug", "project__name", "section__slug", "section__name"]
    ordering = ["-created_at"]
    actions = ["archive_selected"]
    fields = [
        "id",
        "scope",
        "subject",
        "canonical",
        "name",
        "description",
        "effective_visibility_display",
        "entry_count",
        "summary_count",
        "generation",
        "memory_count",
        "metadata",
        "created_at",
        "updated_at",
        "archived_at",
        "importing",
    ]
    readonly_fields = fields
    change_form_template = "admin/stores/store/change_form.html"
    change_list_template = "admin/stores/store/change_list.html"

    def get_queryset(self, request):
        """Stores that exist: a deleted store (rows still being purged) is gone here as everywhere."""
        return super().get_queryset(request).filter(deleted_at__isnull=True)

    @admin.display(description="subject")
    def subject(self, store: Store) -> str:
        if store.scope == Scope.PROJECT:
            return f"project {store.project.slug}"
        if store.scope == Scope.BOARD:
            return f"board {store.section.slug}"
        return f"@{store.owner.handle}"

    @admin.display(description="entries", ordering="entry_count")
    def entries(self, store: Store) -> int:
        return store.entry_count

    @admin.display(description="files", ordering="memory_count")
    def files(self, store: Store) -> int:
        """Current file memories (`memory_count`): called files here as in the README."""
        return store.memory_count

    @admin.display(description="visibility")
    def effective_visibility_display(self, store: Store) -> str:
        return store.effective_visibility

    def get_search_results(self, request, queryset, search_term):
        results, distinct = super().get_search_results(request, queryset, search_term)
        with contextlib.suppress(ValueError):
            results |= queryset.filter(pk=uuid.UUID(search_term.strip()))
        return results, distinct

    # View-only: staff change nothing here except through Archive.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return (
            request.user.is_active
            and request.user.is_staff
            and (request.user.has_perm("stores.view_store") or request.user.has_perm("stores.change_store"))
        )

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not can_archive(request):
            actions.pop("archive_selected", None)
        return actions

    @admin.action(description="Archive selected stores (asks for a reason)")
    def archive_selected(self, request, queryset):
        """The reason form for the selection, answered here (Django's intermediate page): redirecting with
        the ids in the URL made a request line over the HTTP layer's 8 KiB past ~220 stores, a 414 (a
        tester); the form posts them in its body."""
        stores = list(queryset.filter(deleted_at__isnull=True).select_related("owner", "project", "section"))
        if not stores:
            self.message_user(request, "No stores were selected.", messages.WARNING)
            return None
        if len(stores) > ARCHIVE_BATCH_MAX:
            self.message_user(request, TOO_MANY_TO_ARCHIVE.format(count=len(stores)), messages.ERROR)
            return None
        return self._archive_page(request, stores, ArchiveForm())

    def get_urls(self):
        own = [
            path("archive/", self.admin_site.admin_view(self.archive_view), name="stores_store_archive"),
            path(
                "<uuid:object_id>/archive/",
                self.admin_site.admin_view(self.archive_view),
                name="stores_store_archive_one",
            ),
        ]
        return own + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "can_archive": can_archive(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def archive_view(self, request, object_id=None):
        """GET: the reason form for the chosen stores; POST: archive each and report the outcome."""
        if not can_archive(request):
            raise PermissionDenied
        raw_ids = [str(object_id)] if object_id else request.POST.get("ids", request.GET.get("ids", "")).split(",")
        ids = []
        for raw in raw_ids:
            try:
                ids.append(uuid.UUID(raw.strip()))
            except ValueError:
                continue
        stores = list(
            Store.objects.filter(pk__in=ids, deleted_at__isnull=True).select_related("owner", "project", "section")
        )
        changelist = reverse("admin:stores_store_changelist")
        if not stores:
            self.message_user(request, "No stores were selected.", messages.WARNING)
            return HttpResponseRedirect(changelist)
        if len(stores) > ARCHIVE_BATCH_MAX:
            self.message_user(request, TOO_MANY_TO_ARCHIVE.format(count=len(stores)), messages.ERROR)
            return HttpResponseRedirect(changelist)
        form = ArchiveForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            archived, already = [], []
            with transaction.atomic():  # all or nothing: a fault's 503 page says nothing was saved
                for store in stores:
                    try:
                        _, event = services.archive_store_with_reason(
                            store=store,
                            actor=request.user,
                            reason=form.cleaned_data["reason"],
                            request_id=getattr(request, "request_id", ""),
                        )
                    except DomainError as exc:
                        self.message_user(request, f"{store.name}: {exc.message}", messages.ERROR)
                        continue
                    (archived if event else already).append(store.name)
            if archived:
                self.message_user(request, f"Archived: {', '.join(archived)}.", messages.SUCCESS)
            if already:
                self.message_user(
                    request, f"Already archived (left unchanged): {', '.join(already)}.", messages.WARNING
                )
            return HttpResponseRedirect(changelist)
        return self._archive_page(request, stores, form)

    def _archive_page(self, request, stores: list, form: ArchiveForm) -> TemplateResponse:
        """The reason form for `stores`; it posts to the archive view, with the ids in its body."""
        context = {
            **self.admin_site.each_context(request),
            "title": "Archive stores",
            "opts": self.model._meta,
            "stores": stores,
            "ids": ",".join(str(s.pk) for s in stores),
            "form": form,
            "subject": self.subject,
        }
        return TemplateResponse(request, "admin/stores/store/archive.html", context)


@admin.register(AuditEvent)
class AuditEventAdmin(AtomicActionsAdmin, admin.ModelAdmin):
    """Read-only for everyone, superusers included: no add, change or delete, no bulk actions."""

    list_display = ["created_at", "actor_handle", "action", "store_link", "store_name", "seq", "reason", "request_id"]
    list_filter = ["action"]
    search_fields = ["store_name", "actor_handle", "reason", "request_id"]
    ordering = ["-created_at"]
    fields = [
        "id",
        "created_at",
        "actor_handle",
        "action",
        "store_id",
        "store_name",
        "seq",
        "details",
        "reason",
        "request_id",
    ]
    readonly_fields = fields
    actions = None

    @admin.display(description="store id")
    def store_link(self, event: AuditEvent) -> str:
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:stores_store_change", args=[event.store_id]), event.store_id
        )

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff


@admin.register(RedactionEvent)
class RedactionEventAdmin(AuditEventAdmin):
    """Entry redactions: metadata of each `redact_entry` event, read-only like every audit event."""

    list_display = [
        "created_at",
        "actor_handle",
        "store_link",
        "store_name",
        "seq",
        "entry_author",
        "entry_size",
        "summaries",
        "reason",
    ]
    list_filter = []
    search_fields = ["store_name", "actor_handle", "reason", "request_id"]
    fields = [
        "id",
        "created_at",
        "actor_handle",
        "store_id",
        "store_name",
        "seq",
        "entry_author",
        "entry_created_at",
        "entry_size",
        "invalidated_ranges",
        "summaries",
        "generation_after",
        "reason",
        "request_id",
    ]
    readonly_fields = fields

    @admin.display(description="entry author")
    def entry_author(self, event: AuditEvent) -> str:
        return event.details.get("author", "")

    @admin.display(description="entry written at")
    def entry_created_at(self, event: AuditEvent) -> str:
        return event.details.get("created_at", "")

    @admin.display(description="entry size (bytes)")
    def entry_size(self, event: AuditEvent):
        return event.details.get("size_bytes")

    @admin.display(description="summaries invalidated")
    def invalidated_ranges(self, event: AuditEvent) -> str:
        return ", ".join(event.details.get("invalidated", [])) or "none"

    @admin.display(description="summary texts nulled")
    def summaries(self, event: AuditEvent):
        return event.details.get("summaries_redacted")

    @admin.display(description="generation after")
    def generation_after(self, event: AuditEvent):
        return event.details.get("generation")
