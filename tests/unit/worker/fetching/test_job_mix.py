"""How many jobs a fetch takes when sync and async jobs share a process (worker/fetching/job_mix.py)."""

from __future__ import annotations

import async_jobs  # registers async jobs under "async_jobs"
import demo_jobs

from cogworker.worker.fetching.job_mix import JobMix

SYNC_ONLY = ("demo_jobs",)
MIXED = ("demo_jobs", "async_jobs")


def test_a_process_without_async_jobs_fetches_exactly_its_free_threads() -> None:
    """async_jobs is registered in this process, but not under this worker's COGWORKER_REQUIRE."""
    assert async_jobs.marker.is_async and not demo_jobs.record.is_async
    mix = JobMix(10, 100, SYNC_ONLY)
    assert [mix.room(free, 100) for free in (10, 3, 0, -2)] == [10, 3, 0, 0]
    assert mix.share == 0.0


def test_async_only_traffic_fills_the_loop_and_then_waits() -> None:
    mix = JobMix(10, 100, MIXED)
    mix.observe(200, 200)
    assert mix.share == 0.98
    assert mix.room(10, 100) == 110  # every free slot: nearly all of them will be async
    assert mix.room(10, 0) == 10  # the loop is full: a few may wait for it (a tenth, plus one)...
    assert mix.room(10, -11) == 0  # ...and no more once that many wait


def test_a_full_kind_bounds_how_many_of_its_jobs_wait() -> None:
    mix = JobMix(10, 100, MIXED)
    mix.observe(50, 100)  # an even mix
    # Threads busy, loop idle: fetch a little for the loop, since about half will be sync and wait.
    assert 0 < mix.room(0, 100) <= 2 * (1 + 10 // 10)
    # Sync jobs already wait up to the limit (a tenth of the threads, plus one): fetch nothing.
    assert mix.room(-2, 100) == 0
    # Both kinds free: enough for both.
    assert mix.room(10, 100) >= 20


def test_the_mix_follows_the_traffic() -> None:
    mix = JobMix(10, 100, MIXED)
    mix.observe(0, 0)
    assert mix.share == 0.0  # nothing seen yet
    # Async jobs are registered, but nothing says what the queue holds: no more than either kind can
    # start now (an even mix was assumed once: 24 jobs for 10 threads, all sync, 14 of them waiting).
    assert [mix.room(10, 100), mix.room(10, 3), mix.room(0, 100), mix.room(-1, 5)] == [10, 3, 0, 0]
    mix.observe(0, 100)
    assert mix.share == 0.02
    assert mix.room(10, 100) == 12  # about the free threads, plus the few that may wait
