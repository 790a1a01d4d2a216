"""Valid UTF-8 in a URL path is valid under the real server stack (issue 15 #7).

The ASGI front (config/asgi.py) hands Django a PEP 3333 environ; Django decodes PATH_INFO to text and
`config.middleware.HostileInputMiddleware` must check that text's UTF-8, not its latin-1 bytes, which
turned U+0080–U+00FF into "not valid UTF-8". Driven through gunicorn, as `bin/serve` runs it.
"""

from __future__ import annotations

import httpx
import pytest

from tests.mcp.conftest import gunicorn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("%C3%A9", 404),  # é, U+00E9: a store id that names nothing
        ("%C2%80", 404),  # U+0080
        ("%C3%BF", 404),  # ÿ, U+00FF
        ("%E2%82%AC", 404),  # €
        ("%F0%9F%98%80", 404),  # an astral character
        ("%C3%28", 400),  # not UTF-8
        ("%ED%A0%80", 400),  # an encoded surrogate
        ("a%00b", 400),  # NUL
    ],
)
def test_the_path_is_checked_as_utf8_under_the_asgi_stack(live_stack, raw, status):
    response = httpx.get(f"{live_stack.url}/api/v1/memories/{raw}", timeout=30)
    assert response.status_code == status, response.text
    if status == 400:
        assert "URL path" in response.json()["error"]["message"]


@pytest.fixture(scope="module")
def live_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock(), gunicorn(tmp_path_factory.mktemp("utf8")) as server:
        yield server
