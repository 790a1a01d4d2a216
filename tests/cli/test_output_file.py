"""`rog.common.OpenedOnFirstWrite`: where `rog memories export -o FILE` and `manage.py export_store -o FILE` write.

A plain FILE is replaced only by a complete export; a link, a special file or a file with hard links is
written in place (docs/export-import.md)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from rog.common import OpenedOnFirstWrite
from tests.cli.test_rog import ROG
from tests.interrupted import run_with_import_interrupted


class Cut(Exception):
    pass


def write_cut(path, data: bytes) -> None:
    with pytest.raises(Cut), OpenedOnFirstWrite(path) as out:
        out.write(data)
        raise Cut  # what a stream cut short raises inside the block (TransferFailed, a network error)


def test_a_plain_file_keeps_its_previous_content_until_the_export_is_complete(tmp_path):
    """An export cut after its first bytes truncated yesterday's backup and left a file without its end line."""
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(b"yesterday's export\n")
    backup.chmod(0o640)
    before = backup.stat().st_ino
    write_cut(backup, b'{"type":"memories-export"}\n')
    assert backup.read_bytes() == b"yesterday's export\n" and backup.stat().st_ino == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]  # no temporary file left
    with OpenedOnFirstWrite(backup) as out:
        out.write(b"today's ")
        assert backup.read_bytes() == b"yesterday's export\n"  # not before the block ends
        out.write(b"export\n")
    assert backup.read_bytes() == b"today's export\n"
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


def test_a_new_file_appears_only_complete_with_the_mode_open_gives(tmp_path):
    target = tmp_path / "new.jsonl"
    write_cut(target, b"partial")
    assert list(tmp_path.iterdir()) == []
    umask = os.umask(0o027)
    try:
        with OpenedOnFirstWrite(target) as out:
            out.write(b"whole\n")
    finally:
        os.umask(umask)
    assert target.read_bytes() == b"whole\n" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_file_with_hard_links_a_symlink_and_a_fifo_are_written_in_place(tmp_path):
    """A rename would split the links, replace the symlink itself or never reach the FIFO's reader."""
    original = tmp_path / "original.jsonl"
    original.write_bytes(b"old\n")
    (tmp_path / "other-name.jsonl").hardlink_to(original)
    with OpenedOnFirstWrite(tmp_path / "other-name.jsonl") as out:
        out.write(b"new\n")
    assert original.read_bytes() == b"new\n" and original.stat().st_nlink == 2
    write_cut(tmp_path / "other-name.jsonl", b"cut")  # in place: cut is cut (exit 5, no end line)
    assert original.read_bytes() == b"cut"
    (tmp_path / "link.jsonl").symlink_to(original)
    with OpenedOnFirstWrite(tmp_path / "link.jsonl") as out:
        out.write(b"through the link\n")
    assert (tmp_path / "link.jsonl").is_symlink() and original.read_bytes() == b"through the link\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    with OpenedOnFirstWrite(fifo) as out:
        out.write(b"streamed\n")
    reader.join(10)
    assert received == [b"streamed\n"] and stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_as_root_a_replaced_file_keeps_its_owner_and_group(tmp_path):
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(b"old\n")
    os.chown(backup, 4321, 4322)
    with OpenedOnFirstWrite(backup) as out:
        out.write(b"new\n")
    found = backup.stat()
    assert (found.st_uid, found.st_gid) == (4321, 4322) and backup.read_bytes() == b"new\n"


@contextlib.contextmanager
def fake_server(handler: type[http.server.BaseHTTPRequestHandler], tmp_path, token: str = "mem_x"):
    """A loopback HTTP server answering with `handler`; yields `(rog export command, its env)` writing
    `backup.jsonl` (which holds "yesterday's export") in `tmp_path`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "backup.jsonl").write_bytes(YESTERDAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROG_")}
    env.update(ROG_API_URL=f"http://127.0.0.1:{server.server_address[1]}", ROG_TOKEN=token)
    command = [ROG, "memories", "export", "--store", "00000000-0000-4000-8000-000000000001", "-o", "backup.jsonl"]
    try:
        yield command, env
    finally:
        server.shutdown()
        server.server_close()


def assert_backup_kept(tmp_path) -> None:
    assert (tmp_path / "backup.jsonl").read_bytes() == YESTERDAY
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]  # no temporary file left


YESTERDAY = b"yesterday's export\n"


class _CutExport(http.server.BaseHTTPRequestHandler):
    """Answers every export with its header line, then closes the connection: a stream cut short."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b'{"type":"memories-export","version":1,"counts":{"entries":3}}\n')
        self.wfile.flush()

    def log_message(self, *args):
        pass


