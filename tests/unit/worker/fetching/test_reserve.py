"""The reserve (cogworker/worker/fetching/reserve.py): extra jobs held only while jobs are short."""

from __future__ import annotations

from cogworker.worker.fetching.reserve import SHORT_JOB_S, Reserve


def test_nothing_extra_until_jobs_prove_short() -> None:
    reserve = Reserve(4)
    assert reserve.extra == 0
    for _ in range(40):
        reserve.observe(SHORT_JOB_S / 10)
    assert reserve.extra == 4


def test_long_jobs_take_the_reserve_away_within_a_few_jobs() -> None:
    reserve = Reserve(4)
    for _ in range(60):
        reserve.observe(0.0)
    assert reserve.extra == 4
    for _ in range(3):
        reserve.observe(1.0)  # three one-second jobs: a held job could wait a second
    assert reserve.extra == 0
