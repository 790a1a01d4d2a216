"""The connection options the settings build (`DB_PLAN_CACHE_MODE`, `DB_JIT`; config/settings.py): each read
in a fresh interpreter, as a server or command starts, and checked on a real connection with SHOW."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]

_SHOW = """
import json, django
django.setup()
from django.db import connection
from config.database import apply_request_budgets
apply_request_budgets()
with connection.cursor() as cursor:
    out = {}
    for name in ("plan_cache_mode", "jit", "statement_timeout"):
        cursor.execute(f"SHOW {name}")
        out[name] = cursor.fetchone()[0]
print(json.dumps(out))
"""


def _run(environ: dict[str, str], url_options: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DB_PLAN_CACHE_MODE", "DB_JIT")}
    env.update(environ, DJANGO_SETTINGS_MODULE="config.settings")
    if url_options:  # this run's server (the embedded one's socket folder too) as a URL carrying options
        db = settings.DATABASES["default"]
        host, port = db["HOST"] or "localhost", f":{db['PORT']}" if db["PORT"] else ""
        if host.startswith("/"):  # a socket folder goes in the query
            url_options += "&host=" + urllib.parse.quote(host, safe="/")
            host = ""
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{host}{port}/postgres?{url_options}"
    return subprocess.run([sys.executable, "-c", _SHOW], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _shown(environ: dict[str, str], url_options: str = "") -> dict[str, str]:
    done = _run(environ, url_options)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_defaults_are_generic_plans_without_jit_and_the_budgets_stay():
    assert _shown({}) == {"plan_cache_mode": "force_generic_plan", "jit": "off", "statement_timeout": "5s"}


@pytest.mark.parametrize(
    ("environ", "mode", "jit"),
    [
        ({"DB_PLAN_CACHE_MODE": " AUTO "}, "auto", "off"),
        ({"DB_PLAN_CACHE_MODE": "force_custom_plan", "DB_JIT": "true"}, "force_custom_plan", "on"),
        ({"DB_PLAN_CACHE_MODE": ""}, "force_generic_plan", "off"),
    ],
)
def test_the_environment_sets_them(environ, mode, jit):
    shown = _shown(environ)
    assert (shown["plan_cache_mode"], shown["jit"]) == (mode, jit)


@pytest.mark.parametrize(
    "options",
    [
        "-c%20plan_cache_mode%3Dauto%20-c%20jit%3Don",
        "-cplan_cache_mode%3Dauto%20--jit%3Don",
        "-c%20Plan_Cache_Mode%3Dauto%20-c%20JIT%3Don",  # PostgreSQL's names ignore case
    ],
)
def test_options_in_database_url_win(options):
    shown = _shown({}, f"options={options}")
    assert (shown["plan_cache_mode"], shown["jit"]) == ("auto", "on")


@pytest.mark.parametrize(
    "options",
    ["-c%20application_name%3Djitter", "-c%20jit_above_cost%3D1000000", "-c%20search_path%3Dplan_cache_mode_x,public"],
)
def test_a_name_inside_another_option_is_not_taken_for_it(options):
    shown = _shown({}, f"options={options}")
    assert (shown["plan_cache_mode"], shown["jit"]) == ("force_generic_plan", "off")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"DB_PLAN_CACHE_MODE": "sometimes"}, "DB_PLAN_CACHE_MODE must be force_generic_plan, auto or"),
        ({"DB_JIT": "maybe"}, "DB_JIT must be true or false; got 'maybe'"),
        ({"STREAM_THREADS_PER_USER": "0"}, "STREAM_THREADS_PER_USER must be a whole number of streamed answers"),
        ({"STREAM_SECONDS": "abc"}, "STREAM_SECONDS must be a number of seconds from 1 to 604800; got 'abc'"),
    ],
)  # fmt: skip
def test_a_bad_value_stops_start_up_naming_the_setting(environ, message):
    done = _run(environ)
    assert done.returncode != 0
    assert message in done.stderr