def test_rog_export_cut_short_leaves_the_previous_backup_whole(tmp_path):
    with fake_server(_CutExport, tmp_path) as (command, env):
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert done.returncode == 5, done.stderr
    assert b"without its end line" in done.stderr
    assert_backup_kept(tmp_path)


def test_a_name_of_250_bytes_still_gets_a_temporary_file(tmp_path):
    """`.NAME.xxxxxxxx.part` passed 255 bytes: mkstemp failed and the file was written in place (helper-99)."""
    backup = tmp_path / ("é" * 122 + ".jsonl")  # 250 bytes
    backup.write_bytes(b"old\n")
    write_cut(backup, b"partial")
    assert backup.read_bytes() == b"old\n" and sorted(tmp_path.iterdir()) == [backup]
    with OpenedOnFirstWrite(backup) as out:
        out.write(b"new\n")
    assert backup.read_bytes() == b"new\n" and sorted(tmp_path.iterdir()) == [backup]


def test_no_temporary_file_means_a_refusal_never_a_write_in_place(tmp_path, monkeypatch):
    """A folder the caller cannot create files in (a read-only one) fell back to writing FILE in place, so a
    cut export cost the backup (helper-99): the write is refused and FILE left as it was."""
    import tempfile

    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(b"old\n")

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(OSError) as caught, OpenedOnFirstWrite(backup) as out:
        out.write(b"new\n")
    assert caught.value.filename == str(backup)
    assert (
        caught.value.strerror == "no temporary file could be made beside it (Permission denied); it is left as it was"
    )
    assert backup.read_bytes() == b"old\n"


def test_the_temporary_file_lies_in_the_folder_the_path_really_names(tmp_path):
    """`a/link/../out.jsonl` is `b/out.jsonl` when `a/link` points at `b/c`: the temporary file went to `a/`,
    where a kill left it and a rename across file systems would fail (helper-99)."""
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "link").symlink_to("../b/c")
    (tmp_path / "b" / "out.jsonl").write_bytes(b"old\n")
    path = tmp_path / "a" / "link" / ".." / "out.jsonl"
    with OpenedOnFirstWrite(str(path)) as out:
        out.write(b"new\n")
        assert [p.name for p in (tmp_path / "b").iterdir() if p.name.endswith(".part")]
    assert (tmp_path / "b" / "out.jsonl").read_bytes() == b"new\n"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["link"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["c", "out.jsonl"]
    with pytest.raises(FileNotFoundError), OpenedOnFirstWrite(str(tmp_path / "missing" / ".." / "x.jsonl")) as out:
        out.write(b"x")  # the kernel finds no `missing`, so neither do we: refused at the first bytes
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root without setpriv (util-linux)")
def test_a_read_only_file_stays_refused(tmp_path):
    """A 0444 backup one owns was replaced by the rename, where `open` refuses it (helper-99). As root the test
    drops every capability (`setpriv`), so the permission checks are an ordinary user's."""
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(b"protected\n")
    backup.chmod(0o444)
    script = (
        "import sys\n"
        "from rog.common import OpenedOnFirstWrite\n"
        "try:\n"
        "    with OpenedOnFirstWrite(sys.argv[1]) as out:\n"
        "        out.write(b'new')\n"
        "except PermissionError:\n"
        "    sys.exit(3)\n"
    )
    drop = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*drop, sys.executable, "-c", script, str(backup)], capture_output=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert backup.read_bytes() == b"protected\n" and sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


class _StalledExport(http.server.BaseHTTPRequestHandler):
    """Answers an export with its header line, then waits: a slow export to stop from outside."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.end_headers()
        self.wfile.write(b'{"type":"memories-export","version":1,"counts":{"entries":3}}\n')
        self.wfile.flush()
        time.sleep(20)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_an_export_stopped_by_a_signal_leaves_no_temporary_file(tmp_path, signum):
    """SIGTERM or SIGHUP (a cron or systemd timeout, a closed terminal) left `.FILE.*.part` (helper-99); they
    are taken as Ctrl-C, as during an import."""
    with fake_server(_StalledExport, tmp_path) as (command, env):
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not any(p.name.endswith(".part") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(p.name.endswith(".part") for p in tmp_path.iterdir()), "the export never started"
        process.send_signal(signum)
        process.wait(timeout=30)
    assert process.returncode == 130
    error = json.loads(process.stderr.read())["error"]  # what became of the work (helper-101: only "Interrupted.")
    assert error == {
        "type": "interrupted",
        "message": "Interrupted. The export was abandoned; a plain FILE is left as it was.",
    }
    assert_backup_kept(tmp_path)


class _ProxyPage(http.server.BaseHTTPRequestHandler):
    """A proxy's page, answered 200 to everything."""

    def do_GET(self):
        page = b"<html>proxy login " + self.headers.get("Authorization", "").encode() + b"</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


