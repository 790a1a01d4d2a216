"""The `rog` CLI against a live server: the Memories guide's command sequences, byte-exact, never executing text."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from accounts import services as account_services
from memories.models import Entry
from rog.cli import main as rog_main
from stores.models import Store
from tests.factories import (
    ProjectFactory,
    ProjectMembershipFactory,
    SectionFactory,
    SectionMembershipFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db(transaction=True)

ROG = shutil.which("rog", path=str(Path(sys.executable).parent)) or shutil.which("rog")


class Rog:
    """Runs the installed `rog` console script as a subprocess (no shell) with ROG_API_URL/ROG_TOKEN set."""

    def __init__(self, url: str, token: str | None, cwd: Path):
        self.url, self.token, self.cwd = url, token, cwd

    def __call__(self, *args: str, token: str | None = "default", expect: int = 0) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROG_")}
        env["ROG_API_URL"] = self.url
        chosen = self.token if token == "default" else token
        if chosen:
            env["ROG_TOKEN"] = chosen
        done = subprocess.run([ROG, *args], cwd=self.cwd, env=env, capture_output=True, timeout=60)
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        stream = done.stdout if expect == 0 else done.stderr
        return json.loads(stream.decode("utf-8")) if stream.strip() else {}


@pytest.fixture
def me(db):
    return UserFactory(handle="me-agent")


@pytest.fixture
def rog(live_server, me, tmp_path):
    assert ROG, "the rog console script is not installed (bin/test installs the project with pip -e .)"
    return Rog(live_server.url, account_services.issue_token(user=me).secret, tmp_path)


def test_a_first_note_before_init_says_how_to_make_the_store(rog, me):
    """A new agent's first `rog memories note` was a bare 404 "Store not found." (a tester): rog adds how a
    subject's store is made. The server's own answer stays the same for a store one may not see."""
    refused = rog("memories", "note", "hello", expect=3)
    assert refused["error"]["type"] == "not_found_error" and "`rog memories init`" in refused["error"]["hint"]
    someone = rog("memories", "wake", "--user", "somebody", expect=3)  # only that user could make it
    assert "made once by that user" in someone["error"]["hint"] and "--user" not in someone["error"]["hint"]
    other = rog("memories", "wake", "--project", "nowhere", expect=3)
    assert "`rog memories init --project nowhere`" in other["error"]["hint"]
    rog("memories", "init")
    assert rog("memories", "note", "hello")["data"]["seq"] == 0


def test_get_started_sequence(rog, me):
    project = ProjectFactory(slug="apollo")
    ProjectMembershipFactory(project=project, user=me)
    section = SectionFactory(slug="needhelp", name="Need help", visibility="public")
    SectionMembershipFactory(section=section, user=me)

    mine = rog("memories", "init")
    assert mine["data"]["scope"] == "user"
    again = rog("memories", "init")
    assert again["data"]["id"] == mine["data"]["id"]  # ensure never duplicates
    shared = rog("memories", "init", "--project", str(project.pk))
    assert shared["data"]["scope"] == "project"
    board = rog("memories", "init", "--board", "NeedHelp")  # slugs match case-insensitively
    assert board["data"]["scope"] == "board"

    empty = rog("memories", "wake", "--project", str(project.pk))
    assert empty["data"]["lines"] == [] and empty["data"]["complete"] is True

    noted = rog("memories", "note", "Decision: keep the PostgreSQL schema compatible.", "--project", str(project.pk))
    assert noted["data"]["seq"] == 0
    for n in range(1, 8):
        rog("memories", "note", f"Step {n}: nothing about databases.", "--project", str(project.pk))

    found = rog("memories", "recall", "PostgreSQL|schema", "--project", str(project.pk))
    assert [m["seq"] for m in found["data"]["matches"]] == [0]
    text = "Decision: keep the PostgreSQL schema compatible."
    expected_spans = [
        [text.index("PostgreSQL"), text.index("PostgreSQL") + 10],
        [text.index("schema"), text.index("schema") + 6],
    ]
    assert found["data"]["matches"][0]["spans"] == expected_spans

    zoomed = rog("memories", "zoom", "0-7", "--project", str(project.pk))
    assert [line["range"] for line in zoomed["data"]["halves"]] == ["0-3", "4-7"]

    woke = rog("memories", "wake", "--project", str(project.pk))
    assert [line["range"] for line in woke["data"]["lines"]] == [str(n) for n in range(8)]

    prompt = rog("memories", "prompt", "--project", str(project.pk))
    text = prompt["data"]["prompt"]
    for word in ("wake", "note", "recall", "nap"):
        assert f"rog memories {word}" in text
    assert str(shared["data"]["id"]) in text
    assert "wake_memories" in text and "client_nonce" in text  # the same advice for MCP-equipped assistants
    mcp = prompt["data"]["mcp"]
    assert mcp["url"] == f"{rog.url}/mcp" and mcp["headers"] == {"Authorization": "Bearer <your token>"}
    assert mcp["clients"]["cursor"]["mcpServers"]["memories"]["url"] == mcp["url"]
    assert rog.token not in json.dumps(prompt)  # the secret never goes into pasted instructions


def test_access_and_sharing_sequence(rog, me, live_server):
    collaborator = UserFactory(handle="collaborator")
    their = Rog(live_server.url, account_services.issue_token(user=collaborator).secret, rog.cwd)
    store = rog("memories", "init")["data"]
    rog("memories", "note", "private thought")

    their("memories", "wake", "--user", "me-agent", expect=3)  # nonreader: 404
    granted = rog("memories", "share", "collaborator")
    assert granted["data"]["active"] is True
    assert their("memories", "wake", "--user", "me-agent")["data"]["lines"][0]["text"] == "private thought"

    rog("memories", "share", "collaborator", "--remove")
    error = their("memories", "wake", "--user", "me-agent", expect=3)
    assert error["error"]["type"] == "not_found_error"
    readers = rog("memories", "readers")
    assert [(r["handle"], r["active"]) for r in readers["data"]] == [("collaborator", False)]

    rog("--data", '{"visibility":"public"}', "memories", "update")
    assert their("memories", "wake", "--store", store["id"])["data"]["lines"][0]["text"] == "private thought"
    anonymous = rog("memories", "wake", "--store", store["id"], token=None)
    assert anonymous["data"]["entry_count"] == 1
    rog("--data", '{"visibility":"private"}', "memories", "update")
    rog("memories", "wake", "--store", store["id"], token=None, expect=3)


def test_note_nonce_retry_returns_the_original_and_a_different_text_conflicts(rog):
    rog("memories", "init")
    first = rog("memories", "note", "exactly once", "--nonce", "retry-1")
    again = rog("memories", "note", "exactly once", "--nonce", "retry-1")
    assert again["data"]["seq"] == first["data"]["seq"]
    assert again["meta"]["replayed"] is True
    error = rog("memories", "note", "something else", "--nonce", "retry-1", expect=3)
    assert error["error"]["type"] == "conflict_error"
    assert error["error"]["details"]["reason"] == "nonce_conflict"


def test_note_without_nonce_still_sends_an_idempotency_key(rog, me):
    rog("memories", "init")
    noted = rog("memories", "note", "keyed anyway")
    key = noted["data"]["client_nonce"]
    assert key.startswith("rog-") and len(key) == 36
    assert Entry.objects.get(client_nonce=key).body_md == "keyed anyway"


def test_rog_retries_a_503_with_the_same_idempotency_key(tmp_path):
    """A server that answers 503 (Retry-After: 0) once: rog retries the note with the same key, and every
    write carries a key (the ensure of `init` too)."""
    seen: list[tuple[str, str | None]] = []

    def respond(path, headers, body, method):
        seen.append((path, headers.get("Idempotency-Key")))
        if path.endswith("/note") and sum(p.endswith("/note") for p, _ in seen) == 1:
            return (
                503,
                b'{"type": "error", "error": {"type": "overloaded_error", "message": "x"}}',
                {"Retry-After": "0"},
            )
        return 201, b'{"data": {"id": "s1", "seq": 0}, "meta": {}}', {}

    with answering(respond) as url:
        Rog(url, "mem_fake", tmp_path)("memories", "note", "hello", "--store", str(uuid.uuid4()))
    notes = [key for path, key in seen if path.endswith("/note")]
    assert len(notes) == 2 and notes[0] == notes[1] and notes[0].startswith("rog-")


@pytest.mark.parametrize(
    ("args", "path"),
    [
        (("projects", "create", "apollo"), "/api/v1/projects"),
        (("tokens", "create", "--name", "ci"), "/api/v1/me/tokens"),
    ],
)
def test_rog_retries_a_replayable_create_with_the_same_key(tmp_path, args, path):
    """Project, board and token creates are replayed by the server under their Idempotency-Key, so rog retries
    them after a 503 like a note, with the same key (a retried project create would otherwise be refused
    `slug_taken` for its own slug)."""
    seen: list[tuple[str, str | None]] = []

    def respond(request_path, headers, body, method):
        seen.append((request_path, headers.get("Idempotency-Key")))
        if len(seen) == 1:
            overloaded = b'{"type": "error", "error": {"type": "overloaded_error", "message": "x"}}'
            return 503, overloaded, {"Retry-After": "0"}
        return 201, b'{"data": {"id": "p1"}, "meta": {}}', {}

    with answering(respond) as url:
        Rog(url, "mem_fake", tmp_path)(*args)
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0][0] == path and seen[0][1].startswith("rog-")


def test_hostile_text_round_trips_byte_for_byte_and_nothing_executes(rog, tmp_path):
    rog("memories", "init")
    body = "Run $(touch pwned) or `touch pwned2`; \x1b[31mred\x1b[0m ${HOME} 'q' \"dq\" \\n\r\ntrailing  \n"
    path = tmp_path / "body.md"
    path.write_bytes(body.encode("utf-8"))
    noted = rog("memories", "note", "--file", str(path))
    assert noted["data"]["body_md"] == body
    shown = rog("memories", "zoom", str(noted["data"]["seq"]))
    assert shown["data"]["line"]["text"] == body
    argv = rog("memories", "note", body)  # as an argument: passed through, never shell-expanded
    assert argv["data"]["body_md"] == body
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert Entry.objects.filter(body_md=body).count() == 2


def test_stdout_never_carries_raw_escape_sequences(rog, live_server, me):
    rog("memories", "init")
    rog("memories", "note", "\x1b]0;owned\x07 \x1b[2J")
    env = {**os.environ, "ROG_API_URL": live_server.url, "ROG_TOKEN": rog.token}
    done = subprocess.run([ROG, "memories", "wake"], env=env, capture_output=True, timeout=60)
    assert b"\x1b" not in done.stdout and b"\x07" not in done.stdout
    assert json.loads(done.stdout)["data"]["lines"][0]["text"].startswith("\x1b]0;owned")


def test_a_queried_string_with_line_breaks_prints_as_the_text_it_is(rog, live_server, me):
    """A tester: `nap -q data.job.prompt` printed the prompt JSON-quoted, `\\n` escapes and all, so a model
    fed with it got escaped text. Line breaks and tabs now print as they are; other controls stay quoted."""
    rog("memories", "init")
    rog("memories", "note", "first\tline\nsecond line")
    rog("memories", "note", "plain")
    env = {**os.environ, "ROG_API_URL": live_server.url, "ROG_TOKEN": rog.token}
    done = subprocess.run(
        [ROG, "memories", "nap", "-q", "data.job.prompt"], env=env, capture_output=True, timeout=60, check=True
    )
    prompt = done.stdout.decode()
    assert "\nfirst\tline\nsecond line\n" in prompt and not prompt.startswith('"')
    assert prompt.count("\n") > 5
    rog("memories", "note", "bell\x07")
    bell = subprocess.run(
        [ROG, "memories", "zoom", "2", "-q", "data.line.text"], env=env, capture_output=True, timeout=60, check=True
    )
    assert bell.stdout == b'"bell\\u0007"\n'


def test_nap_compact_loop_brings_64_entries_to_complete(live_server, me, tmp_path):
    secret = account_services.issue_token(user=me).secret
    runner = CliRunner()
    env = {"ROG_API_URL": live_server.url, "ROG_TOKEN": secret}

    def run(*args) -> dict:
        result = runner.invoke(rog_main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    store_id = run("memories", "init")["data"]["id"]
    for n in range(64):
        run("memories", "note", f"entry {n}: fact number {n}", "--store", store_id)
    rounds = 0
    while True:
        job = run("memories", "nap", "--store", store_id)["data"]
        if job["complete"]:
            break
        job = job["job"]
        summary = " + ".join(child["text"][:30] for child in job["children"])[:1000]
        path = tmp_path / "summary.md"
        path.write_text(summary, encoding="utf-8")
        run(
            "memories", "nap", job["range"], "--store", store_id, "--file", str(path),
            "--generation", str(job["generation"]), "--digest", job["source_digest"], "--model", "stand-in-extractive",
        )  # fmt: skip
        rounds += 1
        assert rounds <= 63
    assert rounds == 63
    woke = run("memories", "wake", "--store", store_id)["data"]
    assert woke["complete"] is True
    assert all(line["kind"] != "missing" for line in woke["lines"])


def test_nap_limit_prints_several_claimed_jobs_and_the_claimants_next_nap_prints_them_again(rog, me):
    store_id = rog("memories", "init")["data"]["id"]
    for n in range(8):
        rog("memories", "note", f"entry {n}", "--store", store_id)
    first = rog("memories", "nap", "--store", store_id, "--limit", "3")["data"]
    assert [job["range"] for job in first["jobs"]] == ["0-1", "2-3", "4-5"]
    assert first["job"] == first["jobs"][0] and all(job["claimed_until"] for job in first["jobs"])
    again = rog("memories", "nap", "--store", store_id)["data"]
    assert again["job"]["range"] == "0-1"  # its own claim, not 6-7
    error = rog("memories", "nap", "0-1", "--store", store_id, "--limit", "2", expect=2)
    assert error["error"]["type"] == "usage_error"
    for limit in ("0", "17"):  # click's own range check (plain-text usage error, exit 2)
        result = CliRunner().invoke(rog_main, ["memories", "nap", "--store", store_id, "--limit", limit])
        assert result.exit_code == 2 and "1<=x<=16" in result.output


def test_recall_follows_every_cursor_through_600_entries(rog, me):
    store_id = rog("memories", "init")["data"]["id"]
    store = Store.objects.get(pk=store_id)
    Entry.objects.bulk_create(
        Entry(store=store, seq=n, author=me, body_md=f"#{n} {'needle' if n % 7 == 0 else 'hay'}", size_bytes=12)
        for n in range(600)
    )
    Store.objects.filter(pk=store_id).update(entry_count=600)
    found = rog("memories", "recall", "needle", "--limit", "10")
    expected = [n for n in range(599, -1, -1) if n % 7 == 0]
    assert [m["seq"] for m in found["data"]["matches"]] == expected
    assert found["meta"]["pages"] > 3


def test_destructive_commands_refuse_without_yes(rog):
    store = rog("memories", "init")["data"]
    error = rog("memories", "delete", "--count", "0", "--generation", str(store["generation"]), expect=2)
    assert "--yes" in error["error"]["message"]
    rog("memories", "forget", "0-1", "--generation", "1", expect=2)
    assert Store.objects.filter(pk=store["id"]).exists()
    rog("memories", "delete", "--count", "0", "--generation", str(store["generation"]), "--yes")
    assert not Store.objects.filter(pk=store["id"]).exists()


def test_exit_codes_distinguish_usage_api_and_network_errors(rog, tmp_path):
    rog("memories", "note", expect=2)  # neither TEXT nor --file
    rog("memories", "wake", "--user", "a", "--project", "b", expect=2)
    rog("memories", "wake", "--store", "00000000-0000-0000-0000-000000000000", expect=3)
    offline = Rog("http://127.0.0.1:9", rog.token, tmp_path)
    error = offline("memories", "wake", expect=5)
    assert error["error"]["type"] == "network_error"


@pytest.mark.parametrize(
    "command",
    ["init", "view", "wake", "note", "recall", "zoom", "nap", "forget", "delete", "update", "prompt", "export"],
)
def test_every_subcommand_has_help(command):
    result = CliRunner().invoke(rog_main, ["memories", command, "--help"])
    assert result.exit_code == 0
    assert "--project" in result.output and "--board" in result.output
    assert ("--store" in result.output) == (command != "init")  # init makes a subject's store: no id yet


@pytest.mark.parametrize("command", ["share", "readers"])
def test_share_and_readers_offer_only_user_stores(command):
    """A project's or board's readers are its members: `--project`/`--board` could only ever answer 409."""
    result = CliRunner().invoke(rog_main, ["memories", command, "--help"])
    assert result.exit_code == 0 and "--store" in result.output and "--user" in result.output
    assert "--project" not in result.output and "--board" not in result.output
    assert "members" in result.output  # says where a project's readers are managed


def test_list_and_view_show_the_stores_and_what_delete_confirms(rog, me):
    project = ProjectFactory(slug="apollo")
    ProjectMembershipFactory(project=project, user=me)
    mine = rog("memories", "init", "--name", "Mine")["data"]
    shared = rog("memories", "init", "--project", "apollo")["data"]
    rog("memories", "note", "one")

    listed = rog("memories", "list")
    assert {row["id"] for row in listed["data"]} == {mine["id"], shared["id"]} and listed["meta"]["count"] == 2
    assert [row["id"] for row in rog("memories", "list", "--scope", "project")["data"]] == [shared["id"]]
    assert "'section' is not one of" in rog("memories", "list", "--scope", "section", expect=2)["error"]["message"]

    viewed = rog("memories", "view")["data"]
    assert (viewed["id"], viewed["entry_count"], viewed["name"]) == (mine["id"], 1, "Mine")
    assert rog("memories", "view", "--store", mine["id"].upper())["data"] == viewed  # any UUID spelling
    assert rog("memories", "view", "--project", "apollo")["data"]["id"] == shared["id"]
    assert rog("memories", "view", "--project", "nowhere", expect=3)["error"]["hint"]


def test_store_takes_only_a_uuid(rog, me):
    """`--store not-a-uuid` was the API's 404 (as for a store one may not see), not a usage error."""
    rog("memories", "init")
    for command in (["wake"], ["view"], ["note", "x"], ["recall", "x"], ["readers"]):
        refused = rog("memories", *command, "--store", "apollo", expect=2)
        assert refused["error"]["type"] == "usage_error" and "UUID" in refused["error"]["message"]
    assert Entry.objects.count() == 0
    # a value in a message is JSON, as the server writes it, never Python's repr ('it\'s' was written so)
    quoted = rog("memories", "view", "--store", "it's", expect=2)["error"]["message"]
    assert 'got "it\'s".' in quoted
    named = rog("projects", "view", "a/b", expect=2)["error"]["message"]
    assert named.startswith('"a/b" is not a name or id')


