"""The legacy archives in the back office: read-only, for migration audits (SPEC §6, §7)."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from config.admin import AtomicActionsAdmin
from legacy.models import ArchivedAssessment, ArchivedRecord, ArchivedRevision


class ReadOnlyArchiveAdmin(AtomicActionsAdmin, admin.ModelAdmin):
    """Staff may list and view archived rows; nobody may add, change or delete them here."""

    list_display = ["source_id", "archived_at"]
    search_fields = ["=source_id"]
    ordering = ["source_id"]
    fields = ["source_id", "archived_at", "pretty_data"]
    readonly_fields = fields
    show_full_result_count = False  # archives can hold millions of rows; skip the COUNT(*)

    @admin.display(description="archived columns")
    def pretty_data(self, obj) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.data, indent=2, ensure_ascii=False, sort_keys=True))

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


admin.site.register(ArchivedRecord, ReadOnlyArchiveAdmin)
admin.site.register(ArchivedAssessment, ReadOnlyArchiveAdmin)
admin.site.register(ArchivedRevision, ReadOnlyArchiveAdmin)
