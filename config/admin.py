"""What every back-office model page shares (SPEC §6): list actions that are all or nothing.

Django runs a list action (`response_action`) outside any transaction and builds its queryset from the
posted ids without checking them. Found by a breaker: a bulk revoke that met a lock timeout after its first
token showed "nothing was saved" while that token stayed revoked, and a malformed id (`notauuid`, NUL, bad
UTF-8) in `_selected_action` was a 500 on every page keyed by a UUID.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db import router, transaction
from django.http import HttpResponseRedirect


class AtomicActionsAdmin:
    """A `ModelAdmin` mixin (put it before `admin.ModelAdmin`): the selected ids must each spell a key of
    the model (else an error message and nothing is done), and the action runs in one transaction — a
    fault rolls the whole action back, so the back office's 503 page ("nothing was saved") tells the truth.
    """

    def response_action(self, request, queryset):
        key = self.model._meta.pk
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                key.to_python(value)
        except ValidationError:
            self.message_user(
                request, "The selection names an item that does not exist; nothing was done.", messages.ERROR
            )
            return HttpResponseRedirect(request.get_full_path())
        with transaction.atomic(using=router.db_for_write(self.model)):
            return super().response_action(request, queryset)
