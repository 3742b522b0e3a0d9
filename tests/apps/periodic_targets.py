"""Plain jobs that tests/unit/api/test_periodic.py schedules with periodic entries it builds itself."""

from __future__ import annotations

from cogworker import job


@job
def rollup(*args: object, **kwargs: object) -> None:
    pass


@job(retry=1)
def failing_rollup() -> None:
    raise ValueError("rollup failed")


@job(unique="until_executed")
def unique_rollup() -> None:
    pass
