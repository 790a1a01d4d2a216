"""`manage.py migrate_0041_memories [--dry-run] [--batch-size N] [--workers N]`: the 0041 import (SPEC §7).

Thin over `legacy.services.migrate_0041`: shows a rich progress bar on a terminal (nothing when
stdout is not a TTY, when `CI` is set, or with ``--verbosity 0``) and prints a summary at the end.
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from legacy import services


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = (
        "Archive every legacy record, assessment and revision, then import each record's label and "
        "description into its author's private canonical user store (SPEC §7). Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Report the same numbers; write nothing.")
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=services.DEFAULT_BATCH_SIZE,
            help=f"Records per transaction (default {services.DEFAULT_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--workers",
            type=positive_int,
            default=services.DEFAULT_WORKERS,
            help=(
                "Database connections importing at once, each its own authors' records "
                f"(default {services.DEFAULT_WORKERS})."
            ),
        )

    def handle(self, *args, dry_run: bool, batch_size: int, workers: int, verbosity: int, **options):
        console = Console(file=self.stdout._out, highlight=False)
        show_bar = verbosity >= 1 and console.is_terminal and not os.environ.get("CI")
        progress = Progress(
            TextColumn("[bold]0041 import[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("records"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=not show_bar,
            transient=False,
        )
        task = progress.add_task("import", total=None)
        try:
            with progress:
                summary = services.migrate_0041(
                    batch_size=batch_size,
                    dry_run=dry_run,
                    workers=workers,
                    on_start=lambda total: progress.update(task, total=total),
                    on_batch=lambda n: progress.advance(task, n),
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if verbosity >= 1:
            self.stdout.write(self.format_summary(summary))

    @staticmethod
    def format_summary(summary: services.ImportSummary) -> str:
        """The final report: one line per figure, prefixed by DRY RUN when nothing was written."""
        head = "0041 import — DRY RUN, nothing written" if summary.dry_run else "0041 import done"
        verb = "would import" if summary.dry_run else "imported"
        lines = [
            head,
            f"  records {verb}: {summary.records}",
            f"  entries {verb}: {summary.entries}",
            f"  authors: {summary.authors} (stores created: {summary.stores_created})",
            (
                f"  skipped: {summary.skipped} (already imported {summary.skipped_already_imported}, "
                f"shared store {summary.skipped_shared_store}, archived store {summary.skipped_archived_store}, "
                f"nonce taken by another entry {summary.skipped_nonce_taken})"
            ),
            (
                f"  archived rows: records {summary.archived_records}, assessments {summary.archived_assessments}, "
                f"revisions {summary.archived_revisions}"
            ),
            f"  duration: {summary.duration_s:.2f} s ({summary.records_per_second:,.0f} records/s)",
        ]
        return "\n".join(lines)
