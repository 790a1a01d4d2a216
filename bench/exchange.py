"""Benchmark export → import → export (SPEC §8b, issue 20): rates in entries/s, peak memory, byte equality.

One command (embedded PostgreSQL unless DATABASE_URL is set; works in throw-away databases that are
dropped afterwards, so development data is never touched):

    .venv/bin/python bench/exchange.py [--entries 100000] [--files 500] [--versions 4] [--small] [--keep]

For each size (the full one, and with --small also a store a tenth of it, to show that memory does not grow
with the store) it builds, in `bench_exchange_src`, a store with N entries, summaries at every level (some
forgotten and rebuilt, so invalidated rows sit beside live ones), redacted entries (hence redacted
summaries), F file memories with V versions each (renamed, deleted, redacted versions) and readers; then:

1. `manage.py export_store` in a child process  → file A    (service export, timed, peak RSS)
2. a fresh database: migrate, `manage.py import_store A --create-missing-users` (timed, peak RSS)
3. `manage.py export_store` of the imported store → file B; A and B must be identical apart from the end
   line's `exported_at` (ids are kept on a fresh server)
4. another fresh database behind gunicorn: `rog memories import A` (the resumable HTTP import, timed) and
   `rog memories export` (the HTTP export, timed) → file C, identical to A likewise.

Building the store is not timed. export/import rates use the commands' own timing (the work, without
the child's start-up); the HTTP rates are wall-clock of the `rog` process (it has no Django to start).
Peak RSS is the child process's (`wait4`): Python, Django and the libraries included.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from bench.common import bench_database, django_setup, gunicorn  # noqa: E402

django_setup()

ROG = shutil.which("rog", path=str(Path(sys.executable).parent)) or "rog"


# Runs a Python script (manage.py, the rog console script) and reports the process's own peak RSS at exit:
# VmHWM of /proc/self/status (getrusage's ru_maxrss would include the bench process's size at fork time).
_PEAK = """
import atexit, runpy, sys


def _peak():
    with open("/proc/self/status") as status:
        hwm = next(line for line in status if line.startswith("VmHWM:"))
    sys.stderr.write("\\nPEAK_RSS_KB %s\\n" % hwm.split()[1])


atexit.register(_peak)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def child(args: list[str], *, db: str, env: dict | None = None, stdout=None) -> tuple[float, float, str]:
    """Run the Python script `args` with Django pointed at `db`; returns (seconds, peak RSS MiB, stdout text)."""
    full_env = dict(os.environ, DJANGO_SETTINGS_MODULE="bench.settings", BENCH_DB_NAME=db, **(env or {}))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args],
        cwd=ROOT,
        env=full_env,
        stdout=stdout or subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=False,
    )
    seconds = time.monotonic() - started
    err = done.stderr.decode()
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{err[-3000:]}")
    peak = re.findall(r"PEAK_RSS_KB (\d+)", err)
    return seconds, int(peak[-1]) / 1024 if peak else float("nan"), (done.stdout or b"").decode()


def work_seconds(output: str) -> float:
    """The command's own timing ("… in 12.34 s."): the work, without the child's Python/Django start-up."""
    return float(re.search(r" in ([0-9.]+) s\.", output).group(1))


def manage(*args: str, db: str, **kwargs):
    return child(["manage.py", *args], db=db, **kwargs)


