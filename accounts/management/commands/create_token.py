"""`manage.py create_token --handle H [--scopes agent:read,memories:write] [--expires-in-days DAYS] [--create-user]`.

Handles ignore case: the token goes to the user whose handle matches in any case, and the command says so on
stderr when the spelling differs (a tester's `--handle BOB --create-user` silently got a token for `bob`).
`--expires-in` is the older spelling of `--expires-in-days` (rog's flag).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts import services
from accounts.models import User
from config.text import quoted


class Command(BaseCommand):
    help = "Issue an API token for a user and print its secret once (only its SHA-256 is stored)."

    def add_arguments(self, parser):
        parser.add_argument("--handle", required=True, help="The user's handle (case-insensitive).")
        parser.add_argument(
            "--scopes",
            action="append",
            default=None,
            help="Comma-separated scopes, or the option repeated (each adds; default: agent:read,memories:write).",
        )
        parser.add_argument(
            "--expires-in-days",
            "--expires-in",
            dest="expires_in",
            type=int,
            default=None,
            metavar="DAYS",
            help="Expire after DAYS days.",
        )
        parser.add_argument("--name", default="", help="A label for the token.")
        parser.add_argument(
            "--create-user",
            action="store_true",
            help="Create the user if no user has the handle (in any case).",
        )

    def handle(self, *args, **options):
        # One transaction: a token refused (bad scopes, expiry) leaves no user made for it (a breaker).
        with transaction.atomic():
            self._issue(options)

    def _issue(self, options) -> None:
        handle = options["handle"]
        user = User.objects.filter(handle__iexact=handle).first()
        if user is None:
            if not options["create_user"]:
                raise CommandError(f"No user with handle {quoted(handle, 80)} (use --create-user to create one).")
            try:
                user, _ = services.ensure_user(handle=handle)
            except Exception as exc:  # ValidationError from full_clean: report, don't trace
                raise CommandError(f"Cannot create user {quoted(handle, 80)}: {exc}") from None
        elif user.handle != handle:
            self.stderr.write(f"Handles ignore case: this token is for the existing user {quoted(user.handle)}.")
        given = options["scopes"] or [",".join(services.ALL_SCOPES)]
        scopes = list(dict.fromkeys(s.strip() for value in given for s in value.split(",") if s.strip()))
        try:
            issued = services.issue_token(
                user=user, scopes=scopes, name=options["name"], expires_in_days=options["expires_in"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(issued.secret)
        if options["verbosity"] > 1:
            self.stderr.write(f"token id {issued.token.id} for {user.handle}, scopes {issued.token.scopes}")