def test_update_takes_its_fields_as_options_or_json(rog, me):
    store = rog("memories", "init")["data"]
    updated = rog("memories", "update", "--name", "Field notes", "--description", "What *we* saw.")["data"]
    assert (updated["name"], updated["description_md"]) == ("Field notes", "What *we* saw.")
    assert rog("memories", "update", "--visibility", "public")["data"]["visibility"] == "public"
    assert rog("memories", "update", "--data", '{"visibility": "private"}')["data"]["visibility"] == "private"
    assert rog("--data", '{"name": "Global"}', "memories", "update")["data"]["name"] == "Global"
    assert rog("memories", "update", "--store", store["id"], "--name", "By id")["data"]["name"] == "By id"

    refusals = [
        ("memories", "update"),  # nothing to change
        ("--data", '{"name": "a"}', "memories", "update", "--data", '{"name": "b"}'),  # the JSON twice
        ("memories", "update", "--data", '{"name": "a"}', "--name", "b"),  # a field twice
        ("memories", "update", "--data", "[1]"),
        ("memories", "update", "--visibility", "secret"),
    ]
    for args in refusals:
        rog(*args, expect=2)
    assert Store.objects.get(pk=store["id"]).name == "By id"


def test_a_stale_delete_says_which_count_and_generation_to_confirm(rog, me):
    """The server's 409 names `expected_entry_count`; rog's flag is --count: its hint gives the flags."""
    store = rog("memories", "init")["data"]
    rog("memories", "note", "added after the count was read")
    refused = rog("memories", "delete", "--count", "0", "--generation", str(store["generation"]), "--yes", expect=3)
    assert refused["error"]["details"]["reason"] == "stale_confirmation"
    assert f"--count 1 --generation {store['generation']} --yes" in refused["error"]["hint"]
    assert Store.objects.filter(pk=store["id"]).exists()


