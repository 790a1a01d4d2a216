"""Settings of the gunicorn server the MCP tests start: the project's own, pointed at pytest's test database
(`MEMORIES_LIVE_DB_NAME`). Nothing else differs from what `bin/serve` runs."""

import os

from config.settings import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["MEMORIES_LIVE_DB_NAME"]  # noqa: F405
