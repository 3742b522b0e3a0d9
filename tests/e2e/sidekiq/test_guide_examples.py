"""The Sidekiq guide's examples (docs/migrating/beside-sidekiq.md quotes
docs/examples/sidekiq/beside_sidekiq.py) run as the guide says, beside a real Sidekiq 6 in the mode:
Ruby pushes ReportJob by its class name and the swarm runs the Python job of that name; Python pushes
HardWorker (a ruby_job handle, and push_named) and Sidekiq runs the Ruby class, with the arguments as
given."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, wait_until
from tests.support.sidekiq import ruby
from tests.support.sidekiq_fleet import PEER_APP, Fleet
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "docs" / "examples" / "sidekiq"
MODULE = "beside_sidekiq"
# The guide's Ruby push, as written there.
RUBY_PUSH = 'Sidekiq::Client.push("class" => "ReportJob", "queue" => "reports", "args" => [42, "2026-11"])'


@pytest.fixture
def fleet(
    private_redis: RedisServer, swarms: SwarmRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Fleet]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    built = Fleet(
        private_redis,
        swarms,
        tmp_path,
        count=1,
        ruby_queues=("ruby_default",),
        COGWORKER_REQUIRE=MODULE,
        COGWORKER_QUEUES="reports",
        PYTHONPATH=os.pathsep.join((str(EXAMPLES), os.environ["PYTHONPATH"])),
    )
    try:
        yield built
    finally:
        built.close()


def test_ruby_pushes_a_python_job_by_class_name_and_python_pushes_a_ruby_class(fleet: Fleet) -> None:
    assert (ROOT / "docs" / "migrating" / "beside-sidekiq.md").read_text().count(RUBY_PUSH) == 1
    ruby(RUBY_PUSH, fleet.url, app=PEER_APP)
    wait_until(
        lambda: "report 2026-11 for account 42" in fleet.swarm.log_path.read_text(),
        timeout=15,
        message=f"ReportJob to run in Python:\n{fleet.swarm.tail()}",
    )

    examples = importlib.import_module(MODULE)
    assert examples.push_for_ruby() and examples.push_by_name()
    wait_until(
        lambda: sorted(fleet.client.lrange("guide:hard_worker", 0, -1)) == ["1 two", "3 four"],
        timeout=15,
        message=f"HardWorker to run in Ruby:\n{fleet.sidekiq.log_text()[-3000:]}",
    )
    # An acknowledgement rides on the next fetch, or goes out at the stop.
    assert fleet.sidekiq.stop() == 0
    assert fleet.swarm.stop() == 0
    assert fleet.leftovers() == {}