@contextlib.contextmanager
def answering(respond):
    """A loopback HTTP server whose every GET, POST and DELETE is answered by ``respond(path, headers, body,
    method) -> (status, body bytes, headers)`` (JSON unless the headers say otherwise), each in a thread of its
    own; yields its URL."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            sent = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, body, headers = respond(self.path, self.headers, sent, self.command)
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_2xx_answer_that_is_not_json_is_an_error_not_a_success(tmp_path):
    """A tester: a proxy's 200 page made `rog memories note` print {"data": null} and exit 0 — a note it
    cannot see stored, reported as stored."""
    with answering(lambda path, headers, body, method: (200, b"{not json", {})) as url:
        done = subprocess.run(
            [ROG, "memories", "note", "hello", "--store", str(uuid.uuid4())],
            env={**os.environ, "ROG_API_URL": url, "ROG_TOKEN": "mem_fake"},
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 4, done
    error = json.loads(done.stderr)["error"]
    assert "not JSON" in error["message"] and done.stdout == b""


@pytest.mark.parametrize(
    "status, content_type, template",
    [
        (500, "text/html", "<html>boom {auth}</html>"),
        (400, "application/json", '{{"type": "error", "error": {{"type": "x", "message": "you sent {auth}"}}}}'),
        (200, "application/json", '{{"data": {{"echo": "{auth}"}}, "meta": {{}}}}'),
        (200, "application/json", '{{"data": {{"escaped": "{escaped}"}}, "meta": {{}}}}'),
        (502, "text/plain", "bad gateway"),
    ],
)
def test_rog_never_prints_its_token_even_when_the_server_echoes_it(tmp_path, status, content_type, template):
    secret = "mem_SECRETSECRETSECRET0123456789"

    def echo(path, headers, body, method):
        auth = headers.get("Authorization")
        escaped = "".join(f"\\u{ord(ch):04x}" for ch in auth)
        text = template.format(auth=auth, escaped=escaped).encode()
        return status, text, {"Content-Type": content_type, "Request-Id": auth}

    with answering(echo) as url:
        done = subprocess.run(
            [ROG, "me"], env={**os.environ, "ROG_API_URL": url, "ROG_TOKEN": secret}, capture_output=True, timeout=60
        )
    assert secret.encode() not in done.stdout + done.stderr
    assert b"<your token>" in done.stdout + done.stderr or status == 200  # a 2xx's Request-Id is not printed


def test_a_redirect_is_refused_naming_where_it_points(tmp_path):
    with answering(
        lambda path, headers, body, method: (302, b"", {"Location": "https://elsewhere.example/api/v1/me"})
    ) as url:
        done = subprocess.run(
            [ROG, "me"],
            env={**os.environ, "ROG_API_URL": url, "ROG_TOKEN": "mem_fake"},
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 3
    assert "https://elsewhere.example/api/v1/me" in json.loads(done.stderr)["error"]["message"]


def _import_against(tmp_path, respond, *, signals_at: list[float], signum=None, ignore_sigint: bool = False):
    """Run `rog memories import` of a two-chunk file against the fake server `respond`, sending `signum`
    (SIGINT) at each of `signals_at` (seconds after the second chunk reached the server); `ignore_sigint`:
    rog starts with SIGINT ignored, as a script's background job does. Returns (process, stderr)."""
    import signal
    import threading
    import time

    signum = signal.SIGINT if signum is None else signum

    from rog import transfer

    path = tmp_path / "big.jsonl"
    line = b'{"type": "entry", "pad": "' + b"x" * 1000 + b'"}\n'
    # ends with an end line: rog refuses a file without one before sending anything
    path.write_bytes(line * (2 * transfer.CHUNK_BYTES // len(line) + 10) + b'{"type": "end"}\n')
    second_chunk = threading.Event()

    def watched(path_, headers, body, method):
        if "/lines" in path_:
            second_chunk.set()
        return respond(path_, headers, body, method)

    with answering(watched) as url:
        process = subprocess.Popen(
            [ROG, "memories", "import", str(path)],
            env={**os.environ, "ROG_API_URL": url, "ROG_TOKEN": "mem_fake"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None,
        )
        assert second_chunk.wait(30)
        started = time.monotonic()
        for at in signals_at:
            time.sleep(max(0.0, at - (time.monotonic() - started)))
            process.send_signal(signum)
        process.wait(60)
    return process, process.stderr.read().decode()


OPEN = b'{"data": {"id": "imp1", "status": "open", "next_line": 700, "store_id": "s1"}, "meta": {}}'
COMMITTED = b'{"data": {"id": "imp1", "status": "committed", "next_line": 900, "store_id": "s1"}, "meta": {}}'


def test_ctrl_c_while_a_chunk_fails_abandons_instead_of_retrying(tmp_path):
    """A tester: a Ctrl-C held while the chunk in flight got a 503 was dropped, and rog retried and
    committed the import (exit 0). The held Ctrl-C now wins over the failure: no retry, the import is
    abandoned, exit 130."""
    import time

    calls = []

    def respond(path, headers, body, method):
        calls.append((method, path.split("?")[0]))
        if method == "POST" and path.startswith("/api/v1/memories/imports/imp1/lines"):
            time.sleep(1.5)
            return 503, b'{"type": "error", "error": {"type": "overloaded_error", "message": "x"}}', {}
        if method == "POST":
            return 201, OPEN, {}
        return 200, OPEN, {}

    process, stderr = _import_against(tmp_path, respond, signals_at=[0.3])
    assert process.returncode == 130, stderr
    assert "The import was abandoned" in stderr and "Traceback" not in stderr
    posts = [path for method, path in calls if method == "POST"]
    assert posts == ["/api/v1/memories/imports", "/api/v1/memories/imports/imp1/lines"]  # no retry went out
    assert ("DELETE", "/api/v1/memories/imports/imp1") in calls


def test_a_second_ctrl_c_during_the_committing_chunk_says_it_committed(tmp_path):
    """A tester: quitting during the last chunk sent a DELETE, which met the committed import (409), and
    rog said the server did not answer. It now asks where the import stands and names the store."""
    import time

    def respond(path, headers, body, method):
        if method == "POST" and "/lines" in path:
            time.sleep(2)
            return 200, COMMITTED, {}
        if method == "POST":
            return 201, OPEN, {}
        if method == "DELETE":
            time.sleep(2.5)  # waits for the chunk's lock, as the server's delete does
            body = b'{"type": "error", "error": {"type": "conflict_error", "message": "committed", '
            return 409, body + b'"details": {"reason": "import_committed"}}}', {}
        return 200, COMMITTED, {}

    process, stderr = _import_against(tmp_path, respond, signals_at=[0.3, 0.6])
    assert process.returncode == 130, stderr
    assert "had committed the import: store s1 is there" in stderr and "could not be abandoned" not in stderr


@pytest.mark.parametrize("option", ["--store", "--project", "--board", "--user"])
def test_an_empty_store_option_is_a_usage_error_not_your_own_store(rog, me, option):
    """`--store "$UNSET"` counted as no selection: the note went to the caller's own store (a tester)."""
    rog("memories", "init")
    refused = rog("memories", "note", "meant for another store", option, "", expect=2)
    assert refused["error"]["type"] == "usage_error" and option in refused["error"]["message"]
    rog("memories", "view", option, " ", expect=2)
    assert Entry.objects.count() == 0


def test_data_that_python_reads_but_json_forbids_is_a_usage_error(rog, me):
    """NaN, 1e999 and 20,000 nested objects were tracebacks (exit 1), not usage errors."""
    rog("memories", "init")
    repeated = '{"visibility": "public", "visibility": "private"}'  # the server refuses it; rog kept the last
    for data in (
        '{"name": NaN}',
        '{"name": 1e999}',
        '{"name": -Infinity}',
        '{"a":' * 20000 + "1" + "}" * 20000,
        repeated,
    ):
        refused = rog("memories", "update", "--data", data, expect=2)
        assert refused["error"]["type"] == "usage_error" and "--data is not valid JSON" in refused["error"]["message"]


def test_every_usage_error_is_json_with_a_pointer_to_help(rog):
    """click's own errors (unknown option, bad choice, missing option) were text while rog's were JSON."""
    for args, words in [
        (("--bogus",), "No such option '--bogus'"),
        (("memories", "list", "--scope", "x"), "'x' is not one of"),
        (("memories", "forget", "0-1", "--yes"), "Missing option '--generation'"),
        (("memories", "share", "bob", "--project", "p"), "No such option '--project'"),
    ]:
        error = rog(*args, expect=2)["error"]
        assert error["type"] == "usage_error" and words in error["message"], args
        assert error["hint"].startswith("See `rog") and error["hint"].endswith("--help`."), args


def test_without_a_token_rog_says_to_set_one(rog, me):
    """A missing token read as "subject 'me' needs a bearer token" or, worse, as the owner's own store not
    existing (a tester)."""
    rog("memories", "init")
    own = rog("memories", "wake", token=None, expect=2)["error"]
    assert "ROG_TOKEN" in own["message"] and own["type"] == "usage_error"
    hidden = rog("memories", "wake", "--user", "me-agent", token=None, expect=3)["error"]
    assert hidden["type"] == "not_found_error" and hidden["hint"].startswith("No token was sent")
    assert rog("me", token=None, expect=3)["error"]["hint"].startswith("No token was sent")
    refused = rog("me", token="mem_not-a-real-token", expect=3)["error"]
    assert "refused the token" in refused["hint"] and "mem_not-a-real-token" not in json.dumps(refused)


def test_a_network_error_says_what_to_check(tmp_path):
    error = Rog("http://127.0.0.1:9", "mem_fake", tmp_path)("me", expect=5)["error"]
    assert "Is the server running at http://127.0.0.1:9" in error["hint"]
    error = Rog("https://127.0.0.1:9", "mem_fake", tmp_path)("me", expect=5)["error"]
    assert "plain http needs an http:// URL" in error["hint"]


def test_init_says_when_name_and_description_were_not_applied(rog, me):
    first = subprocess.run([ROG, "memories", "init", "--name", "First"], env=_env(rog), capture_output=True, timeout=60)
    assert first.returncode == 0 and first.stderr == b""  # created with that name: nothing to say
    again = subprocess.run(
        [ROG, "memories", "init", "--name", "Renamed?"], env=_env(rog), capture_output=True, timeout=60
    )
    assert again.returncode == 0 and json.loads(again.stdout)["data"]["name"] == "First"
    assert b"rog memories update" in again.stderr


def test_note_and_nap_read_a_file_named_dash_from_stdin(rog, me):
    rog("memories", "init")
    text = "From stdin, kept exactly:\n  two spaces and no final newline"
    done = subprocess.run(
        [ROG, "memories", "note", "--file", "-", "-q", "data.seq"],
        env=_env(rog),
        input=text.encode(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Entry.objects.get(seq=int(done.stdout)).body_md == text


def _env(rog: Rog) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROG_")}
    return {**env, "ROG_API_URL": rog.url, "ROG_TOKEN": rog.token}


@pytest.mark.parametrize(
    "group", [[], ["memories"], ["tokens"], ["projects"], ["projects", "members"], ["boards"], ["boards", "members"]]
)
def test_help_listings_fit_an_80_column_terminal_without_cut_words(group):
    """click cut each command's first sentence at the terminal's width, mid-word ("… (never the...")."""
    result = CliRunner().invoke(rog_main, [*group, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    listing = result.output.split("Commands:\n", 1)[1]
    assert "..." not in listing and all(len(line) <= 80 for line in listing.splitlines()), listing


def test_a_reader_refused_a_write_is_told_who_grants_it(rog, me, live_server):
    """ "You can read this store but not write to it." said nothing of how to get the right (a tester)."""
    owner = UserFactory(handle="board-owner")
    section = SectionFactory(slug="needhelp", name="Need help", visibility="public")
    SectionMembershipFactory(section=section, user=owner, role="owner")
    theirs = Rog(live_server.url, account_services.issue_token(user=owner).secret, rog.cwd)
    theirs("memories", "init", "--board", "needhelp")
    refused = rog("memories", "note", "hello", "--board", "needhelp", expect=3)["error"]
    assert refused["type"] == "permission_error" and refused["details"]["reason"] == "write_right_required"
    assert "`rog boards members add needhelp HANDLE --role poster`" in refused["hint"]
    assert Entry.objects.count() == 0


def test_an_answer_that_cannot_be_written_is_exit_6_not_a_traceback(rog, me):
    """A full disk (or a closed stdout) ended in an OSError traceback and exit 1 (a tester)."""
    rog("memories", "init")
    rog("memories", "note", "x")
    env = _env(rog)
    for args in (["memories", "wake"], ["memories", "export"], ["--version"], ["memories", "--help"], ["me", "-h"]):
        with open("/dev/full", "wb") as full:
            done = subprocess.run([ROG, *args], env=env, stdout=full, stderr=subprocess.PIPE, timeout=60)
        assert done.returncode == 6, (args, done.stderr)
        error = json.loads(done.stderr)["error"]
        assert error["type"] == "output_error" and "No space left" in error["message"], args
    closed = subprocess.run(
        [ROG, "memories", "wake"], env=env, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1), timeout=60
    )
    assert closed.returncode == 6 and b"Traceback" not in closed.stderr
    for args in (["--version"], ["memories", "list", "--help"]):  # help and version printed nothing, exit 0
        closed = subprocess.run(
            [ROG, *args], env=env, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1), timeout=60
        )
        assert closed.returncode == 6 and b"output_error" in closed.stderr, args


def test_a_closed_stdin_for_file_dash_is_a_usage_error(rog, me):
    rog("memories", "init")
    done = subprocess.run(
        [ROG, "memories", "note", "--file", "-"],
        env=_env(rog),
        capture_output=True,
        preexec_fn=lambda: os.close(0),
        timeout=60,
    )
    assert done.returncode == 2 and "standard input" in json.loads(done.stderr)["error"]["message"]


def test_an_option_missing_its_value_points_to_its_command_help(rog):
    for args, command in [
        (("memories", "note", "x", "--nonce"), "rog memories note"),
        (("memories", "wake", "--user"), "rog memories wake"),
        (("projects", "members", "add", "apollo", "bob", "--role"), "rog projects members add"),
    ]:
        assert rog(*args, expect=2)["error"]["hint"] == f"See `{command} --help`.", args


def test_the_no_token_hint_comes_only_from_a_memories_answer(tmp_path):
    """A wrong URL's 404 (another server's page) was blamed on the missing token (a tester)."""
    with answering(
        lambda path, headers, body, method: (404, b"<html>Not Found</html>", {"Content-Type": "text/html"})
    ) as url:
        error = Rog(url, None, tmp_path)("projects", "list", token=None, expect=3)["error"]
    assert "hint" not in error or "token" not in error["hint"]


@pytest.mark.parametrize(
    ("api_url", "body", "path"),
    [
        ("http://h:1/prefix", {"request_id": "req_1", "error": {"message": "Not found."}}, "/prefix"),  # no route
        ("http://h:1/prefix/", {"error": {"message": "no such page"}}, "/prefix"),  # another server's 404
        ("http://h:1/%2e%2e?x=1", {"request_id": "req_1", "error": {"message": "Not found."}}, "/%2e%2e"),
        ("http://h:1/prefix", {"request_id": "req_1", "error": {"message": "Store not found."}}, None),  # a route
        ("http://h:1/", {"request_id": "req_1", "error": {"message": "Not found."}}, None),  # at the root
    ],
)
def test_the_path_hint_is_for_404s_of_routes_the_server_does_not_have(api_url, body, path):
    """A deployment really served under a path prefix got "drop the path" for a genuinely missing store,
    and the path was shown decoded (`/%2e%2e` as `/..`) (helper-93)."""
    from rog.common import State

    hint = State(api_url=api_url, token="t", data_json=None, timeout=1).url_path_hint(404, body)
    if path is None:
        assert hint is None
    else:
        assert hint.startswith(f"ROG_API_URL / --api-url has the path {path}: ")


def test_a_404_under_an_api_url_with_a_path_points_at_the_path(live_server, me, tmp_path):
    """`ROG_API_URL=http://127.0.0.1:8195/xyz`: every call is our server's 404, which rog explained as a
    store that may not exist (a tester). With the path in the URL, the hint names it; at the root, it does
    not."""
    token = account_services.issue_token(user=me).secret
    under = Rog(live_server.url + "/xyz", token, tmp_path)("memories", "wake", expect=3)["error"]
    assert under["type"] == "not_found_error"
    assert under["hint"].startswith("ROG_API_URL / --api-url has the path /xyz: rog calls ")
    at_root = Rog(live_server.url, token, tmp_path)("memories", "wake", "--user", "nobody-here", expect=3)["error"]
    assert "ROG_API_URL" not in at_root.get("hint", "")


def test_a_sigterm_during_a_chunk_is_held_even_with_sigint_ignored(tmp_path):
    """A script's background job starts with SIGINT ignored; skipping the chunk's hold for an ignored SIGINT
    let a SIGTERM cut the request in flight, and the import it opened was left open (helper-105). SIGTERM is
    held until the chunk's answer, then the import is abandoned; a SIGINT stays ignored."""
    import signal
    import time

    calls = []

    def respond(path, headers, body, method):
        calls.append((method, path.split("?")[0]))
        if method == "POST" and "/lines" in path:
            time.sleep(1.5)
            return 200, OPEN, {}
        if method == "POST":
            return 201, OPEN, {}
        return 200, OPEN, {}

    ignored, said = _import_against(tmp_path, respond, signals_at=[0.3], ignore_sigint=True)
    # the SIGINT changed nothing: both chunks went out, and the fake server (which never commits) ends it
    assert ignored.returncode == 3 and "Interrupted" not in said, said
    assert [path for method, path in calls if method == "POST"][-1] == "/api/v1/memories/imports/imp1/lines"
    calls.clear()
    process, stderr = _import_against(tmp_path, respond, signals_at=[0.3], signum=signal.SIGTERM, ignore_sigint=True)
    assert process.returncode == 130, stderr
    assert "waiting for the server's answer to the chunk in flight" in stderr
    assert "The import was abandoned" in stderr and ("DELETE", "/api/v1/memories/imports/imp1") in calls
