"""Rate limiters as Redis holds them (api/limiter.py): the ones in use now, and one's holders or usage.

There is no registry (a dynamic name costs no round trip to create), so the limiters are found by
their keys, which exist only while a limiter is in use: a concurrent one while a lease runs, a
window until its window ends, a bucket until it is full again. Everything is read on Redis's clock,
the clock the scripts write with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from cogworker.ops import redis_time
from cogworker.store import keys

KINDS = ("concurrent", "window", "bucket")
SCAN_COUNT = 1000
MAX_LISTED = 10_000


@dataclass(frozen=True, slots=True)
class Holder:
    host: str
    pid: str
    jid: str | None  # the job holding it, if a job does
    lease_left_s: float


@dataclass(frozen=True, slots=True)
class LimiterState:
    name: str
    kind: str
    limit: float | None  # holders at once, passes per window, or tokens per period (None: unknown)
    per_s: float | None  # the window's or the bucket's period; a concurrent limiter's lease
    in_use: float  # holders now, passes in this window, or tokens taken from a full bucket
    burst: float | None = None
    resets_in_s: float | None = None  # when the window ends, or the bucket is full again
    holders: list[Holder] = field(default_factory=list)


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def names(client: redis.Redis) -> list[tuple[str, str]]:
    """(kind, name) of every limiter with live keys, sorted (at most MAX_LISTED)."""
    found: set[tuple[str, str]] = set()
    for key in client.scan_iter(match=_glob(keys.LIMITER_PREFIX) + "*", count=SCAN_COUNT):
        kind, _, name = str(key).removeprefix(keys.LIMITER_PREFIX).partition(":")
        if kind in KINDS and name:
            found.add((kind, name))
        if len(found) >= MAX_LISTED:
            break
    return sorted(found, key=lambda pair: (pair[1], pair[0]))


def _glob(text: str) -> str:
    """`text` as a literal SCAN pattern (a prefix may hold `{`, `*`, `[`...)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def states(
    client: redis.Redis, wanted: list[tuple[str, str]], *, with_holders: bool = False
) -> list[LimiterState]:
    """The state of each (kind, name), read in one round trip (a limiter gone meanwhile is left out)."""
    now_ms = redis_time(client) * 1000
    pipe = client.pipeline(transaction=False)
    for kind, name in wanted:
        if kind == "concurrent":
            pipe.zrangebyscore(keys.limiter(kind, name), f"({now_ms}", "+inf", withscores=True)
            pipe.pttl(keys.limiter(kind, name))
        else:
            pipe.hgetall(keys.limiter(kind, name))
            pipe.pttl(keys.limiter(kind, name))
    replies = pipe.execute(raise_on_error=False)
    found = []
    for index, (kind, name) in enumerate(wanted):
        first, second = replies[2 * index], replies[2 * index + 1]
        if isinstance(first, Exception) or isinstance(second, Exception):
            continue  # a key of another type: `cogworker doctor` reports it
        state = _state(kind, name, first, second, now_ms, with_holders)
        if state is not None:
            found.append(state)
    return found


def _state(
    kind: str, name: str, first: Any, second: Any, now_ms: float, with_holders: bool
) -> LimiterState | None:
    if kind == "concurrent":
        if not first:
            return None
        # Each token starts with its holder's limit and lease: the newest holder's are shown.
        newest = str(max(first, key=lambda pair: pair[1])[0]).split("|", 2)
        limit, lease_ms = (_float(newest[0]), _float(newest[1])) if len(newest) == 3 else (None, None)
        holders = [_holder(str(token), score, now_ms) for token, score in first] if with_holders else []
        return LimiterState(
            name, kind, limit, lease_ms / 1000 if lease_ms else None, len(first), holders=holders
        )
    if not first:
        return None
    per_ms = _float(first.get("per_ms")) or 0.0
    ttl_s = max(0.0, int(second) / 1000) if isinstance(second, int) and second >= 0 else None
    if kind == "window":
        count = _float(first.get("count")) or 0.0
        return LimiterState(name, kind, _float(first.get("limit")), per_ms / 1000, count, resets_in_s=ttl_s)
    rate, burst = _float(first.get("rate")) or 0.0, _float(first.get("burst")) or 0.0
    tokens, at = _float(first.get("tokens")) or 0.0, _float(first.get("at")) or now_ms
    if per_ms > 0:
        tokens = min(burst, tokens + max(0.0, now_ms - at) * rate / per_ms)
    return LimiterState(
        name, kind, rate, per_ms / 1000, round(burst - tokens, 3), burst=burst, resets_in_s=ttl_s
    )


def _holder(token: str, score: float, now_ms: float) -> Holder:
    """A holder's token is `limit|lease|host:pid:jid-or-dash:serial` (api/limiter.py); the host may
    hold colons."""
    parts = token.split("|", 2)[-1].rsplit(":", 3)
    host, pid, jid = (parts[0], parts[1], parts[2]) if len(parts) == 4 else (token, "?", "-")
    return Holder(host, pid, None if jid == "-" else jid, round(max(0.0, (score - now_ms) / 1000), 3))


def in_use(client: redis.Redis) -> list[LimiterState]:
    return states(client, names(client))


def show(client: redis.Redis, name: str) -> list[LimiterState]:
    """Every kind of limiter in use under `name` (usually one), with a concurrent one's holders."""
    return states(client, [(kind, name) for kind in KINDS], with_holders=True)
