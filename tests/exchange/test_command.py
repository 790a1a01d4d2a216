"""`manage.py import_store FILE [--into STORE_ID] [--create-missing-users] [--dry-run]` (SPEC §8b)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from accounts.models import User
from stores.models import Store
from tests.exchange.conftest import assemble, census
from tests.factories import StoreFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def export_file(tmp_path, sample):
    path = tmp_path / "store.jsonl"
    path.write_bytes(assemble(sample))
    return path


def run(*args) -> str:
    out = io.StringIO()
    call_command("import_store", *map(str, args), stdout=out)
    return out.getvalue()


def test_import_store_recreates_the_store_and_says_so(export_file, sample):
    output = run(export_file)
    store = Store.objects.get(pk=sample[0]["store"]["id"])
    assert f"into store {store.pk}" in output and "40 entries" in output and "6 file memories" in output
    assert store.importing is False and store.entry_count == 40


def test_dry_run_verifies_and_keeps_nothing(export_file):
    before = census()
    output = run(export_file, "--dry-run")
    assert output.startswith("Dry run:") and "is valid" in output
    assert census() == before


def test_a_refused_file_names_the_line_and_imports_nothing(tmp_path, sample):
    sample[3]["seq"] = 7
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(assemble(sample))
    before = census()
    with pytest.raises(CommandError, match=r"line 4: entry\.seq is 7; entry 2 comes next.*Nothing was imported"):
        run(bad)
    assert census() == before


def test_into_fills_an_empty_store_and_refuses_a_full_one(export_file, owner):
    empty = StoreFactory(owner=owner, canonical=False, name="landing")
    run(export_file, "--into", empty.pk)
    empty.refresh_from_db()
    assert empty.entry_count == 40 and empty.name == "Everything store"
    with pytest.raises(CommandError, match="An import can only fill an empty store"):
        run(export_file, "--into", empty.pk)
    with pytest.raises(CommandError, match="is not a store id"):
        run(export_file, "--into", "nope")


def test_missing_users_are_created_only_when_asked(tmp_path, sample):
    sample[0]["handles"] = sorted([*sample[0]["handles"], "zed"])
    path = tmp_path / "zed.jsonl"
    path.write_bytes(assemble(sample))
    with pytest.raises(CommandError, match="These handles have no user on this server: zed"):
        run(path)
    output = run(path, "--create-missing-users")
    assert "Created inactive users: zed." in output
    assert User.objects.get(handle="zed").is_active is False


@pytest.mark.parametrize("handle", ["me", "0f2c8a4e9b1d4c3aa1b2c3d4e5f60718"])
def test_a_handle_no_user_may_have_is_a_clear_error_not_a_traceback(tmp_path, sample, handle):
    """A tester: `--create-missing-users` with `me` in the file ended in a ValidationError traceback."""
    sample[0]["handles"] = sorted([*sample[0]["handles"], handle])
    path = tmp_path / "bad-handle.jsonl"
    path.write_bytes(assemble(sample))
    before = census()
    with pytest.raises(CommandError, match=f'The handle "{handle}" .*Nothing was imported'):
        run(path, "--create-missing-users")
    assert census() == before and not User.objects.filter(handle__iexact=handle).exists()


def test_an_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="Cannot read"):
        run(tmp_path / "nope.jsonl")


def test_export_store_writes_the_same_lines_as_the_api(tmp_path, owner_client, private_store):
    from tests.exchange.conftest import without_export_time
    from tests.log.conftest import fill, url

    fill(private_store, 5)
    out = io.StringIO()
    call_command("export_store", str(private_store.pk), "--output", str(tmp_path / "x.jsonl"), stdout=out)
    assert "Exported 7 lines" in out.getvalue()
    api = b"".join(owner_client.get(url(private_store, "export")).streaming_content)
    assert without_export_time((tmp_path / "x.jsonl").read_bytes()) == without_export_time(api)
    with pytest.raises(CommandError, match="No store"):
        call_command("export_store", "nope")
    with pytest.raises(CommandError) as refused:  # was a traceback
        call_command("export_store", str(private_store.pk), "-o", str(tmp_path / "no" / "x.jsonl"), stdout=out)
    with pytest.raises(CommandError) as empty:  # `-o ""` wrote the export to stdout (helper-101)
        call_command("export_store", str(private_store.pk), "-o", "", stdout=out)
    assert str(empty.value) == 'Could not write the export to "": No such file or directory.'
    missing = json.dumps(str(tmp_path / "no" / "x.jsonl"))  # a file name in a message is JSON
    assert str(refused.value) == f"Could not write the export to {missing}: No such file or directory."


def test_export_store_stopped_by_sigterm_keeps_the_previous_file(tmp_path, private_store, monkeypatch):
    """SIGTERM (a cron or systemd timeout) during `export_store -o` left `.FILE.*.part` (helper-99), and once
    taken as Ctrl-C, a KeyboardInterrupt traceback: the temporary file is removed, FILE kept, exit 130."""
    import os
    import signal

    from memories.management.commands import export_store

    def lines(store):
        yield b'{"type":"memories-export"}\n'
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the export runs
        yield b'{"type":"entry"}\n'

    monkeypatch.setattr(export_store, "export_lines", lines)
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(b"yesterday's export\n")
    err, before = io.StringIO(), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        call_command("export_store", str(private_store.pk), "-o", str(backup), stderr=err)
    assert stopped.value.code == 130 and "Interrupted: the export was abandoned" in err.getvalue()
    assert backup.read_bytes() == b"yesterday's export\n" and sorted(tmp_path.iterdir()) == [backup]
    assert signal.getsignal(signal.SIGTERM) is before  # the handler in place before is back


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_export_store_interrupted_once_the_file_is_whole_succeeds(tmp_path, private_store, monkeypatch, signum):
    """A Ctrl-C (or SIGTERM/SIGHUP) landing as the finished export is renamed over FILE said "the export was
    abandoned (a plain FILE is left as it was)" and exited 130 — FILE held the whole export (helper-101).
    Signals are held for the rename; the command then reports the export as done."""
    import os
    import signal

    rename = os.replace

    def interrupted_rename(source, target):
        os.kill(os.getpid(), getattr(signal, signum))
        rename(source, target)

    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(b"yesterday's export\n")
    monkeypatch.setattr(os, "replace", interrupted_rename)
    out, err = io.StringIO(), io.StringIO()
    call_command("export_store", str(private_store.pk), "-o", str(backup), stdout=out, stderr=err)
    assert err.getvalue() == "" and out.getvalue().startswith("Exported ")
    lines = backup.read_bytes().splitlines()
    assert json.loads(lines[0])["type"] == "memories-export" and json.loads(lines[-1])["type"] == "end"
    assert sorted(tmp_path.iterdir()) == [backup]
