"""The sharded layout's side of `cogworker doctor`'s checks (ops/doctor.py): what the one-slot layout
reads on its one master is read on every master, or over every queue partition.

- `per_master`: a check of the server itself (version, eviction policy, persistence) made on each
  master: an evicting or unpersisted master loses the jobs of the queues in its slots, whichever
  master the home slot is on. Outside the sharded layout it is the one check, unchanged;
- `unsettled_backlog`: the filings stopping processes handed over into each partition's `unsettled`
  list (worker/settling/shard_route.py), summed;
- `queue_sizes`: the queues the unread-queues check looks at (the home slot's registry and recorded
  counts, and every partition queue key a SCAN of each master finds), each one's waiting jobs summed
  over its partitions, and its live-queue stamp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from cogworker.ops.doctor_check import Check, worst
from cogworker.store import fanout, keys, shards
from cogworker.worker.settling.shard_route import unsettled


def per_master(client: redis.Redis, check: Callable[[redis.Redis], Check]) -> Check:
    """`check` on every master (sharded layout), as one line: the worst level, each master's finding
    listed; outside the sharded layout, `check(client)` as it is."""
    targets = fanout.master_clients(client)
    if not targets:
        return check(client)
    found = [(master.address, check(each)) for master, each in targets]
    level = worst([c.level for _, c in found])
    name = found[0][1].name
    messages = {c.message for _, c in found}
    if level == "OK" and len(messages) == 1:
        return Check(name, "OK", f"{found[0][1].message} (all {len(found)} masters)")
    first = next((address, c) for address, c in found if c.level == level)
    details = [f"{address}: {c.level} {c.message}" for address, c in found]
    return Check(name, level, f"{first[0]}: {first[1].message}", details)


def unsettled_backlog(client: redis.Redis) -> int:
    """Entries on every known partition's unsettled list (one of the wrong type counts as none: the
    key types check names it)."""
    found = fanout.pipelined(
        client,
        fanout.known_partitions(client),
        lambda pipe, p: pipe.llen(unsettled(p)),
        raise_on_error=False,
    )
    return sum(n for (n,) in found.values() if isinstance(n, int))


def queue_sizes(client: redis.Redis) -> tuple[list[str], dict[str, int], dict[str, Any]]:
    names, counts = fanout.recorded(client)
    found = set(names)
    partition_keys = fanout.scan_all(client, f"{shards.deployment_prefix()}{{*}}:queue")
    for key in partition_keys:
        partition = shards.partition_of_key(key)
        if partition is not None and key == shards.queue_key(partition):
            found.add(partition.queue)
            # A partition a job sits in, past the recorded count (written by hand, or the record lost):
            # read too.
            counts[partition.queue] = max(counts.get(partition.queue, 0), partition.index + 1)
    ordered = sorted(found)

    def length(pipe: Any, p: shards.Partition) -> None:
        pipe.llen(shards.queue_key(p))

    # A partition key of the wrong type answers an error here: it counts as empty (key types names it).
    lengths = fanout.pipelined(client, shards.every_partition(ordered, counts), length, raise_on_error=False)
    sizes = dict.fromkeys(ordered, 0)
    for p, (n,) in lengths.items():
        sizes[p.queue] += n if isinstance(n, int) else 0
    pipe = client.pipeline(transaction=False)
    for name in ordered:
        pipe.zscore(keys.LIVE_QUEUES, name)
    stamps = dict(zip(ordered, pipe.execute(), strict=True))
    return ordered, sizes, stamps
