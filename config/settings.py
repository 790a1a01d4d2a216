"""Settings: everything from the environment (django-environ). See the README's configuration table."""

from __future__ import annotations

import os
import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config.envcheck import DEFAULT_WEB_THREADS, stream_settings

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="dev-insecure-change-me-in-production-0123456789abcdef")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
CSRF_FAILURE_VIEW = "config.views.csrf_failure"

INSTALLED_APPS = [
    "accounts",  # first: its createsuperuser (case-insensitive handles) overrides django.contrib.auth's
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "stores",
    "memories",
    "backoffice",
    "versions",
    "sessions.apps.SessionsConfig",  # label "agent_sessions": django.contrib.sessions owns "sessions"
    "legacy",
    "demo",  # manage.py demo_real_input (issue 9); no models
]

MIDDLEWARE = [
    "config.middleware.RequestIdMiddleware",
    # Before the screening, so its refusals (400 / 413) carry the security headers like every response.
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.HostileInputMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The API (/api/…) runs without the back office's middleware (config.asgi, issue 17): bearer tokens need
# no sessions, CSRF, session users, messages or static files, and skipping them saves about a tenth of a
# note's server CPU. Request ids, hostile-input screening and the security headers stay.
BACK_OFFICE_ONLY_MIDDLEWARE = [
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
API_MIDDLEWARE = [name for name in MIDDLEWARE if name not in BACK_OFFICE_ONLY_MIDDLEWARE]
API_PATH_PREFIX = "/api/"
# Hot routes answered without Django's resolver and DRF's dispatch in their plain case (config/fastlane.py,
# issue 17): note, wake, zoom, recall, file create and update; everything else about them still goes
# through Django. [] (or FAST_LANES=false) turns the lanes off.
API_FAST_LANES = (
    [
        "memories.api.views.NOTE_LANE",
        "memories.api.views.WAKE_LANE",
        "memories.api.views.ZOOM_LANE",
        "memories.api.views.RECALL_LANE",
        "versions.api.views.MEMORY_CREATE_LANE",
        "versions.api.views.MEMORY_UPDATE_LANE",
    ]
    if env.bool("FAST_LANES", default=True)
    else []
)

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"
APPEND_SLASH = False  # routes work without a trailing slash; a redirect would break POSTs (SPEC §5)

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database: DATABASE_URL, else the embedded PostgreSQL in .data/ (config/embedded_db.py).
if env.str("DATABASE_URL", default=""):
    DATABASES = {"default": env.db_url("DATABASE_URL")}
else:
    from config.embedded_db import database_settings

    DATABASES = {"default": database_settings()}
DATABASES["default"]["ENGINE"] = "config.postgresql"  # Django's, with a health check that needs no round trip
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Behind PgBouncer in transaction mode named (server-side) cursors cannot span transactions (docs/scaling.md).
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool("DB_DISABLE_SERVER_SIDE_CURSORS", default=False)
# Budgets (SPEC §2 "Faults are not bugs"). The connect timeout holds everywhere (libpq's minimum is 2 s);
# the statement and lock timeouts and the request deadline hold for the server's requests only
# (`config.database.apply_request_budgets`, applied by the servers' start-up): management commands
# such as migrations and imports run without them.
DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = env.int("DB_CONNECT_TIMEOUT", default=2)
# Prepared statements (config/compiled.py) run their generic plan from the first execution instead of being
# planned again for every call while PostgreSQL's estimate prefers custom plans (the file writes were:
# 0.3-0.4 ms of planning per request). Only statements with bound parameters are affected; Django binds
# client-side. JIT compilation is off: a generic plan's estimate can cross `jit_above_cost` where the
# statement runs in a millisecond (nap's scan: 0.4 ms, then 400 ms of compiling on every call). A value
# given in DATABASE_URL's `options` wins. docs/decisions.md, "Generic plans for prepared statements".
DB_PLAN_CACHE_MODE = env.str("DB_PLAN_CACHE_MODE", default="").strip().lower() or "force_generic_plan"
if DB_PLAN_CACHE_MODE not in ("force_generic_plan", "auto", "force_custom_plan"):
    raise ImproperlyConfigured(
        f"DB_PLAN_CACHE_MODE must be force_generic_plan, auto or force_custom_plan; got {DB_PLAN_CACHE_MODE!r}"
    )
_db_jit = env.str("DB_JIT", default="").strip().lower()
if _db_jit not in ("", "0", "false", "no", "off", "1", "true", "yes", "on"):
    raise ImproperlyConfigured(f"DB_JIT must be true or false; got {_db_jit!r}")
DB_JIT = _db_jit in ("1", "true", "yes", "on")
_db_options = DATABASES["default"]["OPTIONS"]
for _name, _value in (("plan_cache_mode", DB_PLAN_CACHE_MODE), ("jit", "on" if DB_JIT else "off")):
    # Set in the URL's options already (`-c name=…`, `-cname=…` or `--name=…`)? Then that value stands.
    if not re.search(rf"(?:^|\s)(?:-c\s*|--){_name}\s*=", _db_options.get("options", ""), re.IGNORECASE):
        _db_options["options"] = f"{_db_options.get('options', '')} -c {_name}={_value}".strip()
DB_STATEMENT_TIMEOUT = env.float("DB_STATEMENT_TIMEOUT", default=5.0)  # seconds; PostgreSQL cancels the statement
DB_LOCK_TIMEOUT = env.float("DB_LOCK_TIMEOUT", default=3.0)  # seconds waiting for a row or table lock
# Seconds a request may spend on the database before its statement is cancelled and its connection cut
# (`config.database.Watchdog`): what bounds a request when the server cannot cancel anything itself
# (frozen, partitioned). 0 turns the cut off.
DB_REQUEST_DEADLINE = env.float("DB_REQUEST_DEADLINE", default=7.0)
# Seconds between PostgreSQL's checks, while it runs a statement of a request, that the client is still
# connected (`client_connection_check_interval`, PostgreSQL >= 14): a statement whose connection the
# request deadline cut is aborted, even waiting on a lock, instead of committing later. 0 leaves it out.
DB_CLIENT_CHECK_INTERVAL = env.float("DB_CLIENT_CHECK_INTERVAL", default=0.25)
# Whole seconds a client is told to wait (Retry-After) after a 503 overloaded_error.
RETRY_AFTER = env.int("RETRY_AFTER", default=1)
# Slow clients (config/asgi.py, config/server.py): headers and bodies not complete within these many
# seconds get 408; a request not answered within REQUEST_TIMEOUT seconds of its body gets 503.
HEADER_TIMEOUT = env.float("HEADER_TIMEOUT", default=10.0)
BODY_TIMEOUT = env.float("BODY_TIMEOUT", default=10.0)
REQUEST_TIMEOUT = env.float("REQUEST_TIMEOUT", default=9.5)
# Django threads per server process (the event loop in front of them holds slow and idle connections).
WEB_THREADS = env.int("WEB_THREADS", default=DEFAULT_WEB_THREADS)
# Streamed answers (the export, config/asgi.py): sent block by block as the client takes them, each
# block's database work under DB_REQUEST_DEADLINE; a client that takes more than STREAM_SEND_TIMEOUT seconds
# to accept one block (64 KiB), or a stream still running STREAM_SECONDS after it started, is cut (no end
# line: clients see the export incomplete). At most STREAM_THREADS answers of a process stream at once
# (default: half of WEB_THREADS, at least 1), so streams never take every thread — except with WEB_THREADS=1,
# where an export needs the one thread while it reads the database; one more is a 503 with Retry-After.
# Of those, at most STREAM_THREADS_PER_USER for one user (the key the export view sets); one more is a 429 with
# Retry-After: one user's stalled exports kept every other user's refused (a breaker). Ranges and defaults of
# all six: config/envcheck.py (also the server's start check).
try:
    _stream = stream_settings(os.environ, WEB_THREADS)
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from None
STREAM_SEND_TIMEOUT = _stream["STREAM_SEND_TIMEOUT"]
STREAM_SECONDS = _stream["STREAM_SECONDS"]
STREAM_THREADS = _stream["STREAM_THREADS"]
STREAM_THREADS_PER_USER = _stream["STREAM_THREADS_PER_USER"]
# A streamed answer is read ahead of its client (config/asgi.py `_Spool`): up to STREAM_SPOOL_MEMORY_BYTES in
# memory, then in an anonymous temporary file, STREAM_SPOOL_BYTES in all per stream. The answer's database
# transaction then ends, and its thread is free, when the database has been read, not when a slow client
# has taken the last block; past STREAM_SPOOL_BYTES the reading waits for the client (0: no read-ahead).
# Polls (GET …/work/poll?block_ms=…) of a process that may wait on an empty queue at once, each in a request
# thread (sessions/services/work.py); past it a poll tries once and answers at once (the SDK's poller then
# sleeps 1–3 s), so idle pollers never take the threads other requests need. Default: a quarter of the
# threads, at least 1 — but never every thread (0 with WEB_THREADS=1: each poll answers at once).
POLL_WAITERS = env.int("POLL_WAITERS", default=min(max(1, WEB_THREADS // 4), WEB_THREADS - 1))
STREAM_SPOOL_BYTES = _stream["STREAM_SPOOL_BYTES"]
STREAM_SPOOL_MEMORY_BYTES = _stream["STREAM_SPOOL_MEMORY_BYTES"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# WhiteNoise serves static files (the back office's CSS/JS) straight from the app folders (finders), so no
# collectstatic step is needed; STATIC_ROOT is only used when someone runs collectstatic for a CDN.
STATIC_ROOT = env.str("STATIC_ROOT", default="") or None
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Request bodies over this many bytes get 413 request_too_large (SPEC §2).
MAX_REQUEST_BYTES = env.int("MAX_REQUEST_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
# API tokens: how often last_used_at is refreshed (seconds) — a write per request would cost every call.
TOKEN_LAST_USED_RESOLUTION = env.int("TOKEN_LAST_USED_RESOLUTION", default=60)
# Deleting a store (stores.services.delete_store) hides it at once, then purges its rows in batches of
# STORE_PURGE_BATCH rows, each its own transaction, for at most STORE_PURGE_SECONDS of the request; the rest
# goes with later deletions or `manage.py purge_stores` (docs/decisions.md "Deleting a store of any size").
STORE_PURGE_BATCH = env.int("STORE_PURGE_BATCH", default=20_000)
STORE_PURGE_SECONDS = env.float("STORE_PURGE_SECONDS", default=2.0)
# Memory Stores: current file memories per store; the next new path gets 409 memory_limit (SPEC §5).
MEMORY_STORE_MAX_MEMORIES = env.int("MEMORY_STORE_MAX_MEMORIES", default=2000)
# Memories log: how long a recall cursor stays valid (seconds); older cursors get 400 (SPEC §4 recall).
RECALL_CURSOR_MAX_AGE = env.int("RECALL_CURSOR_MAX_AGE", default=24 * 3600)
# Memories log: the CPU seconds one recall page may spend matching before it stops early with a cursor (it
# always finishes the entry it is on, so a page makes progress): a pattern whose every match re-scans the
# rest of the entry costs about a second per 1 KiB entry (docs/memories-log.md, "recall's page budget").
RECALL_PAGE_BUDGET = env.float("RECALL_PAGE_BUDGET", default=0.1)
# /mcp: browser origins allowed besides the server's own host (the MCP transport asks servers to check
# Origin; requests without one — every non-browser client — are unaffected).
MCP_ALLOWED_ORIGINS = env.list("MCP_ALLOWED_ORIGINS", default=[])
# Resumable imports (SPEC §8b): an open import idle this long (seconds, database time) is abandoned and its
# hidden store deleted when the next import starts.
IMPORT_IDLE_SECONDS = env.int("IMPORT_IDLE_SECONDS", default=24 * 3600)
# Memories log: how long a nap claims the jobs it returns for the caller (seconds, ≥ 1; SPEC §4 Claims).
# At most a day: the claim statements pass seconds as PostgreSQL integers (an hour-long LLM call is already
# rare); a larger value is taken as a day (a tester's 10^9 with its default cap was a 500 on renewal).
NAP_CLAIM_SECONDS = min(max(env.int("NAP_CLAIM_SECONDS", default=300), 1), 24 * 3600)
# How long one claimant may hold one range by renewing it (seconds, at least NAP_CLAIM_SECONDS): then the
# claim lapses whatever it naps, and that claimant cannot take the range again for NAP_CLAIM_SECONDS, so an
# agent that keeps failing a job cannot keep it from every other agent (docs/memories-log.md, "Claims").
NAP_CLAIM_MAX_SECONDS = min(
    max(env.int("NAP_CLAIM_MAX_SECONDS", default=3 * NAP_CLAIM_SECONDS), NAP_CLAIM_SECONDS), 30 * 24 * 3600
)
# Public base URL used in absolute links (guide URL in 410s); empty = taken from the request.
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="")

REST_FRAMEWORK = {
    # Agent credentials (environment keys `menv_…`, per-work credentials `mwork_…`) first; each class
    # leaves the other's tokens alone. Which endpoints take which: views' `accepted_credentials`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "sessions.authentication.AgentCredentialAuthentication",
        "accounts.authentication.BearerTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.permissions.ScopedAccess"],
    "DEFAULT_PARSER_CLASSES": ["config.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["config.renderers.JSONRenderer"],  # DRF's, encoding with orjson (issue 17)
    "EXCEPTION_HANDLER": "config.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "config.schema.ApiAutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # No `?format=`: the API speaks JSON only, and DRF's override answered an unknown format 404 before it
    # authenticated. `format` is now an unknown query parameter like any other: 401 without a credential,
    # 400 naming it with one.
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Memories",
    "DESCRIPTION": "Shared, durable memory for AI agents: the Memories log and file Memory Stores.",
    "VERSION": "2.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # One name per choice set that several components share (drf-spectacular would otherwise invent
    # hashed names and warn): store scopes, environment scopes, and `type` constants two objects use.
    "ENUM_NAME_OVERRIDES": {
        "ScopeEnum": "stores.models.Scope",
        "EnvironmentScopeEnum": "sessions.models.EnvironmentScope",
        "MemoryStoreTypeEnum": ["memory_store"],
        "SessionTypeEnum": ["session"],
        "EnvironmentKeyTypeEnum": ["environment_key"],
        "ProjectRoleEnum": ["owner", "member"],
        "SectionRoleEnum": ["owner", "poster", "reader"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema.accept_null_references",
        "config.schema.add_error_responses",
        "config.schema.close_strict_bodies",
        "legacy.api.schema.keep_only_retired_statuses",
        "config.schema.describe_probes",
        "config.schema.share_error_responses",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"one_line_warning": {"()": "config.errors.OneLineWarning"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        "console_one_line": {"class": "logging.StreamHandler", "filters": ["one_line_warning"]},
    },
    "loggers": {
        "django.request": {"handlers": ["console"], "level": env.str("REQUEST_LOG_LEVEL", default="ERROR")},
        "memories": {"handlers": ["console"], "level": "INFO"},
        # Django's refusals of suspicious requests, one WARNING line each — "Invalid HTTP_HOST header: 'x'. You
        # may need to add 'x' to ALLOWED_HOSTS." among them (without a handler they went nowhere: a tester;
        # Django logs them as ERRORs with the exception's traceback, which any client could flood: a breaker)
        "django.security": {"handlers": ["console_one_line"], "level": "WARNING", "propagate": False},
    },
}

# `handle` is unique case-insensitively through a functional UniqueConstraint(Lower("handle")), which
# Django's check cannot see; the manager's get_by_natural_key matches with iexact.
SILENCED_SYSTEM_CHECKS = ["auth.E003"]
