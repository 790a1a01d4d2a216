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
from django.db.models.constants import LOOKUP_SEP
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


class NoSecretLookups:
    """A `ModelAdmin` mixin (put it first) for models holding a credential's digest (API tokens, environment
    keys): no list filter on `digest`. Django takes any lookup on a local field from the URL, and
    ``?digest__startswith=a`` let staff who may view tokens read each SHA-256 out a character at a time (a
    tester) — as Django's own user admin refuses ``password__…``. Refused lookups are Django's 400 page."""

    secret_fields = frozenset({"digest"})

    def lookup_allowed(self, lookup, value, request=None):
        if lookup.split(LOOKUP_SEP, 1)[0] in self.secret_fields:
            return False
        return super().lookup_allowed(lookup, value, request)


def view_on_site(request, content_type_id: int, object_id: str):
    """The admin's "view on site" redirect (`/backoffice/r/<content type>/<id>/`, Django's
    `contenttypes.views.shortcut`), with an id its model's key cannot hold a 404 like any unknown one:
    Django's view let the key field's ValidationError through, a 500 on every model keyed by a UUID (a
    tester). Mounted before the admin's own route (config/urls.py), behind the same staff login."""
    from django.contrib.contenttypes.views import shortcut
    from django.http import Http404

    try:
        return shortcut(request, content_type_id, object_id)
    except (ValidationError, ValueError):
        raise Http404("No such object.") from None
