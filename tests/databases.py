"""The test database's address, for subprocesses (servers, `manage.py`) that must reach it."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def database_url(name: str | None = None) -> str:
    """DATABASE_URL of the database this test runs on, or of database `name` on the same server (a socket
    folder goes in `?host=`)."""
    db = connection.settings_dict
    host, port = db.get("HOST") or db.get("OPTIONS", {}).get("host") or "", db.get("PORT") or ""
    auth = quote(db["USER"], safe="") + (f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else "")
    name = quote(name or db["NAME"], safe="")
    if host.startswith("/"):
        return f"postgres://{auth}@/{name}?host={quote(host, safe='/')}"
    return f"postgres://{auth}@{host or '127.0.0.1'}:{port or 5432}/{name}"
