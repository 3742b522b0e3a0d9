"""A module whose import has a side effect: it writes the file named by MARKER_ON_IMPORT. A worker
must never import it because a payload names it (tests/unit/test_security.py)."""

from __future__ import annotations

import os
from pathlib import Path

from cogworker import job

_path = os.environ.get("MARKER_ON_IMPORT")
if _path:
    Path(_path).write_text(f"imported by pid {os.getpid()}\n")


@job
def x() -> None:
    """Would run if the module were importable by payload."""
