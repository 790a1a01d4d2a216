"""`manage.py import_store FILE [--into STORE_ID] [--create-missing-users] [--dry-run]` (SPEC §8b).

Thin over `memories.exchange.services.import_file`: the whole file in one transaction (nothing is kept
when any line is refused), a progress bar on a terminal (by bytes read; none when stdout is not a TTY,
when `CI` is set, or with ``--verbosity 0``), a summary at the end. `FILE` may be ``-`` for stdin.
"""

from __future__ import annotations

import os
import sys
import time

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from config.errors import DomainError
from config.text import quoted
from memories.exchange.services import import_file
from stores.models import Store
from stores.selectors import parse_store_id


class _DryRun(Exception):
    """Raised inside the import transaction to roll a verified --dry-run back."""


class _Counting:
    """A binary file wrapper that counts the bytes read (for the progress bar)."""

    def __init__(self, raw) -> None:
        self.raw, self.read = raw, 0

    def readline(self, limit: int = -1) -> bytes:
        line = self.raw.readline(limit)
        self.read += len(line)
        return line


class Command(BaseCommand):
    help = (
        "Recreate a store from its export (GET /api/v1/memories/{id}/export or `rog memories export`). "
        "Authors are matched by handle; unknown handles are reported and nothing is imported."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="The .jsonl export, or - for standard input.")
        parser.add_argument("--into", metavar="STORE_ID", help="Fill this existing, empty store instead.")
        parser.add_argument(
            "--create-missing-users",
            action="store_true",
            help="Create every unknown handle as an inactive user (listed in the summary) instead of refusing.",
        )
        parser.add_argument("--dry-run", action="store_true", help="Verify and import, then roll everything back.")

    def handle(self, *args, file: str, into: str | None, create_missing_users: bool, dry_run: bool, **options):
        target = None
        if into:
            target = Store.objects.filter(pk=parse_id(into), deleted_at__isnull=True).first()
            if target is None:
                raise CommandError(f"No store {into}.")
        raw = sys.stdin.buffer if file == "-" else open_file(file)
        total = os.fstat(raw.fileno()).st_size if file != "-" else None
        stream = _Counting(raw)
        show = options["verbosity"] > 0 and self.stdout.isatty() and not os.environ.get("CI") and total
        started = time.monotonic()
        try:
            with _progress(show, total) as advance:
                try:
                    with transaction.atomic():
                        result = import_file(
                            stream,
                            into=target,
                            create_missing_users=create_missing_users,
                            progress=(lambda _lines: advance(stream.read)) if show else None,
                        )
                        summary = _summary(result.store)
                        if dry_run:
                            raise _DryRun()
                except _DryRun:
                    self.stdout.write(f"Dry run: {file} is valid ({result.lines} lines: {summary}); nothing was kept.")
                    return
        except DomainError as exc:
            raise CommandError(f"{file}: {exc.message} Nothing was imported.") from None
        except ValidationError as exc:  # a handle of the file the model refuses for a new user (`me`, UUID-shaped)
            raise CommandError(f"{file}: {' '.join(exc.messages)} Nothing was imported.") from None
        finally:
            if raw is not sys.stdin.buffer:
                raw.close()
        elapsed = time.monotonic() - started
        if result.created_users:
            self.stdout.write(f"Created inactive users: {', '.join(result.created_users)}.")
        for warning in result.warnings:
            self.stdout.write(self.style.WARNING(warning))
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {result.lines} lines ({summary}) into store {result.store.pk} "
                f"({quoted(result.store.name)}) in {elapsed:.2f} s."
            )
        )


def parse_id(value: str):
    try:
        return parse_store_id(value)
    except DomainError:
        raise CommandError(f"--into: {quoted(value, 80)} is not a store id.") from None


def open_file(path: str):
    try:
        return open(path, "rb")
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None


def _summary(store: Store) -> str:
    store.refresh_from_db()
    return f"{store.entry_count} entries, {store.summary_count} live summaries, {store.memory_count} file memories"


class _progress:
    """A rich progress bar by bytes (or nothing): ``with _progress(show, total) as advance: advance(done)``."""

    def __init__(self, show: bool, total: int | None) -> None:
        self.bar = (
            Progress(
                TextColumn("importing"),
                BarColumn(),
                DownloadColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=False),
            )
            if show
            else None
        )
        self.total = total

    def __enter__(self):
        if self.bar is None:
            return lambda done: None
        self.bar.start()
        task = self.bar.add_task("import", total=self.total)
        return lambda done: self.bar.update(task, completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
