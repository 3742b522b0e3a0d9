"""Where per-class and per-queue metrics live in Redis, and the histogram's buckets: the one layout
the workers write (worker/metrics) and the readers read (ops/metrics.py, the Web UI's Metrics page).

Every key is under the deployment's prefix, so a hash-tagged prefix keeps them in its Cluster slot.

- `<prefix>metrics:j:<minute>`  hash, one per minute of jobs that ended in it (`minute` is the Unix
  time divided by 60, on the clock of the process that ran them). Per job class, fields
  `<class>|p` (runs ended: succeeded or failed), `<class>|f` (of which failed), `<class>|ms` (their
  total execution time in milliseconds) and `<class>|h<i>` (how many took at most BUCKET_BOUNDS_MS[i]
  ms; i == len(BUCKET_BOUNDS_MS) counts the ones past the last bound). Buckets are not cumulative,
  and a field that would be 0 is never written.
- `<prefix>metrics:q:<minute>`  hash, one per minute, per queue: `<queue>|n` (jobs picked up in it),
  `<queue>|wait_ms` (their total wait between enqueue and pickup) and `<queue>|lat_ms` (the largest
  latency of the oldest waiting job that a process sampled in that minute).
- `<prefix>metrics:marks`  sorted set of deploy markers: score = Unix time in seconds, member = JSON
  {"at": seconds, "label": text, "by": who}.

Both minute hashes expire RETENTION_S after their minute ends. Eight hours at one-minute resolution
(Sidekiq 7 keeps the same): the longest range the Metrics page shows, long enough to see an
incident, a day's shift and the deploy that began it, and bounded at a few hundred kB per class.
"""

from __future__ import annotations

import bisect

from cogworker.store import keys

MINUTE_S = 60
RETENTION_S = 8 * 3600 + 2 * MINUTE_S
# Execution-time buckets: powers of sqrt(2) from 1 ms to about 65 minutes (45 bounds), so a
# percentile read from the histogram is within a factor of 1.19 of the exact value at any scale.
BUCKET_BOUNDS_MS: tuple[float, ...] = tuple(round(2 ** (i / 2), 3) for i in range(45))
# A job class name is a field prefix: "|" can't appear in one (registry names are Python names or
# dotted paths); a class holding it anyway is written with it replaced.
SEPARATOR = "|"
# Deploy markers older than this are trimmed when a new one is added.
MARKS_KEEP_S = 30 * 24 * 3600


def minute_of(epoch_s: float) -> int:
    return int(epoch_s // MINUTE_S)


def jobs_key(minute: int) -> str:
    return f"{keys.PREFIX}metrics:j:{minute}"


def queues_key(minute: int) -> str:
    return f"{keys.PREFIX}metrics:q:{minute}"


def marks_key() -> str:
    return f"{keys.PREFIX}metrics:marks"


def bucket_of(ms: float) -> int:
    """The index of the bucket a run of `ms` milliseconds is counted in."""
    return bisect.bisect_left(BUCKET_BOUNDS_MS, ms)


def field(name: str, suffix: str) -> str:
    """`<name>|<suffix>`: name is a job class or a queue name."""
    return f"{name.replace(SEPARATOR, '/')}{SEPARATOR}{suffix}"


def split_field(raw: str) -> tuple[str, str]:
    """(name, suffix) of a field written by `field`."""
    name, _, suffix = raw.rpartition(SEPARATOR)
    return name, suffix
