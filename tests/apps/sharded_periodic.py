"""A periodic entry firing every second, for the sharded layout's periodic tests
(tests/e2e/sharded/test_periodic.py). Its name and queue come from the environment
(SHARDED_PERIODIC_NAME, SHARDED_PERIODIC_QUEUE; SHARDED_PERIODIC_UNTIL_EXECUTED=1 sets until_executed),
so a test picks the queue partition's master and runs two deployments' entries side by side. A server
middleware records each run in the file SHARDED_TEST_OUT names, outside the cluster under test:
"<entry> <slot> <jid> <pid>"."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from line_sink import append_line

from cogworker import job, periodic, server_chain


@periodic(
    "* * * * * *",
    name=os.environ.get("SHARDED_PERIODIC_NAME", "sharded-tick"),
    queue=os.environ.get("SHARDED_PERIODIC_QUEUE", "ptick"),
    until_executed=os.environ.get("SHARDED_PERIODIC_UNTIL_EXECUTED") == "1",
)
@job(queue="ptick")
def tick() -> None:
    pass


def record_run(job: dict[str, Any], call_next: Callable[[], None]) -> None:
    call_next()
    if job.get("periodic_name"):
        line = f"{job['periodic_name']} {job['periodic_slot']} {job['jid']} {os.getpid()}"
        append_line(os.environ["SHARDED_TEST_OUT"], line)


server_chain.add(record_run)
