"""Sentry from a real `cogworker run` worker with the real sentry-sdk (tests/apps/sentry_app.py),
sending to a local endpoint that records envelopes: which failures are reported (by default only a
job's last, the one not retried), what an event says about the job, and that denylisted arguments
never leave the worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sentry_jobs

from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer, wait_until
from tests.support.sentry_endpoint import SentryEndpoint
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import Worker, WorkerPool

SECRETS = ("4111-1111-1111-1111", "hunter2", "tok-123")


@pytest.fixture
def sentry() -> Iterator[SentryEndpoint]:
    endpoint = SentryEndpoint()
    try:
        yield endpoint
    finally:
        endpoint.close()


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def start_worker(workers: WorkerPool, sentry: SentryEndpoint, **env: str) -> Worker:
    worker = workers.start(
        COGWORKER_REQUIRE="sentry_app",
        COGWORKER_QUEUES="reported",
        COGWORKER_POLL_INTERVAL_S="0.1",
        SENTRY_DSN=sentry.dsn,
        **env,
    )
    worker.identity(timeout=30)
    return worker


def job_events(sentry: SentryEndpoint) -> list[dict[str, Any]]:
    """The events about a job (not, say, one a library logged at error level)."""
    return [e for e in sentry.events() if "cogworker" in e.get("contexts", {})]


def events_of(sentry: SentryEndpoint, jid: str) -> list[dict[str, Any]]:
    return [e for e in job_events(sentry) if e["contexts"]["cogworker"]["jid"] == jid]


def charge() -> str:
    return str(
        sentry_jobs.charge.perform_async(
            SECRETS[0], 5, password=SECRETS[1], meta={"token": SECRETS[2], "note": "kept"}
        )
    )


def test_only_the_last_failure_is_reported_with_the_job_and_its_arguments_scrubbed(
    r: redis.Redis, configured: object, workers: WorkerPool, sentry: SentryEndpoint
) -> None:
    sentry_jobs.fine.perform_async("ok")  # first, on the one job thread the others run on after it
    charged = charge()  # retry=1: fails, is retried at once, fails again: dead
    once = sentry_jobs.once.perform_async("only")  # retry=False: dead at once
    worker = start_worker(workers, sentry, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.zcard("cogworker:dead") == 2, timeout=30, message="two dead jobs")
    wait_until(lambda: len(job_events(sentry)) >= 2, timeout=30, message="two events")
    assert worker.stop() == 0  # the SDK flushes at exit: nothing more was waiting to be sent
    [event] = events_of(sentry, charged)
    assert event["contexts"]["cogworker"] == {
        "job": "sentry_jobs.charge",
        "jid": charged,
        "queue": "reported",
        "retry_count": 0,
        "will_retry": False,
        "arguments": {
            "card_number": "[Filtered]",
            "amount": 5,
            "password": "[Filtered]",
            "meta": {"token": "[Filtered]", "note": "kept"},
        },
    }
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ValueError", "declined: 5")
    assert exception["mechanism"] == {"type": "cogworker", "handled": False}
    assert event["transaction"] == "sentry_jobs.charge"
    assert {k: v for k, v in event["tags"].items() if k.startswith("cogworker.")} == {
        "cogworker.job": "sentry_jobs.charge",
        "cogworker.queue": "reported",
        "cogworker.will_retry": "no",
    }
    [frame] = [f for f in exception["stacktrace"]["frames"] if f["function"] == "charge"]
    assert frame["vars"]["card_number"] == "[Filtered]" and frame["vars"]["amount"] == "5"
    [event] = events_of(sentry, str(once))
    assert event["contexts"]["cogworker"]["arguments"] == {"note": "only"}
    assert event["contexts"]["cogworker"]["retry_count"] is None
    assert len(job_events(sentry)) == 2  # `fine` succeeded; charge's first attempt was retried
    for event in job_events(sentry):  # each job had its own scope: nothing `fine` left behind
        assert "left_by" not in event["tags"]
        assert "left by ok" not in str(event.get("breadcrumbs"))
    sent = b"".join(sentry.bodies)
    assert not [secret for secret in SECRETS if secret.encode() in sent]


def test_every_attempt_when_configured(
    r: redis.Redis, configured: object, workers: WorkerPool, sentry: SentryEndpoint
) -> None:
    charged = charge()
    start_worker(workers, sentry, SENTRY_EVERY_ATTEMPT="1")
    events = wait_until(lambda: len(found := events_of(sentry, charged)) == 2 and found, timeout=30)
    attempts = [
        (e["contexts"]["cogworker"]["retry_count"], e["tags"]["cogworker.will_retry"]) for e in events
    ]
    assert attempts == [(None, "yes"), (0, "no")]
    assert not [secret for secret in SECRETS if secret.encode() in b"".join(sentry.bodies)]


def test_first_call_a_fresh_process_configured_by_env_reports_a_failure(
    r: redis.Redis, redis_server: Any, sentry: SentryEndpoint
) -> None:
    """The app module in a fresh interpreter (DSN and cogworker settings from env only), its job run
    through the real middleware chain by the inline testing mode."""
    out = first_call(
        """
        import cogworker.testing, sentry_app, sentry_jobs, sentry_sdk
        with cogworker.testing.inline():
            try:
                sentry_jobs.once.perform_async("first")
            except KeyError:
                print("raised")
        sentry_sdk.flush(10)
        """,
        redis_server.url,
        COGWORKER_REQUIRE="sentry_app",
        SENTRY_DSN=sentry.dsn,
    )
    assert out == "raised"
    [event] = job_events(sentry)
    assert event["contexts"]["cogworker"]["job"] == "sentry_jobs.once"
    assert event["contexts"]["cogworker"]["will_retry"] is False


def test_a_preloading_swarm_reports_from_its_children(
    r: redis.Redis, configured: object, swarms: SwarmRunner, sentry: SentryEndpoint
) -> None:
    """sentry_sdk.init run once in the fork server (COGWORKER_PRELOAD): each forked child sends."""
    jids = [str(sentry_jobs.once.perform_async(f"n{i}")) for i in range(4)]
    swarm = swarms.start(
        COGWORKER_REQUIRE="sentry_app",
        COGWORKER_QUEUES="reported",
        COGWORKER_PRELOAD="true",
        SENTRY_DSN=sentry.dsn,
    )
    swarm.wait_ready(timeout=60)
    wait_until(lambda: len(job_events(sentry)) == 4, timeout=30, message="four events")
    assert sorted(e["contexts"]["cogworker"]["jid"] for e in job_events(sentry)) == sorted(jids)
    assert swarm.stop() == 0
