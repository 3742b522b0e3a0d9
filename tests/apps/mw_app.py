"""A test app with a server middleware that records around each job."""

from __future__ import annotations

from typing import Any

import demo_jobs  # its jobs are part of this app

from cogworker import server_chain


def around(job: dict[str, Any], call_next: Any) -> None:
    client = demo_jobs._redis()
    client.rpush("test:mw", f"before {job['class']}")
    call_next()
    client.rpush("test:mw", f"after {job['class']}")


server_chain.add(around)