def build(entries: int, files: int, versions: int):
    """Build the store in the current (source) database; returns (store, owner handle, other handles)."""
    from accounts.models import User
    from tests.exchange.builder import build_rich_store

    owner = User.objects.create_user("bench-owner")
    others = [User.objects.create_user(f"bench-agent-{i}") for i in range(9)]
    readers = [User.objects.create_user(f"bench-reader-{i}") for i in range(3)]
    step = max(entries // 10, 1)
    redact = tuple(range(step // 2, entries, step))[:10]
    store = build_rich_store(
        owner,
        others=others,
        readers=readers,
        entries=entries,
        files=files,
        versions_per_file=versions,
        redact=redact,
        fast=True,
    )
    return store, [u.handle for u in (owner, *others, *readers)]


def fresh_database(name: str) -> None:
    """(Re)create database `name` on the benchmark's server and migrate it (in a child process)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    manage("migrate", "--noinput", "-v", "0", db=name)


def drop_database(name: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def same_apart_from_export_time(a: Path, b: Path) -> bool:
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            la, lb = fa.readline(), fb.readline()
            if la.startswith(b'{"type":"end"') and lb.startswith(b'{"type":"end"'):
                ea, eb = json.loads(la), json.loads(lb)
                ea.pop("exported_at"), eb.pop("exported_at")
                return ea == eb and not fa.read(1) and not fb.read(1)
            if la != lb:
                return False
            if not la:
                return False


def run_size(entries: int, files: int, versions: int, work: Path, keep: bool) -> dict:
    from django.db import connection

    with bench_database("exchange_src", keep=keep) as src:
        t0 = time.monotonic()
        store, handles = build(entries, files, versions)
        built = time.monotonic() - t0
        counts = {"entries": store.entry_count, "memories": store.memory_count}
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM memories_summary WHERE store_id = %s", [store.pk])
            counts["summaries"] = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM versions_version WHERE store_id = %s", [store.pk])
            counts["versions"] = cursor.fetchone()[0]
        connection.close()
        file_a, file_b, file_c = work / "a.jsonl", work / "b.jsonl", work / "c.jsonl"
        export_wall, export_rss, out = manage("export_store", str(store.pk), "-o", str(file_a), db=src)
        export_s = work_seconds(out)
        dst, http_db = "bench_exchange_dst", "bench_exchange_http"
        try:
            fresh_database(dst)
            import_wall, import_rss, out = manage("import_store", str(file_a), "--create-missing-users", db=dst)
            import_s = work_seconds(out)
            manage("export_store", str(store.pk), "-o", str(file_b), db=dst)
            identical = same_apart_from_export_time(file_a, file_b)
            fresh_database(http_db)
            token = None
            for handle in handles:  # the HTTP import needs the users (active) and the owner's token
                _, _, out = manage("create_token", "--handle", handle, "--create-user", db=http_db)
                token = token or out.strip().splitlines()[-1].split()[-1]
            with gunicorn(http_db) as server:
                env = {"ROG_API_URL": f"http://127.0.0.1:{server.port}", "ROG_TOKEN": token}
                http_import_s, rog_import_rss, _ = child([ROG, "memories", "import", str(file_a)], db=http_db, env=env)
                with file_c.open("wb") as out:
                    http_export_s, rog_export_rss, _ = child(
                        [ROG, "memories", "export", "--store", str(store.pk)], db=http_db, env=env, stdout=out
                    )
            http_identical = same_apart_from_export_time(file_a, file_c)
        finally:
            if not keep:
                drop_database(dst)
                drop_database(http_db)
    n = counts["entries"]
    return {
        **counts,
        "bytes": file_a.stat().st_size,
        "build_s": built,
        "export_s": export_s,
        "export_wall_s": export_wall,
        "export_rate": n / export_s,
        "export_rss": export_rss,
        "import_s": import_s,
        "import_wall_s": import_wall,
        "import_rate": n / import_s,
        "import_rss": import_rss,
        "identical": identical,
        "http_import_s": http_import_s,
        "http_import_rate": n / http_import_s,
        "http_export_s": http_export_s,
        "http_export_rate": n / http_export_s,
        "rog_import_rss": rog_import_rss,
        "rog_export_rss": rog_export_rss,
        "http_identical": http_identical,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--small", action="store_true", help="Also run a store a tenth of the size (memory check).")
    parser.add_argument("--keep", action="store_true", help="Keep the databases.")
    args = parser.parse_args()
    sizes = [(args.entries, args.files)]
    if args.small:
        sizes.insert(0, (max(args.entries // 10, 16), max(args.files // 10, 1)))
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-exchange-") as tmp:
        for entries, files in sizes:
            result = run_size(entries, files, args.versions, Path(tmp), args.keep)
            results.append(result)
            print(json.dumps(result, indent=1))
    print()
    print(
        "| entries | summaries | files / versions | file MB | export entries/s | export peak RSS | "
        "import entries/s | import peak RSS | HTTP import entries/s (rog RSS) | HTTP export entries/s (rog RSS) "
        "| round trip |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        same = "identical" if r["identical"] and r["http_identical"] else "**DIFFERENT**"
        print(
            f"| {r['entries']:,} | {r['summaries']:,} | {r['memories']} / {r['versions']:,} | {r['bytes'] / 1e6:.1f} | "
            f"{r['export_rate']:,.0f} ({r['export_s']:.1f} s) | {r['export_rss']:.0f} MiB | "
            f"{r['import_rate']:,.0f} ({r['import_s']:.1f} s) | {r['import_rss']:.0f} MiB | "
            f"{r['http_import_rate']:,.0f} ({r['http_import_s']:.1f} s, {r['rog_import_rss']:.0f} MiB) | "
            f"{r['http_export_rate']:,.0f} ({r['http_export_s']:.1f} s, {r['rog_export_rss']:.0f} MiB) | {same} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
