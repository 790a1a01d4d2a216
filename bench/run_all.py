"""Run every benchmark in `bench/` one after the other and print their output (issue 9).

    .venv/bin/python bench/run_all.py [--quick] [--only note,wake,...] [--output bench/last-run.md]

Each benchmark creates and drops its own throw-away database (`bench_<name>`) on the configured server.
The whole suite takes about 11 minutes on the 2-core reference machine (`--quick` about 2; `delete` loads
a store of 5·10⁶ entries). With `--output`, the combined report (machine, load before/after, every table
and goal line) is also written to that file; paste the tables into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SUITE = {
    "note": ["note.py"],
    "wake": ["wake.py"],
    "nap": ["nap.py"],
    "nap_forgotten": ["nap.py", "--forgotten"],
    "recall": ["recall.py"],
    "files": ["files.py"],
    "queries": ["queries.py"],
    "import_0041": ["import_0041.py"],
    "mcp": ["mcp_calls.py"],
    "delete": ["delete.py"],  # a store of 5·10⁶ entries deleted within the request budget (its own goal line)
}
QUICK = {
    "note": ["--duration", "1.5"],
    "wake": ["--sizes", "1000,100000", "--rounds", "5"],
    "nap": ["--sizes", "1000,100000", "--rounds", "3"],
    "nap_forgotten": ["--sizes", "1000,100000", "--rounds", "3"],
    "recall": ["--rounds", "5"],
    "files": ["--duration", "1.5"],
    "queries": ["--large", "16384"],
    "import_0041": ["--records", "20000"],
    "mcp": ["--duration", "1", "--clients", "1", "--rounds", "100"],
    "delete": ["--sizes", "1000,100000"],
}


def uptime() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and shorter windows (a smoke run)")
    parser.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(SUITE))
    parser.add_argument("--output", help="also write the combined report to this file")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SUITE)
    unknown = sorted(set(names) - set(SUITE))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kb = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
    report = [
        f"# bench/run_all.py — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"{os.cpu_count()} CPUs, {mem_kb / 1024 / 1024:.0f} GiB, Python {platform.python_version()}, "
        f"{uptime()} at start{' (quick)' if args.quick else ''}",
    ]
    print("\n".join(report), flush=True)
    started = time.monotonic()
    failed = []
    for name in names:
        cmd = [sys.executable, str(HERE / SUITE[name][0]), *SUITE[name][1:], *(QUICK[name] if args.quick else [])]
        header = f"\n## {name}  ({' '.join(['bench/' + SUITE[name][0], *cmd[2:]])}; {uptime()})\n"
        print(header, flush=True)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        out = proc.stdout + (f"\n[stderr]\n{_ends(proc.stderr)}" if proc.returncode else "")
        print(out, flush=True)
        took = f"({name}: {time.monotonic() - t0:.0f} s, exit {proc.returncode})"
        print(took, flush=True)
        report += [header, "```", out.rstrip(), "```", took]
        if proc.returncode:
            failed.append(name)
    total = f"\nsuite: {time.monotonic() - started:.0f} s; {uptime()} at the end; failed: {', '.join(failed) or 'none'}"
    print(total)
    report.append(total)
    if args.output:
        Path(args.output).write_text("\n".join(report) + "\n")
    sys.exit(1 if failed else 0)


def _ends(text: str, keep: int = 3000) -> str:
    """`text` whole when short, else its first and last `keep` characters: a chained traceback names the
    first error at its start and the last at its end."""
    if len(text) <= 2 * keep:
        return text
    return f"{text[:keep]}\n[… {len(text) - 2 * keep:,} characters …]\n{text[-keep:]}"


if __name__ == "__main__":
    main()
