"""`manage.py create_environment_key --environment ENV_ID [--name NAME]` (SPEC §5)."""

from __future__ import annotations

import uuid

from django.core.management.base import BaseCommand, CommandError

from config.errors import DomainError
from config.text import quoted
from sessions.models import Environment
from sessions.services import environments as services


class Command(BaseCommand):
    help = (
        "Mint a key for a self-hosted environment and print its secret once (only its SHA-256 is stored). "
        "The key authenticates that environment's work endpoints (poll, ack, heartbeat, stop, list, stats)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--environment", required=True, metavar="ENV_ID", help="The environment's id.")
        parser.add_argument("--name", default="", help="A label for the key (at most 100 characters).")

    def handle(self, *args, **options):
        try:
            environment = Environment.objects.select_related("owner").get(pk=uuid.UUID(options["environment"]))
        except (ValueError, Environment.DoesNotExist):
            raise CommandError(f"No environment with id {quoted(options['environment'], 80)}.") from None
        try:
            issued = services.issue_environment_key(environment=environment, name=options["name"])
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(issued.secret)
        if options["verbosity"] > 1:
            self.stderr.write(
                f"key {issued.key.id} ({issued.key.prefix}…) for environment {quoted(environment.name)} "
                f"owned by {environment.owner.handle}"
            )
