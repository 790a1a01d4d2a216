"""Settings an operator needs past one machine (docs/scaling.md), read from the environment as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import django; django.setup(); from django.conf import settings; "


@pytest.mark.parametrize(("value", "expected"), [(None, "False"), ("true", "True"), ("false", "False")])
def test_server_side_cursors_can_be_disabled_for_pgbouncer_transaction_mode(value, expected):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.pop("DB_DISABLE_SERVER_SIDE_CURSORS", None)
    if value is not None:
        env["DB_DISABLE_SERVER_SIDE_CURSORS"] = value
    code = PROBE + "print(settings.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'])"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == expected
