"""The `memories-worker` console script (pyproject.toml `[project.scripts]`): its modules load under a Ctrl-C guard."""

from __future__ import annotations

import sys


def main() -> int | None:
    """Load `worker.cli` and run it; returns what its click group returns (the script passes it to `sys.exit`).

    A Ctrl-C while the worker's modules load (the anthropic SDK, anyio, httpx: about half a second) was a
    KeyboardInterrupt traceback. Nothing has been claimed then: one line on stderr and exit 0, as a worker
    stopped by SIGINT exits (worker.cli, "Exit status").
    """
    try:
        from worker.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("memories-worker: interrupted while starting; nothing was claimed.\n")
        sys.exit(0)
    return cli()


if __name__ == "__main__":
    sys.exit(main())
