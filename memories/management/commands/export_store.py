"""`manage.py export_store STORE_ID [--output FILE]`: the operator's side of GET /memories/{id}/export.

Writes the same JSON Lines (SPEC §8b) through the same service (`memories.exchange.export.export_lines`),
to a file or stdout, in constant memory. No access check: this is the operator's tool.
"""

from __future__ import annotations

import contextlib
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from config.errors import DomainError
from config.text import quoted
from memories.exchange.export import export_lines
from rog.common import OpenedOnFirstWrite  # the rule `rog memories export -o` follows
from rog.transfer import termination_as_interrupt
from stores.models import Store
from stores.selectors import parse_store_id


class Command(BaseCommand):
    help = "Write a store's export (JSON Lines, SPEC §8b) to FILE or standard output."

    def add_arguments(self, parser):
        parser.add_argument("store_id", help="The store's UUID.")
        parser.add_argument("--output", "-o", metavar="FILE", help="Write here instead of standard output.")

    def handle(self, *args, store_id: str, output: str | None, **options):
        try:
            store = Store.objects.filter(pk=parse_store_id(store_id), deleted_at__isnull=True).first()
        except DomainError:
            store = None
        if store is None:
            raise CommandError(f"No store {quoted(store_id, 80)}.")
        lines = 0
        started = time.monotonic()
        # FILE is opened by the first line, once the snapshot is read (`rog memories export -o` does the same)
        opened = None if output is None else OpenedOnFirstWrite(output)
        try:
            # SIGTERM/SIGHUP as Ctrl-C, so a cut export's temporary file is removed (helper-99)
            with (
                termination_as_interrupt(),
                contextlib.nullcontext(sys.stdout.buffer) if opened is None else opened as out,
            ):
                for line in export_lines(store):
                    out.write(line)
                    lines += 1
        except OSError as exc:  # the file could not be opened or written (a missing folder, a full disk)
            where = quoted(output) if output is not None else "standard output"
            raise CommandError(f"Could not write the export to {where}: {exc.strerror}.") from None
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP: a message and 130, not a traceback
            if opened is not None:
                opened.close(complete=False)  # one that landed before `close` held interruptions
            if opened is None or not opened.finished:  # else it came once FILE held the whole export
                self.stderr.write("Interrupted: the export was abandoned (a plain FILE is left as it was).")
                sys.exit(130)
        if output is not None:
            elapsed = time.monotonic() - started
            self.stdout.write(f"Exported {lines} lines of store {store.pk} to {quoted(output)} in {elapsed:.2f} s.")
