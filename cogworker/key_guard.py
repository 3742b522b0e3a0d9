"""The key guard: cogworker's keys must have the types it expects.

A key of the wrong type (someone SET a queue name, a tool wrote a hash where a list belongs) would
fail every poll that touches it. It is renamed aside under the quarantine prefix, with a TTL, and
logged, so the work behind it goes on and a human can look at what it held.
"""

from __future__ import annotations

import time

import redis
import structlog

from cogworker import keys
from cogworker.settings import Settings

log = structlog.get_logger("cogworker.key_guard")


def expected_type(key: str) -> str | None:
    if key in keys.EXPECTED_TYPES:
        return keys.EXPECTED_TYPES[key]
    for prefix, kind in keys.EXPECTED_PREFIX_TYPES.items():
        if key.startswith(prefix):
            return kind
    return None


def keys_to_check(client: redis.Redis, queue_names: tuple[str, ...]) -> list[str]:
    names = set(queue_names)
    if client.type(keys.QUEUES) == "set":
        names |= {str(n) for n in client.smembers(keys.QUEUES)}
    checked = list(keys.EXPECTED_TYPES)
    checked += [keys.queue(n) for n in sorted(names)]
    if client.type(keys.IN_PROGRESS_IDENTITIES) == "set":
        checked += [keys.in_progress(str(i)) for i in client.smembers(keys.IN_PROGRESS_IDENTITIES)]
    return checked


def check(client: redis.Redis, settings: Settings, queue_names: tuple[str, ...] = ()) -> list[str]:
    """Quarantine every checked key whose type is wrong; returns the quarantine keys made."""
    candidates = keys_to_check(client, queue_names)
    pipe = client.pipeline(transaction=False)
    for key in candidates:
        pipe.type(key)
    moved: list[str] = []
    for key, kind in zip(candidates, pipe.execute(), strict=True):
        want = expected_type(key)
        if kind == "none" or want is None or kind == want:
            continue
        target = keys.quarantine(f"{key.removeprefix(keys.PREFIX)}:{time.time():.6f}")
        try:
            client.rename(key, target)
        except redis.ResponseError:
            continue  # gone or renamed by another process's guard first
        client.expire(target, int(settings.quarantine_ttl_s))
        log.error("wrong_type_key_quarantined", key=key, found=kind, expected=want, moved_to=target)
        moved.append(target)
    return moved


def quarantined(client: redis.Redis) -> list[str]:
    return sorted(str(k) for k in client.scan_iter(match=keys.QUARANTINE_PREFIX + "*", count=500))
