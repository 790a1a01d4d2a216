"""The `rog` console script (pyproject.toml `[project.scripts]`): rog's modules are loaded under a Ctrl-C guard."""

from __future__ import annotations

import sys


def main() -> int | None:
    """Load `rog.cli` and run it; returns what its click group returns (the script passes it to `sys.exit`).

    A Ctrl-C while rog's modules load (httpx, click, jmespath: about a tenth of a second) was a
    KeyboardInterrupt traceback (helper-102). It is rog's `interrupted` error object on stderr and exit 130,
    like every other interruption, with nothing done.
    """
    try:
        from rog.cli import main as cli
    except KeyboardInterrupt:
        from rog.common import fail_interrupted

        fail_interrupted("Nothing was done.")
    return cli()


if __name__ == "__main__":
    sys.exit(main())
