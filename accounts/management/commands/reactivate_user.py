"""`manage.py reactivate_user HANDLE`: give a deactivated user back their account (an operator's act).

The back office only deactivates: re-activating gives back every right the user's memberships hold, and
done on its user page it let staff make any member an owner (deactivate the owner, repair the ownership,
re-activate; docs/access.md "The back office and the API at once").
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from accounts import services
from config.errors import DomainError


class Command(BaseCommand):
    help = "Re-activate a deactivated user (the back office only deactivates). Their memberships count again."

    def add_arguments(self, parser):
        parser.add_argument("handle", help="The user's handle (case-insensitive).")

    def handle(self, *args, **options):
        try:
            user, changed = services.reactivate_user(handle=options["handle"])
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"{user.handle}: {'re-activated' if changed else 'already active'}")
