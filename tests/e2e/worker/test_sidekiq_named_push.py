"""Python pushes that real Sidekiq 6.4 runs, in the Sidekiq mode (bare keys): `cogworker.push_named`, a
`ruby_job` handle (at once and scheduled, through Sidekiq's poller) and `cogworker enqueue` in a fresh
interpreter configured only by the environment. Each Ruby job records its class and arguments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import cogworker
from cogworker.settings import Settings
from tests.support.daemon_env import run_cogworker
from tests.support.paths import APP_DIR
from tests.support.redis_server import RedisServer, wait_until
from tests.support.sidekiq import SidekiqProcess

pytestmark = pytest.mark.slow

PEER = APP_DIR / "sidekiq_peer.rb"
JOBS = APP_DIR / "sidekiq_push_jobs.rb"


@pytest.fixture
def mode6(settings: Settings) -> Iterator[Settings]:
    six = settings.model_copy(update={"sidekiq_compat": "6"})
    cogworker.configure(six)
    yield six
    cogworker.configure(settings)


def ran(r: redis.Redis) -> set[tuple[str, str]]:
    return {(cls, json.dumps(args)) for cls, args in (json.loads(raw) for raw in r.smembers("push:ran"))}


def test_sidekiq_runs_what_python_pushes_by_class_name(
    r: redis.Redis, redis_server: RedisServer, mode6: Settings, tmp_path: Path
) -> None:
    cogworker.push_named("HardWorker", [1, 2], queue="ruby")
    invoice = cogworker.ruby_job("Billing::InvoiceJob", queue="ruby")
    invoice.perform_async(7, "now")
    invoice.perform_in(1, 8, "later")
    done = run_cogworker(
        {"COGWORKER_REDIS_URL": redis_server.url, "COGWORKER_SIDEKIQ_COMPAT": "6"},
        "enqueue",
        "HardWorker",
        '[3, {"a": [4]}]',
        "--queue",
        "ruby",
    )
    assert done.returncode == 0, done.stderr
    assert r.llen("queue:ruby") == 3 and r.zcard("schedule") == 1
    expected = {
        ("HardWorker", "[1, 2]"),
        ("HardWorker", '[3, {"a": [4]}]'),
        ("Billing::InvoiceJob", '[7, "now"]'),
        ("Billing::InvoiceJob", '[8, "later"]'),
    }
    with SidekiqProcess(
        redis_server.url,
        tmp_path / "sidekiq.log",
        app=PEER,
        queues=("ruby",),
        env={"SIDEKIQ_JOBS": str(JOBS)},
    ) as sidekiq:
        wait_until(
            lambda: ran(r) == expected,
            timeout=60,
            message=f"Sidekiq ran the four jobs:\n{sidekiq.log_text()[-3000:]}",
        )
        assert sidekiq.stop() == 0
    log = sidekiq.log_text()
    assert "ArgumentError" not in log and "NameError" not in log and "Internal exception" not in log
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.llen("queue:ruby") == 0
    assert int(r.get("stat:processed") or 0) == 4
