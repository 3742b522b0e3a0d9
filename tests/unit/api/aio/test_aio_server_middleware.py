"""The async forms of the built-in server middleware (api/aio_server.py), called as the loop calls
them, against a real Redis: a job that asked for neither status nor a unique claim costs no write,
and a tracked job's last failure is recorded as "failed", as the sync middleware records it."""

from __future__ import annotations

import asyncio

import pytest
import redis

from cogworker.api import aio_server
from cogworker.settings import Settings
from cogworker.store import keys


def _job(jid: str, **fields: object) -> dict[str, object]:
    return {"class": "tests.jobs.example", "jid": jid, "queue": "default", "args": [], **fields}


def test_a_job_without_status_runs_and_writes_no_status(r: redis.Redis, configured: Settings) -> None:
    ran: list[str] = []

    async def call_next() -> None:
        ran.append("body")

    asyncio.run(aio_server.on_run(_job("plain1"), call_next))
    assert ran == ["body"]
    assert not r.exists(keys.status("plain1"))


def test_a_tracked_jobs_last_failure_is_recorded_as_failed(r: redis.Redis, configured: Settings) -> None:
    async def call_next() -> None:
        raise ValueError("the last try")

    job = _job("tracked1", status=True, retry=False)
    with pytest.raises(ValueError, match="the last try"):
        asyncio.run(aio_server.on_run(job, call_next))
    written = r.hgetall(keys.status("tracked1"))
    assert written["status"] == "failed"
    assert written["error_class"] == "ValueError" and "the last try" in written["error_message"]
    assert 0 < r.pttl(keys.status("tracked1")) <= configured.status_ttl_s * 1000


def test_a_job_holding_no_unique_claim_runs_and_releases_nothing(
    r: redis.Redis, configured: Settings
) -> None:
    ran: list[str] = []

    async def call_next() -> None:
        ran.append("body")

    before = set(r.keys("*"))
    asyncio.run(aio_server.release_when_done(_job("plain2"), call_next))
    assert ran == ["body"]
    assert set(r.keys("*")) == before
