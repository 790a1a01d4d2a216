"""Instructions per request of the hot endpoints in-process, counted by valgrind's callgrind (issue 17).

    .venv/bin/python bench/instructions.py [--endpoints note,file_create,...] [--requests 300] [--compare REF]

CPU time on a shared VM moves with its neighbours: the same in-process note measured 1.3 ms and 2.4 ms of
CPU within one hour on the reference machine, so a change worth 5 % cannot be seen in milliseconds.
Instruction counts do not move: each endpoint runs `bench/inprocess.py <endpoint> --callgrind` under
callgrind, which counts the client side's user-space instructions (Python, Django, DRF, psycopg; not the
kernel, not PostgreSQL) of exactly the measured requests; repeated runs agree within about 0.5 %.
`--compare REF` runs the same at a git revision first (a temporary worktree of REF, measured with this
checkout's bench/inprocess.py) and prints both and their ratio. Takes about a minute per endpoint and
revision (callgrind runs Python ~50× slower).
Needs valgrind (Debian's package); prints why and exits 0 without it.
"""

from __future__ import annotations

import argparse
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
_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(tree: Path, endpoint: str, requests: int) -> float:
    """Instructions per request of `endpoint` in the checkout `tree` (its bench/inprocess.py, this .venv)."""
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
            ],
            cwd=tree,
            capture_output=True,
            text=True,
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode or found is None:
        raise RuntimeError(f"{endpoint} at {tree}: exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return int(found.group(1)) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS))
    parser.add_argument("--requests", type=int, default=300, help="measured requests per endpoint (after 300 warm-up)")
    parser.add_argument("--compare", help="a git revision to measure first, e.g. HEAD~3 or main")
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
                    reference[endpoint] = instructions(tree, endpoint, args.requests)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
    rows = []
    for endpoint in endpoints:
        count = instructions(ROOT, endpoint, args.requests)
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
