"""The migration guides' examples (docs/migrating/*.md quote docs/examples/migrating/*.py) run as the
guides say: each module is a job module a real `cogworker run` imports (COGWORKER_REQUIRE), and its
push-side functions are called from this process against the suite's redis-server. A guide's claim
about a call (a chain passing results, a scheduled push, a death hook, a batch callback, a testing
mode) is checked here, so an example can't drift from what cogworker does."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from types import ModuleType

import pytest
import redis

import cogworker
from cogworker import codec
from cogworker.settings import Settings
from tests.support.paths import ROOT
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "docs" / "examples" / "migrating"
# Every example file, each named by its guide and run by one test below.
GUIDES = {
    "celery": EXAMPLES / "from_celery.py",
    "rq": EXAMPLES / "from_rq.py",
    "dramatiq": EXAMPLES / "from_dramatiq.py",
    "sidekiq": EXAMPLES / "from_sidekiq.py",
}
QUEUES = "critical,default,mail,emails,maintenance"
SOURCED_BLOCK = re.compile(r"<!-- from (\S+) -->\n```python\n(.*?)```", re.S)


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Workers import the examples by their module names, as an app's workers would from its folder.
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(EXAMPLES), os.environ.get("PYTHONPATH", ""))))
    yield


def example(guide: str) -> ModuleType:
    path = GUIDES[guide]
    assert path.exists(), f"the {guide} guide's example is gone: {path}"
    return importlib.import_module(path.stem)


def start_worker(workers: WorkerPool, guide: str) -> Worker:
    return workers.start(COGWORKER_REQUIRE=GUIDES[guide].stem, COGWORKER_QUEUES=QUEUES)


def scheduled(r: redis.Redis, jid: str | None) -> dict[str, object]:
    """The payload of `jid` in the schedule set (the test fails if it isn't there)."""
    entries = [codec.loads(raw) for raw in r.zrange("cogworker:schedule", 0, -1)]
    found = [entry for entry in entries if entry["jid"] == jid]
    assert found, f"{jid} is not in the schedule set: {entries}"
    return dict(found[0])


def test_each_guide_quotes_its_own_example() -> None:
    for guide, path in GUIDES.items():
        page = (ROOT / "docs" / "migrating" / f"{guide}.md").read_text()
        quoted = SOURCED_BLOCK.findall(page)
        assert quoted, f"docs/migrating/{guide}.md quotes no example"
        for source, block in quoted:
            assert ROOT / source == path, f"{guide}.md quotes {source}, not its example {path.name}"
            assert block in path.read_text(), f"{guide}.md shows a block that is not in {path.name}"


def test_the_celery_port(examples: None, r: redis.Redis, configured: Settings, workers: WorkerPool) -> None:
    module = example("celery")
    start_worker(workers, "celery")
    jid = module.add.perform_async(2, 3)
    assert cogworker.result(jid, timeout=30) == 5
    # A chord: the group's results, in order, are the next step's first argument.
    pushed = module.sum_of_sums()
    assert pushed is not None
    assert cogworker.result(pushed.jids[-1], timeout=30) == 10
    later = module.checkout(7)
    entry = scheduled(r, later)
    assert entry["class"] == "from_celery.send_receipt" and entry["queue"] == "mail"
    assert entry["expires_in"] == 3600


def test_the_rq_port(examples: None, r: redis.Redis, configured: Settings, workers: WorkerPool) -> None:
    module = example("rq")
    assert module.counts_inline("one two three four") == 4  # no worker: the testing mode runs it
    start_worker(workers, "rq")
    jid = module.enqueue("one two three")
    assert cogworker.result(jid, timeout=30) == 3
    wait_until(lambda: cogworker.status(jid) == "complete", timeout=10, message="the status complete")
    pushed = module.count_then_shout("hello world")
    assert pushed is not None
    assert cogworker.result(pushed.jids[-1], timeout=30) == "HELLO WORLD (2 words)"
    assert scheduled(r, module.enqueue_later("later"))["args"] == ["later"]


def test_the_dramatiq_port(examples: None, r: redis.Redis, configured: Settings, workers: WorkerPool) -> None:
    module = example("dramatiq")
    assert module.emails_in_a_test() == ["ada@example.com"]
    start_worker(workers, "dramatiq")
    pushed = module.normalize_then_send("  Ada@Example.com ")
    assert pushed is not None
    assert cogworker.result(pushed.jids[-1], timeout=30) == "sent to ada@example.com"
    assert scheduled(r, module.send_later("bob@example.com"))["queue"] == "emails"


def test_the_sidekiq_port(examples: None, r: redis.Redis, configured: Settings, workers: WorkerPool) -> None:
    module = example("sidekiq")
    # The job's name is the Ruby class's: a Sidekiq process could run the same payload.
    jid = module.hard_job.perform_async("first", 1)
    [raw] = r.lrange("cogworker:queue:critical", 0, -1)
    payload = codec.loads(raw)
    assert payload["class"] == "HardJob" and payload["jid"] == jid and payload["args"] == ["first", 1]
    worker = start_worker(workers, "sidekiq")
    bid = module.import_shop(42, 3)
    wait_until(
        lambda: "shop 42: 3 of 3 rows imported" in worker.log_text(),
        timeout=30,
        message="the batch's on_complete callback",
    )
    status = cogworker.batch_status(bid)
    assert status is not None and status.total == 3 and status.failed == 0
    died = module.charge.perform_async(7)
    wait_until(
        lambda: (
            f"died: from_sidekiq.charge {died} RuntimeError: card declined for order 7" in worker.log_text()
        ),
        timeout=30,
        message="the on_death hook's line",
    )
    assert "hard work: first x 1" in worker.log_text()
