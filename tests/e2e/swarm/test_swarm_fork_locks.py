"""A preloading swarm whose app runs a thread that holds one of cogworker's locks whenever a worker is
forked (tests/apps/fork_lock_app.py): each worker gets that lock free (docs/architecture.md, "Locks
across a fork") and runs a job that takes it. Inherited held, the worker hung: at its first log line
(structlog's lock), in its death-hook thread, or in the job."""

from __future__ import annotations

from collections.abc import Callable

import fork_lock_app
import pytest
import redis

from cogworker import exitcodes
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow


def unique_lock_released(r: redis.Redis) -> bool:
    return not r.keys("cogworker:unique:*")


# The lock the app holds -> (the job to push, what it leaves in test:done, and a check after it).
CASES: dict[str, tuple[Callable[[], object], list[str], Callable[[redis.Redis], bool]]] = {
    "structlog": (lambda: fork_lock_app.record.perform_async("ran"), ["ran"], lambda r: True),
    "death": (lambda: fork_lock_app.dies.perform_async("x"), ["died ['x']"], lambda r: True),
    "cancel": (lambda: fork_lock_app.cancels.perform_async("c"), ["c not_found"], lambda r: True),
    "callbacks": (lambda: fork_lock_app.watches_for_a_cancel.perform_async("w"), ["w"], lambda r: True),
    "unique": (lambda: fork_lock_app.unique_job.perform_async("u"), ["u"], unique_lock_released),
    "limiter": (lambda: fork_lock_app.limited.perform_async("l"), ["l"], lambda r: True),
}


@pytest.mark.parametrize("held", sorted(CASES))
def test_workers_forked_while_an_app_thread_holds_a_lock_run_jobs(
    swarms: SwarmRunner, r: redis.Redis, configured: object, held: str
) -> None:
    push, done, after = CASES[held]
    swarm = swarms.start(
        COGWORKER_REQUIRE="fork_lock_app", COGWORKER_PRELOAD="true", FORK_LOCK_HELD=held, COGWORKER_COUNT="2"
    )
    swarm.wait_ready(timeout=60)
    push()
    wait_until(lambda: r.lrange("test:done", 0, -1) == done, timeout=60, message=f"the job ({held})")
    wait_until(lambda: after(r), timeout=30, message=f"the job's end ({held})")
    assert swarm.stop() == exitcodes.OK
