"""What the chaos tests break, started by the tests themselves (issue 16).

- `Cluster`: a PostgreSQL cluster of our own (PostgreSQL's own binaries, `/usr/lib/postgresql/15/bin`
  when present, else the newest installed), on a free loopback port, in a temporary folder; it can be
  frozen (SIGSTOP of every process of the cluster), thawed, restarted fast or immediate, and is always
  stopped and deleted at the end. As root, the server runs as the `postgres` user (initdb refuses root).
- `Server`: the server exactly as `bin/serve` runs it (gunicorn, `config/gunicorn.conf.py`,
  `config.asgi:application`) against a cluster, in its own process group, killed with the group at the
  end so nothing outlives a failing test.

Every wait here has a deadline; nothing polls forever.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
DB_NAME = "memories_chaos"


def pg_bin_dir() -> Path | None:
    """The folder with PostgreSQL's server binaries (15 preferred), or None when none is installed."""
    preferred = Path("/usr/lib/postgresql/15/bin")
    if (preferred / "initdb").exists():
        return preferred
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return found[-1].parent if found else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Call `predicate()` until it returns a truthy value (returned) or `timeout` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Cluster:
    """A throw-away PostgreSQL cluster (see the module docstring). Use as a context manager."""

    def __init__(self, template: Path | None = None):
        self.bin = pg_bin_dir()
        if self.bin is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.root = Path(tempfile.mkdtemp(prefix="memories-chaos-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = None
        try:
            if os.geteuid() == 0:
                self.user = pwd.getpwnam("postgres")
                os.chmod(self.root, 0o755)  # noqa: S103  (the postgres user must reach its data folder)
            if template is not None:
                shutil.copytree(template, self.data, symlinks=True)
                os.chmod(self.data, 0o700)
            self._own(self.root)
            if template is None:
                initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"]
                self._run([*initdb, "-E", "UTF8"])
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DB_NAME}"

    def start(self) -> None:
        self._pg_ctl("start", "-w", "-t", "30", "-l", str(self.root / "server.log"), "-o", self._options())

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-w", "-t", "30", "-m", mode)

    def restart(self, mode: str) -> None:
        """`pg_ctl restart -m fast|immediate`: returns once the server accepts connections again."""
        self._pg_ctl(
            "restart", "-w", "-t", "30", "-m", mode, "-l", str(self.root / "server.log"), "-o", self._options()
        )

    def destroy(self) -> None:
        """Thaw (if frozen), stop and delete the cluster; never raises."""
        with contextlib.suppress(Exception):
            self.signal_all(signal.SIGCONT)
        with contextlib.suppress(Exception):
            self._pg_ctl("stop", "-w", "-t", "15", "-m", "immediate")
        pid = self.postmaster_pid()
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- faults --------------------------------------------------------------------------------------

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def pids(self) -> list[int]:
        """The postmaster and every process it started (backends, checkpointer, walwriter, …)."""
        master = self.postmaster_pid()
        if master is None:
            return []
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        return [master, *(int(c) for c in children)]

    def signal_all(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def freeze(self) -> None:
        """SIGSTOP every process of the cluster: connections are accepted by the kernel, nothing answers."""
        self.signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal_all(signal.SIGCONT)

    # -- access ----------------------------------------------------------------------------------------

    def connect(self, dbname: str = DB_NAME) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True)

    def ready(self) -> bool:
        try:
            with psycopg.connect(
                host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=2
            ) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    # -- helpers ---------------------------------------------------------------------------------------

    def _options(self) -> str:
        return f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=on -c max_connections=100"

    def _own(self, path: Path) -> None:
        if self.user is None:
            return
        for dirpath, _dirnames, filenames in os.walk(path):
            os.chown(dirpath, self.user.pw_uid, self.user.pw_gid)
            for name in filenames:
                os.chown(os.path.join(dirpath, name), self.user.pw_uid, self.user.pw_gid, follow_symlinks=False)
        os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def _pg_ctl(self, *args: str) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args])

    def _run(self, argv: list[str]) -> None:
        if self.user is not None:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{argv[-1]} failed: {done.stdout}{done.stderr}\n{tail}")


def migrate(cluster: Cluster) -> None:
    """Create the database and run every migration on it (a management command: no request budgets)."""
    with cluster.connect("postgres") as conn:
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    manage(cluster, "migrate", "--noinput", "-v", "0")


def manage(cluster: Cluster, *args: str) -> str:
    """Run `manage.py ARGS` against `cluster`; return its stdout (raises on failure)."""
    env = {**os.environ, "DATABASE_URL": cluster.url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def issue_token(cluster: Cluster, handle: str) -> str:
    """A full-scope token secret for a new user `handle` (through the create_token command)."""
    out = manage(cluster, "create_token", "--handle", handle, "--create-user")
    return next(word for word in out.split() if word.startswith("mem_"))


class Server:
    """The server as `bin/serve` runs it, against `cluster` (module docstring). Use as a context manager."""

    def __init__(self, cluster: Cluster, *, workers: int = 2, env: dict[str, str] | None = None):
        self.port = free_port()
        self.workers = workers
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = cluster.root / f"server-{self.port}.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": cluster.url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "WEB_CONCURRENCY": str(workers),
            **(env or {}),
        }
        self.env.pop("GUNICORN_ACCESS_LOG", None)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        argv = [
            sys.executable, "-m", "gunicorn", "config.asgi:application",
            "--config", str(ROOT / "config" / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{self.port}",
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_until(self._ready, 60, 0.2, "the server's /readyz")
            # Every worker booted and serving, so tests that compare worker pids see the whole set.
            wait_until(self._all_workers_serving, 60, 0.2, f"all {self.workers} workers to serve")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # workers left behind, if any
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _all_workers_serving(self) -> bool:
        pids = self.worker_pids()
        log = self.log()
        return len(pids) == self.workers and all(f"[{pid}] [INFO] ASGI server listening" in log for pid in pids)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def worker_pids(self) -> list[int]:
        """The live gunicorn worker processes (children of the master)."""
        text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(pid) for pid in text.split()]

    def established_per_worker(self) -> dict[int, int]:
        """For each worker, how many ESTABLISHED TCP connections on the server's port it holds (/proc)."""
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError):
                for line in Path(table).read_text().splitlines()[1:]:
                    fields = line.split()
                    local_port = int(fields[1].rsplit(":", 1)[1], 16)
                    if local_port == self.port and fields[3] == "01":
                        inodes.add(fields[9])
        counts = {}
        for pid in self.worker_pids():
            n = 0
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        target = os.readlink(f"/proc/{pid}/fd/{fd}")
                        if target.startswith("socket:[") and target[8:-1] in inodes:
                            n += 1
            counts[pid] = n
        return counts


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of one raw HTTP/1.1 response (Content-Length framed)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", len(body)))
    return status, headers, body[:length]


def read_response(sock: socket.socket, timeout: float) -> bytes:
    """Read from `sock` until the server closes it or `timeout` seconds pass; return every byte read."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    data = b""
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def exchange(port: int, payload: bytes, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Send `payload` on a fresh connection and parse the server's answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # the server may answer and close before reading it all
            sock.sendall(payload)
        return parse_response(read_response(sock, timeout))
