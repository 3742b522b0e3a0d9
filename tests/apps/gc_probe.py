"""For the collector test: records whether the collector ran while this module was imported, and a
job that reports that and the collector's state in the process that runs it."""

from __future__ import annotations

import gc
import os

import redis

from cogworker import codec, job

IMPORTED_WITH_COLLECTOR = gc.isenabled()


@job
def collector_state(tag: str) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"])
    state = {
        "tag": tag,
        "pid": os.getpid(),
        "imported_with_collector": IMPORTED_WITH_COLLECTOR,
        "collector_on": gc.isenabled(),
        "frozen": gc.get_freeze_count(),
    }
    client.rpush("test:gc", codec.dumps(state))
