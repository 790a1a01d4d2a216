"""Instructions per request of the hot endpoints in-process, counted by valgrind's callgrind (issue 17).

    .venv/bin/python bench/instructions.py [--endpoints note,file_create,...] [--requests 200] [--compare REF]
                                           [--front]

CPU time on a shared VM moves with its neighbours: the same in-process note measured 1.3 ms and 2.4 ms of
CPU within one hour on the reference machine, so a change worth 5 % cannot be seen in milliseconds.
Instruction counts do not move: each endpoint runs `bench/inprocess.py <endpoint> --callgrind` under
callgrind, which counts the client side's user-space instructions (Python, Django, DRF, psycopg; not the
kernel, not PostgreSQL) of the measured requests — twice, with N and 2N requests, so that the fixed cost
of switching the count on and off cancels out; repeated runs agree within about 1 %.
`--compare REF` runs the same at a git revision first (a temporary worktree of REF, measured with this
checkout's bench/inprocess.py) and prints both and their ratio. Takes one to three minutes per endpoint
and revision (callgrind runs Python ~50× slower). `--front`: through the ASGI front on an event loop
(`bench/inprocess.py --front`): the front's code and the thread hand-off counted too, gunicorn's not.
Needs valgrind (Debian's package); prints why and exits 0 without it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import table  # noqa: E402

ENDPOINTS = ["note", "file_create", "file_update", "wake", "zoom", "recall", "store_get"]
DEFAULT = ["note", "file_create", "file_update", "recall"]  # the endpoints of issue 17's goal lines
_COLLECTED = re.compile(r"Collected : (\d+)")
# Python runs ~50× slower under callgrind: a first request (imports, compiling queries) may take seconds,
# which the request deadline and statement timeouts would cut, and the connection would be replaced every
# DB_CONN_MAX_AGE seconds — every few hundred requests instead of every tens of thousands, each time with
# a new connection's set-up in the count. None of them is on the counted path of a request. recall's page
# budget is CPU time, which callgrind inflates the same way: a page would stop after a few entries.
SLOW = {
    "RECALL_PAGE_BUDGET": "600",
    "DB_REQUEST_DEADLINE": "600",
    "DB_STATEMENT_TIMEOUT": "600",
    "DB_LOCK_TIMEOUT": "600",
    "REQUEST_TIMEOUT": "900",
    "DB_CONN_MAX_AGE": "86400",
}


def instructions(tree: Path, endpoint: str, requests: int, *, front: bool = False) -> float:
    """Instructions per request of `endpoint` in the checkout `tree` (its code, this .venv).

    Two runs, of `requests` and of twice as many measured requests, after the same warm-up; the difference
    divided by `requests`. Switching the counting on and off from inside the process costs a fixed tens of
    millions of instructions (two subprocesses), which the difference cancels.
    """
    twice, once = _counted(tree, endpoint, 2 * requests, front), _counted(tree, endpoint, requests, front)
    return (twice - once) / requests


def _counted(tree: Path, endpoint: str, requests: int, front: bool) -> int:
    """Instructions callgrind counted while `requests` requests of `endpoint` ran (plus the switching)."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={scratch}/callgrind.out",
                sys.executable,
                str(tree / "bench" / "inprocess.py"),
                endpoint,
                "--requests",
                str(requests),
                "--callgrind",
                *(["--front"] if front else []),
            ],
            cwd=tree,
            capture_output=True,
            text=True,
            env={**os.environ, **SLOW},
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode or found is None:
        raise RuntimeError(f"{endpoint} at {tree}: exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", default=",".join(DEFAULT), help=f"comma-separated, of: {', '.join(ENDPOINTS)}")
    parser.add_argument("--requests", type=int, default=200, help="N: the runs measure N and 2N requests")
    parser.add_argument("--compare", help="a git revision to measure first, e.g. HEAD~3 or main")
    parser.add_argument("--front", action="store_true", help="through the ASGI front (bench/inprocess.py --front)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind); nothing measured")
        return
    endpoints = [name for name in args.endpoints.split(",") if name]
    unknown = sorted(set(endpoints) - set(ENDPOINTS))
    if unknown:
        parser.error(f"unknown endpoint(s): {', '.join(unknown)}")
    reference: dict[str, float] = {}
    if args.compare:
        with tempfile.TemporaryDirectory() as parent:
            tree = Path(parent) / "reference"
            add = ["git", "worktree", "add", "--detach", str(tree), args.compare]
            subprocess.run(add, cwd=ROOT, check=True, capture_output=True)
            # The harness is this checkout's (older ones lack --callgrind); the code it measures is REF's.
            shutil.copy(ROOT / "bench" / "inprocess.py", tree / "bench" / "inprocess.py")
            try:
                for endpoint in endpoints:
                    reference[endpoint] = instructions(tree, endpoint, args.requests, front=args.front)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
    rows = []
    for endpoint in endpoints:
        count = instructions(ROOT, endpoint, args.requests, front=args.front)
        row = [endpoint, f"{count:,.0f}"]
        if reference:
            row = [endpoint, f"{reference[endpoint]:,.0f}", f"{count:,.0f}", f"{count / reference[endpoint]:.3f}"]
        rows.append(row)
        print(f"  {endpoint}: {count:,.0f} instructions/request", flush=True)
    headers = ["endpoint", "instructions/request"]
    if reference:
        headers = ["endpoint", f"at {args.compare}", "now", "now / then"]
    print()
    print(table(headers, rows))


if __name__ == "__main__":
    main()
