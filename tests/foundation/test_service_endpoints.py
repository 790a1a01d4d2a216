"""/healthz, /readyz and /openapi.yaml."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_healthz_and_readyz_are_ok(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_readyz_is_503_when_the_database_is_unreachable():
    """Run the real app in a subprocess whose DATABASE_URL points at a closed port."""
    script = textwrap.dedent(
        """
        import django, json
        django.setup()
        from django.test import Client
        c = Client()
        h = c.get("/healthz"); r = c.get("/readyz")
        print(json.dumps({"health": h.status_code, "ready": r.status_code, "body": r.json(),
                          "rid": r.headers.get("Request-Id")}))
        """
    )
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:9/nowhere", "DB_CONNECT_TIMEOUT": "2"}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["health"] == 200
    assert result["ready"] == 503
    assert result["body"]["error"]["type"] == "overloaded_error"
    assert result["rid"].startswith("req_")


@pytest.mark.django_db
def test_openapi_document_is_served_with_title_version_and_bearer_scheme(client):
    response = client.get("/openapi.yaml")
    assert response.status_code == 200
    doc = yaml.safe_load(response.content)
    assert doc["info"]["title"] == "Memories"
    assert doc["info"]["version"] == "2.0.0"
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_openapi_validates_without_warnings(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "openapi.yaml"))
    assert (tmp_path / "openapi.yaml").stat().st_size > 0
