"""The embedded PostgreSQL used when DATABASE_URL is unset (SPEC: a fresh machine needs no database set-up).

The `pgserver` package ships PostgreSQL binaries; we keep its data folder in the git-ignored `.data/`
folder of the checkout (or `MEMORIES_DATA_DIR`). The server keeps running after the process that started
it exits, so gunicorn workers, `manage.py` and the tests all share one instance; `get_server` reuses a
running instance.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """Return the folder holding the embedded cluster (`$MEMORIES_DATA_DIR` or `<checkout>/.data/pg`)."""
    return Path(os.environ.get("MEMORIES_DATA_DIR") or BASE_DIR / ".data" / "pg")


def database_settings() -> dict:
    """Start (or reuse) the embedded PostgreSQL and return a Django DATABASES entry for it.

    The host is the server's Unix socket directory. Raises whatever `pgserver` raises when the
    binaries cannot start (the error names the data folder).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on servers
        import pgserver

        folder = data_dir()
        folder.mkdir(parents=True, exist_ok=True)
        was_running = _postmaster(folder) is not None
        server = pgserver.get_server(folder, cleanup_mode=None)
        uri = server.get_uri()  # postgresql://postgres:@/postgres?host=/path
    if not was_running:  # say so: a `manage.py` run without the DATABASE_URL its server uses lands here (a tester)
        print(
            f"DATABASE_URL is not set: started the embedded PostgreSQL in {folder} (`bin/stop` stops it).",
            file=sys.stderr,
        )
    socket_dir = uri.split("host=", 1)[1]
    return {"NAME": "postgres", "USER": "postgres", "PASSWORD": "", "HOST": socket_dir, "PORT": ""}


def _postmaster(folder: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(folder) if (folder / "PG_VERSION").exists() else None
    return info if info is not None and info.is_running() else None


def is_running() -> bool:
    """True when the embedded PostgreSQL of `data_dir()` is running (read from its postmaster.pid)."""
    return _postmaster(data_dir()) is not None


def stop() -> bool:
    """Stop the embedded PostgreSQL of `data_dir()` (`pg_ctl stop -m fast`); False when it was not running.

    Open connections are closed by the server (tests or `bin/serve` still using it will see errors).
    """
    folder = data_dir()
    if _postmaster(folder) is None:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import pg_ctl

        user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None  # pgserver runs it so as root
        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=folder, user=user)
        except subprocess.CalledProcessError:
            if _postmaster(folder) is not None:  # someone else stopping it at the same moment is fine
                raise
    return True


if __name__ == "__main__":  # `python -m config.embedded_db status|stop` (bin/serve and bin/stop)
    import sys

    command = sys.argv[1] if len(sys.argv) > 1 else "status"
    if command == "status":
        print("running" if is_running() else "stopped")
    elif command == "stop":
        print(
            f"==> stopped the embedded PostgreSQL in {data_dir()}"
            if stop()
            else "==> the embedded PostgreSQL was not running"
        )
    else:
        sys.exit("usage: python -m config.embedded_db status|stop")
