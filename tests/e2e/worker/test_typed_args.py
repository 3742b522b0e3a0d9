"""Typed arguments run by a real `cogworker run` worker: a job pushed with a pydantic model, a
dataclass, an Enum, a UUID, a Decimal and datetimes gets them back rebuilt; a payload that no longer
fits its annotations (the model changed between the push and the run) fails with
cogworker.InvalidArguments naming the field, counted, to retry; with `discard_on` to dead at once."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import redis
import typed_jobs

import cogworker
from cogworker.api import client
from cogworker.settings import Settings
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

APP = {"COGWORKER_REQUIRE": "typed_jobs", "COGWORKER_QUEUES": "typed"}
ORDER = typed_jobs.Order(
    id=uuid.uuid4(), total=Decimal("99.99"), ship_to=typed_jobs.Address(street="2 High St", zip="75001")
)
WINDOW = typed_jobs.Window(
    start=dt.datetime(2026, 5, 1, 8, tzinfo=dt.UTC), end=dt.datetime(2026, 5, 1, 20, tzinfo=dt.UTC)
)
# What an older client wrote before `Address.zip` was added to the model.
OLD_ORDER = {"id": str(uuid.uuid4()), "total": "5", "ship_to": {"street": "3 Low St"}}


def test_a_worker_runs_typed_jobs_and_files_payloads_that_no_longer_fit(
    r: redis.Redis, configured: Settings, workers: WorkerPool
) -> None:
    jid = typed_jobs.ship.perform_async(ORDER, WINDOW, speed=typed_jobs.Speed.EXPRESS, note="x")
    plain = typed_jobs.plain.perform_async(7, ["a", "b"])
    stale = client.push(
        "typed_jobs.ship",
        [OLD_ORDER, {"start": "2026-05-01T08:00:00Z", "end": "2026-05-01T09:00:00Z"}],
        {},
        queue="typed",
        options={"retry": 1},
    )
    strict = client.push("typed_jobs.ship_strict", [OLD_ORDER], {}, queue="typed", options={"retry": 3})
    worker = workers.start(**APP)
    assert cogworker.result(str(jid), timeout=30) == {
        "order": "Order",
        "zip": "75001",
        "total": "100.00",
        "id_version": 4,
        "hours": 12.0,
        "speed": "EXPRESS",
        "note": "x",
    }
    assert cogworker.result(str(plain), timeout=30) == [7, ["a", "b"]]

    [retrying] = wait_until(lambda: r.zrange("cogworker:retry", 0, -1), timeout=30, message="retry entry")
    entry = json.loads(retrying)
    assert entry["jid"] == stale
    assert entry["error_class"] == "cogworker.InvalidArguments"
    assert entry["error_message"] == "args[0]['ship_to']['zip']: Field required"
    assert entry["args"][0] == OLD_ORDER  # filed as it came, for whoever fixes it

    [dead] = wait_until(lambda: r.zrange("cogworker:dead", 0, -1), timeout=30, message="dead entry")
    assert json.loads(dead)["jid"] == strict
    assert json.loads(dead)["error_class"] == "cogworker.InvalidArguments"
    wait_until(lambda: r.get("cogworker:stat:failed") == "2", timeout=10, message="both failures counted")
    fails = wait_until(
        lambda: len(found := worker.events_named("job_fail")) == 2 and found, timeout=10, message="2 logged"
    )
    assert {e["to"] for e in fails} == {"retry", "dead"}
    assert all("InvalidArguments" in e["error"] for e in fails)
