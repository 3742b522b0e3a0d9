"""The `timeout_s` job option: checked at `@job` and `.set`, carried in the payload as a JSON number;
and the JobTimeout an async job's limit raises (api/time_limits.py)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
import redis

import cogworker
from cogworker import job
from cogworker.api.time_limits import JobTimeout, limit_for, with_limit


@job(timeout_s=2.5)
def limited(x: int) -> None:
    pass


@pytest.mark.parametrize("bad", [0, -1, True, "5", math.nan, math.inf, 1e12, [1]])
def test_a_bad_limit_is_refused_at_the_decorator_and_at_set(bad: Any) -> None:
    with pytest.raises(TypeError, match="timeout_s must be a number of seconds above 0"):
        job(timeout_s=bad)
    with pytest.raises(TypeError, match="timeout_s"):
        limited.set(timeout_s=bad)


def test_the_limit_travels_in_the_payload_as_a_number(r: redis.Redis, configured: object) -> None:
    limited.perform_async(1)
    limited.set(timeout_s=7).perform_async(2)
    limited.set(timeout_s=None).perform_async(3)  # None: no limit of its own (the worker's default applies)
    payloads = [json.loads(raw) for raw in reversed(r.lrange("cogworker:queue:default", 0, -1))]
    assert [p.get("timeout_s") for p in payloads] == [2.5, 7, None]


def test_job_timeout_is_public() -> None:
    assert cogworker.JobTimeout is JobTimeout and "JobTimeout" in cogworker.__all__
    assert issubclass(JobTimeout, Exception)


def test_the_payload_limit_wins_over_the_default() -> None:
    assert limit_for({"timeout_s": 3}, 10.0) == 3.0
    assert limit_for({}, 10.0) == 10.0
    assert limit_for({"timeout_s": -3}, None) is None


def test_an_async_body_past_its_limit_raises_job_timeout_and_its_own_timeout_error_stays_its_own() -> None:
    async def sleeps() -> None:
        await asyncio.sleep(5)

    async def own_timeout() -> None:
        raise TimeoutError("the job's own")

    with pytest.raises(JobTimeout, match=r"time limit of 0\.05s"):
        asyncio.run(with_limit(sleeps(), 0.05))
    with pytest.raises(TimeoutError, match="the job's own"):
        asyncio.run(with_limit(own_timeout(), 5))
    assert asyncio.run(with_limit(asyncio.sleep(0, result="ok"), 5)) == "ok"
