"""rq's benchmark jobs: plain functions, enqueued by import path (rq needs no registration)."""

from __future__ import annotations

import jobkit


def noop() -> None:
    jobkit.mark_done()


def pickup(pushed_at: float) -> None:
    jobkit.record_pickup(pushed_at)


def sleeper(index: int, seconds: float) -> None:
    jobkit.sleep_job(index, seconds)
