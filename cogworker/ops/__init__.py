"""Operations on a running deployment: small functions over Redis that return plain data.

The `cogworker` verbs (cogworker/cli/) format what these return as text or JSON, and the swarm's
metrics collector (supervisor/integrations/metrics.py) reads queues through them. Nothing here prints.
"""

from __future__ import annotations

import redis


class OpsError(Exception):
    """An operation that can't be done as asked; the message is the line shown to the operator."""


class NotFound(OpsError):
    """No such job, process or queue."""


def redis_time(client: redis.Redis) -> float:
    """Redis's own clock, in epoch seconds: the clock heartbeats and live-queue stamps are on."""
    seconds, micros = client.time()
    return seconds + micros / 1_000_000
