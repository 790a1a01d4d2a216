"""`rog` with hostile arguments and environment (found by a breaker): a token with a stray CR was printed
whole in a network_error; a non-ASCII or padded --nonce crashed or was changed on the way (it travelled as a
header only); bytes that are not UTF-8, a bad --timeout or URL were tracebacks; C1 controls and bidi
overrides in stored text reached the terminal raw."""

from __future__ import annotations

import os
import subprocess

import pytest

from accounts import services as account_services
from memories.models import Entry
from tests.cli.test_rog import ROG, Rog, me, rog  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def run(rog: Rog, *args, env: dict | None = None) -> subprocess.CompletedProcess:  # noqa: F811
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROG_")}
    base |= {"ROG_API_URL": rog.url, "ROG_TOKEN": rog.token, **(env or {})}
    argv = [os.fsencode(ROG), *(a if isinstance(a, bytes) else a.encode() for a in args)]
    return subprocess.run(argv, cwd=rog.cwd, env=base, capture_output=True, timeout=60)


@pytest.mark.parametrize("suffix", ["\r", "\n", " ", "\r\n"])
def test_a_token_with_a_stray_character_is_a_usage_error_that_never_prints_it(rog, suffix):  # noqa: F811
    done = run(rog, "me", env={"ROG_TOKEN": rog.token + suffix})
    assert done.returncode == 2, done.stderr
    assert rog.token.encode() not in done.stderr and rog.token[8:].encode() not in done.stderr
    assert b"usage_error" in done.stderr and b"Traceback" not in done.stderr


def test_any_nonce_the_server_takes_round_trips_and_a_retry_replays(rog, me):  # noqa: F811
    rog("memories", "init")
    for nonce in ("é-nonce", " padded ", "two words", "ascii-1"):
        first = rog("memories", "note", f"text for {nonce!r}", "--nonce", nonce)
        again = rog("memories", "note", f"text for {nonce!r}", "--nonce", nonce)
        assert first["data"]["client_nonce"] == nonce
        assert again["meta"]["replayed"] is True and again["data"]["seq"] == first["data"]["seq"]
    assert Entry.objects.count() == 4


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("memories", "note", b"\xff\xfe bad bytes"), None),
        (("memories", "recall", b"\xff"), None),
        (("memories", "note", "x", "--nonce", b"\xc3"), None),
        (("--timeout", "nan", "me"), None),
        (("--timeout", "-1", "me"), None),
        (("--timeout", "inf", "me"), None),
        (("me",), {"ROG_API_URL": "http://[::1"}),
        (("memories", "note", "hi", "--nonce", ""), None),  # was two nonces: "" in the body, a fresh header
    ],
    ids=[
        "note-bytes",
        "recall-bytes",
        "nonce-bytes",
        "timeout-nan",
        "timeout-negative",
        "timeout-inf",
        "url",
        "empty-nonce",
    ],
)
def test_bad_bytes_timeouts_and_urls_are_usage_errors(rog, args, env):  # noqa: F811
    rog("memories", "init")
    done = run(rog, *args, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"usage_error" in done.stderr and b"Traceback" not in done.stderr
    assert not Entry.objects.exists()


def test_c1_controls_and_bidi_overrides_never_reach_the_terminal_raw(rog, me):  # noqa: F811
    text = "csi \u009b31m osc \u009d0;x\u009c rlo \u202eevil del \u007f ls \u2028 ps \u2029"
    rog("memories", "init")
    rog("memories", "note", text)
    for query in ((), ("-q", "data.line.text")):
        done = run(rog, "memories", "zoom", "0", *query)
        assert done.returncode == 0, done.stderr
        out = done.stdout.decode()
        assert not any(ch in out for ch in "\u009b\u009d\u009c\u202e\u007f\u2028\u2029"), out
        assert all(escape in out for escape in ("\\u009b", "\\u202e", "\\u007f", "\\u2028")), out
    token = account_services.issue_token(user=me).secret
    assert token  # (the fixture's user can still mint: nothing above changed the account)


def test_a_url_with_a_user_or_password_is_a_usage_error_that_never_prints_them(rog):  # noqa: F811
    """httpx sent the URL's userinfo as Basic credentials in place of the token: every call a 401 (a tester)."""
    urls = (
        "http://agent:SECRETPW@127.0.0.1:1",
        "http://agent@127.0.0.1:1",
        "http://:SECRETPW@127.0.0.1:1",
        "http://agent:SECRETPW[@127.0.0.1:1",  # urllib refuses it; httpx sent it (a second tester)
        "http://agent:SECRETPW\uff03@127.0.0.1:1",
    )
    for url in urls:
        done = run(rog, "me", env={"ROG_API_URL": url})
        assert done.returncode == 2, done.stderr
        assert b"usage_error" in done.stderr and b"user name or password" in done.stderr
        assert b"SECRETPW" not in done.stderr and b"agent" not in done.stderr


@pytest.mark.parametrize(
    "url",
    ["http://xn--.com", "http://a..b", "127.0.0.1:1", "file:///etc/passwd", "ws://127.0.0.1:1", "http://h:1/#f",
     "http://h:1/?x=1", "http://h:1/?", "http://h:1/#", "http://h:1/api/v1", "http://h:1/api/", "http://h:1/API",
     "http://h:1/prefix/api"],
)  # fmt: skip
def test_a_url_rog_cannot_use_is_a_usage_error_not_a_traceback_or_a_network_error(rog, url):  # noqa: F811
    """A host no resolver takes crashed with a traceback (exit 1); a URL without http(s) was a network error
    (exit 5); a query or fragment swallowed the API path (every call a 404) — a tester; so did a URL ending in
    /api or /api/v1, the SDK's base (another tester)."""
    done = run(rog, "me", env={"ROG_API_URL": url})
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert b"usage_error" in done.stderr and b"Traceback" not in done.stderr


def test_a_url_with_the_api_path_names_the_root_to_use_and_a_prefix_is_kept(rog):  # noqa: F811
    done = run(rog, "me", env={"ROG_API_URL": "http://127.0.0.1:1/proxy/api/v1"})
    assert done.returncode == 2 and b"without /api or /api/v1 (rog adds them): http://127.0.0.1:1/proxy" in done.stderr
    assert run(rog, "me", env={"ROG_API_URL": "http://127.0.0.1:1/proxy"}).returncode == 5  # a prefix is fine


def test_a_network_error_names_the_url(rog):  # noqa: F811
    done = run(rog, "me", env={"ROG_API_URL": "http://127.0.0.1:1"})
    assert done.returncode == 5, done.stderr
    assert b"network_error" in done.stderr and b"http://127.0.0.1:1" in done.stderr
