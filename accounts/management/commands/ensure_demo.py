"""`manage.py ensure_demo`: make sure the demo user exists and print a fresh demo token."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from accounts import services


class Command(BaseCommand):
    help = (
        "Ensure the demo user (handle 'demo' by default), revoke its earlier demo tokens and print a new one, "
        "shown once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--handle", default="demo")

    def handle(self, *args, **options):
        user, created = services.ensure_user(handle=options["handle"], display_name="Demo agent")
        # One live demo token at a time: each start prints a fresh secret and retires the previous one.
        for old in user.api_tokens.filter(name="demo", revoked_at__isnull=True):
            services.revoke_token(token=old)
        issued = services.issue_token(user=user, name="demo")
        self.stdout.write(f"Demo user: {user.handle}{' (created)' if created else ''}")
        self.stdout.write(f"Demo token (shown once): {issued.secret}")
