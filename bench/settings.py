"""Settings for the gunicorn server a benchmark starts: the project's settings, pointed at the benchmark's
throw-away database (`BENCH_DB_NAME`, created by `bench.common.bench_database`). Nothing else differs."""

import os

from config.settings import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["BENCH_DB_NAME"]  # noqa: F405
