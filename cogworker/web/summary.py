"""The summary bar every page shows under the header: live processes, busy and total job slots,
utilization, jobs enqueued, retries and dead -- the first question in an incident, answered without
opening a second page.

It is read on every page (and every Live refresh), so it costs two pipelined round trips whatever
the page: the registries and the set sizes first, then each registered process's presence fields
and each known queue's length. It reads the presence hash's `busy` and `info` fields only, not the
work hashes `ops.processes.processes` also reads for the Busy page's running jobs.

In the Sidekiq mode the same second round trip reads each member's Sidekiq presence too: a Ruby process
(ops/ruby_processes.py) counts as a live process with its busy threads and its concurrency.

In the sharded layout (store/shards.py) the queues' lengths and the retry and dead sets' sizes are
their partitions', summed: one more fan-out (store/fanout.py), one pipeline per partition slot at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from cogworker import codec
from cogworker.ops import ruby_processes
from cogworker.store import fanout, keys, shards, sidekiq_keys


@dataclass(frozen=True, slots=True)
class Summary:
    processes: int  # live: their presence hash exists
    busy: int  # jobs running now, across them
    slots: int  # jobs they may run at once (job threads and async slots)
    enqueued: int  # waiting in every known queue
    retries: int
    dead: int
    ruby: int = 0  # of `processes`, Sidekiq's own (the Sidekiq mode)

    @property
    def utilization(self) -> int | None:
        """Busy slots as a whole percentage of all slots; None with no slot at all."""
        if self.slots <= 0:
            return None
        return round(100 * min(self.busy, self.slots) / self.slots)


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    try:
        return max(0, int(float(value)))
    except (TypeError, ValueError):
        return 0  # a field someone overwrote with text counts as nothing, not as a page that fails


def _slots(info_text: Any) -> int:
    info = codec.loads_dict(str(info_text or "")) or {}
    return _count(info.get("concurrency")) + _count(info.get("async_concurrency"))


def _present(fields: Any) -> bool:
    return isinstance(fields, list) and any(v is not None for v in fields)


def _ruby(fields: Any) -> bool:
    """Sidekiq presence fields (busy, info) of a Ruby process, not of one of cogworker's."""
    return _present(fields) and ruby_processes.is_ruby({"info": str(fields[1] or "")})


def read(client: redis.Redis) -> Summary:
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.PROCESSES)
    pipe.smembers(keys.QUEUES)
    pipe.zcard(keys.RETRY)
    pipe.zcard(keys.DEAD)
    # A key of the wrong type answers an error: it counts as empty (`cogworker doctor` names it).
    registered, queues, retries, dead = pipe.execute(raise_on_error=False)
    identities = sorted(str(i) for i in registered) if isinstance(registered, set) else []
    names = sorted(str(q) for q in queues) if isinstance(queues, set) else []
    pipe = client.pipeline(transaction=False)
    for identity in identities:
        pipe.hmget(keys.process(identity), ["busy", "info"])
    sharded = shards.is_sharded()
    for name in [] if sharded else names:
        pipe.llen(keys.queue(name))
    ruby_mode = sidekiq_keys.enabled()
    for identity in identities if ruby_mode else []:
        pipe.hmget(sidekiq_keys.presence(identity), ["busy", "info"])
    replies = pipe.execute(raise_on_error=False)
    # No presence fields: not live (its TTL ran out, or it stopped), as ops.processes counts them.
    fields = replies[: len(identities)]
    presence = [r for r in fields if _present(r)]
    lengths = replies[len(identities) : len(replies) - (len(identities) if ruby_mode else 0)]
    enqueued = sum(_count(n) for n in lengths if isinstance(n, int))
    ruby: list[Any] = []
    if ruby_mode:
        sidekiq = replies[len(replies) - len(identities) :]
        ruby = [k for own, k in zip(fields, sidekiq, strict=True) if not _present(own) and _ruby(k)]
        presence += ruby
    retries, dead = (
        _count(retries) if isinstance(retries, int) else 0,
        _count(dead) if isinstance(dead, int) else 0,
    )
    if sharded:
        queued, retrying, dying = _partitions(client)
        enqueued, retries, dead = enqueued + queued, retries + retrying, dead + dying
    return Summary(
        processes=len(presence),
        busy=sum(_count(busy) for busy, _ in presence),
        slots=sum(_slots(info) for _, info in presence),
        enqueued=enqueued,
        retries=retries,
        dead=dead,
        ruby=len(ruby),
    )


def _partitions(client: redis.Redis) -> tuple[int, int, int]:
    """Jobs waiting, retrying and dead in every known partition (sharded layout)."""

    def sizes(pipe: Any, p: shards.Partition) -> None:
        pipe.llen(shards.queue_key(p))
        pipe.zcard(shards.retry(p))
        pipe.zcard(shards.dead(p))

    found = fanout.pipelined(client, fanout.known_partitions(client), sizes, raise_on_error=False)
    totals = [0, 0, 0]
    for replies in found.values():
        totals = [t + (_count(n) if isinstance(n, int) else 0) for t, n in zip(totals, replies, strict=True)]
    return totals[0], totals[1], totals[2]
