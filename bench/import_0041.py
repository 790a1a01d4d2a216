"""Benchmark the 0041 import: generate N legacy records (default 100,000), run it, print records/s.

One command (uses the embedded PostgreSQL unless DATABASE_URL is set; works in a throw-away
database `bench_0041` that is dropped afterwards, so development data is never touched):

    .venv/bin/python bench/import_0041.py [--records 100000] [--batch-size N] [--workers N] [--keep]

SPEC §7 goal: ≥ 5,000 records/s on a 2-core machine. The timed part is `legacy.services.migrate_0041`
(archive every row + import every record); generating the data is not timed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.test.utils import setup_databases, teardown_databases  # noqa: E402

# Description sizes in bytes, weighted like a real notes database: mostly short, a long tail to 50 KB.
SIZES = [0] * 10 + [60] * 20 + [250] * 25 + [700] * 20 + [1000] * 10 + [2500] * 8 + [6000] * 5 + [20_000, 50_000]


def generate(records: int, *, rng: random.Random) -> None:
    """Insert `records` legacy records (200 authors, 20 projects) plus assessments and revisions."""
    from accounts.models import Project, User
    from legacy.models import Assessment, Record, Revision
    from tests.legacy.factories import SEPARATORS, SNIPPETS

    def text(target: int) -> str:
        out, size = [], 0
        while size < target:
            piece = rng.choice(SNIPPETS) + rng.choice(SEPARATORS)
            out.append(piece)
            size += len(piece.encode("utf-8"))
        return "".join(out)

    pool = [text(n) for n in SIZES for _ in range(40)]  # reuse generated texts: generation is not timed
    labels = [text(rng.randint(5, 80))[:255] for _ in range(500)]
    unusable = "!"  # Django's marker for an unusable password
    authors = User.objects.bulk_create([User(handle=f"bench{n}", password=unusable) for n in range(200)])
    projects = Project.objects.bulk_create([Project(slug=f"bench-{n}", name=f"Bench {n}") for n in range(20)])
    base = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    statuses = ["draft", "published", "archived"]
    for start in range(0, records, 5000):
        chunk = []
        for n in range(start, min(start + 5000, records)):
            created = base + dt.timedelta(seconds=rng.randint(0, 3 * 365 * 86400))
            chunk.append(
                Record(
                    author=authors[n % len(authors)],
                    project=projects[n % len(projects)] if n % 3 else None,
                    key=f"bench-{n:07d}",
                    label=rng.choice(labels) or "untitled",
                    description=rng.choice(pool),
                    status=rng.choice(statuses),
                    price=rng.choice([None, 0, 990, 125_000]),
                    created_at=created,
                    updated_at=created,
                )
            )
        made = Record.objects.bulk_create(chunk, batch_size=5000)
        Assessment.objects.bulk_create(
            [Assessment(record=r, assessor=r.author, verdict="approve", score=4, text="ok") for r in made[::5]]
        )
        Revision.objects.bulk_create(
            [Revision(record=r, editor=r.author, label=r.label, description="v1") for r in made[::4]]
        )


def settle() -> None:
    """Make the freshly generated tables look like long-lived production data before timing: analysed,
    vacuumed, and their dirty pages flushed (CHECKPOINT when allowed), so the import does not pay for
    writing out the generator's own inserts."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("legacy_record", "legacy_assessment", "legacy_revision", "accounts_user"):
            cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")
        try:
            cursor.execute("CHECKPOINT")
        except Exception as exc:  # CHECKPOINT needs superuser or pg_checkpoint; the bench still runs without
            print(f"(no CHECKPOINT: {exc.__class__.__name__})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument(
        "--batch-size", type=int, default=None, help="records per transaction (default: the command's own default)"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="connections importing at once (default: the command's own)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench_0041 database afterwards")
    args = parser.parse_args()

    from bench.common import refuse_existing

    refuse_existing("bench_0041")
    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = "bench_0041"
    old = setup_databases(verbosity=0, interactive=False, keepdb=False)
    try:
        from legacy import services
        from memories.models import Entry

        started = time.monotonic()
        generate(args.records, rng=random.Random(41))
        print(f"generated {args.records:,} records in {time.monotonic() - started:.1f} s", flush=True)
        settle()
        summary = services.migrate_0041(
            batch_size=args.batch_size or services.DEFAULT_BATCH_SIZE,
            workers=args.workers or services.DEFAULT_WORKERS,
        )
        assert summary.records == args.records and Entry.objects.count() == summary.entries
        rate = summary.records / summary.duration_s
        print(
            f"imported {summary.records:,} records as {summary.entries:,} entries for {summary.authors} authors "
            f"in {summary.duration_s:.2f} s (archive included; {args.workers or services.DEFAULT_WORKERS} workers)"
        )
        print(f"{rate:,.0f} records/s (goal ≥ 5,000: {'met' if rate >= 5000 else 'NOT met'})")
    finally:
        if not args.keep:
            teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    main()
