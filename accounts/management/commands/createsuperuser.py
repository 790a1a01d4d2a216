"""`manage.py createsuperuser --handle H`: Django's command, with handles unique regardless of case.

Django cannot see our functional unique constraint (`Lower(handle)`), so its own command would ask for the
password twice and then fail with a raw IntegrityError. Here a taken handle fails at once, naming it.
Non-interactive use: ``DJANGO_SUPERUSER_PASSWORD=… manage.py createsuperuser --handle H --noinput``
(without the variable the account gets no usable password; `manage.py changepassword H` sets one).
"""

from __future__ import annotations

from django.contrib.auth.management.commands import createsuperuser
from django.core.management.base import CommandError

from accounts.models import User
from config.text import quoted


class Command(createsuperuser.Command):
    help = (
        "Create a staff superuser for the back office. --handle is unique regardless of case; with --noinput "
        "the password comes from DJANGO_SUPERUSER_PASSWORD (none: an unusable password)."
    )

    # Django checks uniqueness only for a `unique=True` field; ours is a case-insensitive constraint, and
    # `get_by_natural_key` matches case-insensitively, so Django's own check is the right one to enable.
    username_is_unique = True

    def handle(self, *args, **options):
        handle = options.get(User.USERNAME_FIELD)
        if handle and User.objects.filter(handle__iexact=handle).exists():
            existing = User.objects.get(handle__iexact=handle)
            raise CommandError(
                f"A user with handle {quoted(existing.handle)} already exists (handles ignore case), so no password "
                "was asked for. Choose another --handle, or give that user staff rights in the back office."
            )
        return super().handle(*args, **options)