def test_an_export_answered_by_a_proxy_page_is_exit_4_and_keeps_the_file(tmp_path):
    """A 200 HTML page was "The export ended after 0 lines without its end line", exit 5, where every other
    2xx answer that is not what rog asked for is exit 4 naming it (helper-100). The token is masked."""
    with fake_server(_ProxyPage, tmp_path, token="mem_secret_value") as (command, env):
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert done.returncode == 4, done.stderr
    message = json.loads(done.stderr)["error"]["message"]
    assert message.startswith("HTTP 200 with a body that is not application/jsonl but text/html"), message
    assert "mem_secret_value" not in done.stderr.decode()
    assert_backup_kept(tmp_path)


def test_an_empty_output_name_is_refused_not_taken_for_stdout(tmp_path):
    """`-o ""` (an unset `$BACKUP` in a cron line) wrote the whole export to stdout and exited 0 (helper-101):
    it is a file name `open` refuses, exit 6, before anything is written anywhere."""
    with fake_server(_StalledExport, tmp_path) as (command, env):
        done = subprocess.run([*command[:-1], ""], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert done.returncode == 6 and done.stdout == b"", done.stderr
    assert json.loads(done.stderr)["error"]["message"] == 'Could not write the answer to "": No such file or directory.'
    assert_backup_kept(tmp_path)


def test_an_interruption_during_the_rename_lands_after_it(tmp_path, monkeypatch):
    """A Ctrl-C that lands while a complete export is renamed over FILE: the rename happens, `finished` says
    so, and the KeyboardInterrupt comes after it — the caller can tell "FILE is whole" from "abandoned"."""
    backup = tmp_path / "backup.jsonl"
    backup.write_bytes(YESTERDAY)
    rename = os.replace

    def interrupted_rename(source, target):
        os.kill(os.getpid(), signal.SIGINT)  # delivered at once unless held
        rename(source, target)

    monkeypatch.setattr(os, "replace", interrupted_rename)
    opened = OpenedOnFirstWrite(backup)
    with pytest.raises(KeyboardInterrupt), opened as out:
        out.write(b"today's export\n")
    assert opened.finished
    assert backup.read_bytes() == b"today's export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]
    # held only for that step: a Ctrl-C before it still stops the export, and FILE is kept
    opened = OpenedOnFirstWrite(backup)
    with pytest.raises(KeyboardInterrupt), opened as out:
        out.write(b"tomorrow's ")
        os.kill(os.getpid(), signal.SIGINT)
        out.write(b"export\n")
    assert not opened.finished and backup.read_bytes() == b"today's export\n"


class _WholeExport(http.server.BaseHTTPRequestHandler):
    """Answers an export with a header and its end line: a complete (empty) export."""

    body = b'{"type":"memories-export","version":1,"counts":{}}\n{"type":"end","lines":2}\n'

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


# `rog` with its rename of the finished file interrupted by `signal` (the race a test cannot time from outside)
_RENAME_INTERRUPTED = """
import os, signal, sys
from rog.cli import main
rename, signum = os.replace, getattr(signal, sys.argv.pop(1))
def interrupted_rename(source, target):
    os.kill(os.getpid(), signum)
    rename(source, target)
os.replace = interrupted_rename
sys.argv[0] = "rog"
main()
"""


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interruption_once_the_export_is_whole_is_a_success(tmp_path, signum):
    """Ctrl-C (or SIGTERM/SIGHUP) that lands as the finished export replaces FILE exited 130 saying the export
    was abandoned and FILE left as it was — while FILE held the whole export (helper-101). It is exit 0."""
    with fake_server(_WholeExport, tmp_path) as (command, env):
        done = subprocess.run(
            [sys.executable, "-c", _RENAME_INTERRUPTED, signum, *command[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=60,
        )
    assert (done.returncode, done.stderr) == (0, b"")
    assert (tmp_path / "backup.jsonl").read_bytes() == _WholeExport.body
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


def test_an_interruption_at_any_moment_leaves_file_whole_or_as_it_was_and_nothing_behind(tmp_path):
    """Ctrl-C at a random moment of an export into FILE: while the temporary file was made (`mkstemp`,
    `fchmod`, `fdopen`) it was leaked with its descriptor, and one landing in `__exit__` before `close`
    skipped the cleanup (helper-102: 117 of 2,000 runs). FILE is now either the whole export (`finished`)
    or as it was, with no `.part` and no descriptor left, whenever the signal lands."""
    import random

    target = tmp_path / "backup.jsonl"
    target.write_bytes(YESTERDAY)
    export = b"".join(b"line %d\n" % n for n in range(200))
    descriptors = len(os.listdir("/proc/self/fd"))
    chance = random.Random(102)
    interrupted = 0
    for _ in range(1500):
        opened = OpenedOnFirstWrite(target)
        timer = threading.Timer(chance.uniform(0, 0.0015), os.kill, (os.getpid(), signal.SIGINT))
        try:
            timer.start()
            with opened as out:
                for start in range(0, len(export), 700):
                    out.write(export[start : start + 700])
            timer.join()  # the signal is sent: it lands before the next statement
            time.sleep(0)
        except KeyboardInterrupt:
            interrupted += 1
            opened.close(complete=False)
        finally:
            timer.cancel()
            timer.join()
        assert target.read_bytes() == (export if opened.finished else YESTERDAY)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]
        target.write_bytes(YESTERDAY)
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert interrupted > 0  # the signals did land inside the export


def test_a_ctrl_c_while_rog_loads_is_its_error_object_not_a_traceback(tmp_path):
    """The console script imported `rog.cli` before any handler: a Ctrl-C then printed a KeyboardInterrupt
    traceback (helper-102). The script is `rog.entry:main`, which answers it like any other interruption."""
    with open(ROG) as script:
        assert "from rog.entry import main" in script.read()  # what `pip install` made of pyproject.toml
    done = run_with_import_interrupted(
        "rog.cli", "import sys\nfrom rog.entry import main\nsys.exit(main())\n", "whoami"
    )
    assert done.returncode == 130 and b"Traceback" not in done.stderr, done.stderr
    error = json.loads(done.stderr)["error"]
    assert error == {"type": "interrupted", "message": "Interrupted. Nothing was done."}


class _SlowWholeExport(http.server.BaseHTTPRequestHandler):
    """Answers an export with its header, then after 1.5 s its end line: a whole export, slowly."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.end_headers()
        self.wfile.write(b'{"type":"memories-export","version":1,"counts":{}}\n')
        self.wfile.flush()
        time.sleep(1.5)
        self.wfile.write(b'{"type":"end","lines":2}\n')

    def log_message(self, *args):
        pass


def test_an_ignored_sighup_stays_ignored(tmp_path):
    """`nohup rog memories export -o FILE &` was abandoned when its terminal closed: SIGHUP was taken as Ctrl-C
    even though the caller had ignored it (helper-104). An ignored signal stays ignored; the export finishes."""

    def ignore_hangups():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    with fake_server(_SlowWholeExport, tmp_path) as (command, env):
        process = subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            preexec_fn=ignore_hangups,
        )
        deadline = time.monotonic() + 30
        while not any(p.name.endswith(".part") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGHUP)
        process.wait(timeout=30)
    assert process.returncode == 0, process.stderr.read()
    assert (tmp_path / "backup.jsonl").read_bytes().endswith(b'{"type":"end","lines":2}\n')


class _BigExport(http.server.BaseHTTPRequestHandler):
    """Answers an export with 300 KB of lines (no end line), one small piece at a time (so rog writes small
    pieces, which a buffered file would keep), then waits: more than a pipe holds."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.end_headers()
        self.wfile.write(b'{"type":"memories-export","version":1,"counts":{"entries":9}}\n')
        with contextlib.suppress(OSError):
            for _ in range(300):
                self.wfile.write(b'{"type":"entry","pad":"' + b"x" * 1000 + b'"}\n')
                self.wfile.flush()
                time.sleep(0.002)
            time.sleep(20)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("reader", ["none", "stalled"])
def test_an_export_into_a_fifo_whose_reader_stalls_stops_at_the_first_signal(tmp_path, reader, signum):
    """`-o FIFO` (or `-o /dev/stdout | stalled-reader`) blocks in `open` until a reader comes, or in a write
    while the reader does not read. Interruptions held around the open and the close made rog stoppable only
    by SIGKILL (helper-104); then the abandoning close flushed what was still buffered into the full pipe and
    blocked again, so `timeout`'s one SIGTERM was swallowed (helper-105). A file written in place is unbuffered
    and never held: the first signal ends the export, exit 130, the abandoned message."""
    with fake_server(_BigExport if reader == "stalled" else _SlowWholeExport, tmp_path) as (command, env):
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        process = subprocess.Popen([*command[:-1], "fifo"], cwd=tmp_path, env=env, stderr=subprocess.PIPE)
        held = os.open(fifo, os.O_RDONLY) if reader == "stalled" else None  # opened, never read
        try:
            time.sleep(1.0)  # in `open` (no reader) or in a write (the pipe is full)
            process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        finally:
            if process.returncode is None:
                process.kill()
                process.wait()
            if held is not None:
                os.close(held)
    stderr = process.stderr.read()
    assert process.returncode == 130, stderr
    assert (
        json.loads(stderr)["error"]["message"]
        == "Interrupted. The export was abandoned; a plain FILE is left as it was."
    )
