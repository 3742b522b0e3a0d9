"""A package listed in COGWORKER_REQUIRE by tests: its submodules may be imported on demand."""

import os
from pathlib import Path


def __getattr__(name: str) -> object:
    """A lazy loader, as some packages have: attribute access runs code. Resolving a job name must
    not reach it (tests/unit/test_security.py)."""
    marker = os.environ.get("MARKER_ON_GETATTR")
    if marker:
        Path(marker).write_text(name)
    raise AttributeError(name)
