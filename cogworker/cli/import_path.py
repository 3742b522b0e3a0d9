"""The working directory on the import path, for the commands that import the user's app (`run`,
`enqueue`). Apart from cli/common.py, which imports Redis and the settings model: `cogworker run` starts
without either (cli/run_fast.py)."""

from __future__ import annotations

import os
import sys


def cwd_first_on_path() -> None:
    """As `python -m` and a swarm's fork server have it: the working directory first on sys.path, so
    the app beside it is importable by `run` and `enqueue` (a console script's sys.path[0] is its
    bin/ directory)."""
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
