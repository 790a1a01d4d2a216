"""`manage.py purge_stores [--seconds S]`: remove the rows of deleted stores that are still waiting.

A deleted store is hidden at once and its rows are purged in batches, first by the deleting request for up
to `STORE_PURGE_SECONDS`, then by every later deletion (docs/decisions.md "Deleting a store of any size").
A store of millions of entries outlasts that budget: this command finishes the work, batch by batch, each
batch its own transaction (safe beside a running server and beside another run of itself). Operators run
it after deleting a very large store, or from a periodic job. Prints what it did; exits 0.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from stores.services import purge_deleted_stores


class Command(BaseCommand):
    help = "Purge the rows of deleted stores (every waiting store, or for at most --seconds)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--seconds", type=float, default=None, help="Stop starting new batches after this many seconds."
        )

    def handle(self, *args, seconds: float | None, **options):
        if seconds is not None and not seconds > 0:
            raise CommandError("--seconds must be a positive number.")
        purged = purge_deleted_stores(seconds=seconds)
        self.stdout.write(
            f"Purged {purged.rows} rows; {purged.stores} deleted stores removed; {purged.pending} still waiting."
        )
