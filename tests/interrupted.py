"""A program run with the import of one module interrupted, as a Ctrl-C lands while it loads (no Django here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PRELUDE = """
import builtins, sys
load = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name == {module!r}:
        raise KeyboardInterrupt
    return load(name, *args, **kwargs)
builtins.__import__ = interrupted
"""


def run_with_import_interrupted(module: str, program: str, *args: str, cwd: Path | None = None):
    """Run the Python source `program` (with `args` as `sys.argv[1:]`) in a new interpreter whose import of
    `module` raises KeyboardInterrupt; returns the `subprocess.CompletedProcess` (stdout and stderr as bytes)."""
    source = _PRELUDE.format(module=module) + program
    return subprocess.run([sys.executable, "-c", source, *args], capture_output=True, timeout=60, cwd=cwd)
