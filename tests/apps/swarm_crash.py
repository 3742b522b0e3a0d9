"""For the respawn-backoff test: each swarm child that imports this pops its fate from Redis.

`test:crash_plan` holds seconds; a child that pops one exits with code 7 that long after boot, a
child that finds the list empty lives on.
"""

from __future__ import annotations

import os
import threading

import redis

_client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
_after_s = _client.lpop("test:crash_plan")
_client.close()

if _after_s is not None:
    _timer = threading.Timer(float(str(_after_s)), os._exit, (7,))
    _timer.daemon = True
    _timer.start()
