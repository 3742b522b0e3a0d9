"""A Python job with a Ruby-style name, for the tests of pushes by class name (tests/unit/cli)."""

from __future__ import annotations

import cogworker


@cogworker.job(name="PyWorker", queue="python_side", retry=4)
def py_worker(n: int) -> None:
    del n
