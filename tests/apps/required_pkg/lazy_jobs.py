"""A submodule the package doesn't import itself: a worker imports it when a payload names one of
its jobs (it is under a COGWORKER_REQUIRE entry)."""

from __future__ import annotations

from cogworker import job


@job
def hello(name: str) -> str:
    return f"hello {name}"
