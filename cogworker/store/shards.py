"""The sharded key layout (COGWORKER_CLUSTER_SHARDING=queues): which keys live in which Redis Cluster slot.

One slot has one master, so a deployment whose keys share one hash tag uses one master's CPU however
large the cluster is. The sharded layout splits the keys in two:
- each **partition** of a queue is a hash tag of its own, `<prefix>{<queue>#<index>}:`, and holds every
  key a job moves through while it belongs to that partition: the queue list, its suspects list, each
  process's in-progress list for it, its schedule, retry and dead sets, its death notices, its pause
  flag, its counters, and the per-job markers a job-moving script writes (orphan counts, push markers,
  handover records). Every job-moving script (fetch, ack, settle, requeue, reconcile, graduate,
  handover) therefore still runs in one slot, atomically, as in the one-slot layout;
- everything else (processes, liveness, the queue registry, unique claims, batches, chains, limiters,
  periodic entries, cancels, results, metrics, ...) lives in the **home** slot, `<prefix>{home}:`: it is
  exactly the one-slot layout's key set under that prefix (store/keys.py is rebound to it).

A queue with one partition (the default) is `{<queue>#0}`, so different queues land on different
masters; COGWORKER_QUEUE_PARTITIONS splits a hot one over several. Which partition a job is in never
changes while it waits, runs, waits for a retry or lies dead: it leaves only by being pushed again.

How many partitions a queue has is recorded in the home hash `partitions` and only grows: a pusher with a
larger COGWORKER_QUEUE_PARTITIONS raises it before its first push, and every reader (fetchers, pollers,
recovery, the CLI and the Web UI) reads max(recorded, configured), so no partition a job was pushed to
goes unread when processes disagree or the setting is lowered.

Outside the sharded layout every function here answers with the one-slot layout's keys, and a queue has
one partition, so callers need no second code path to name a key (they keep their one-script fast paths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from cogworker import sidekiq_rule
from cogworker.settings_fields import PartitionSpec, parse_partitions
from cogworker.store import keys

if TYPE_CHECKING:
    import redis


class LayoutSettings(Protocol):
    """What use_settings reads: cogworker's Settings and the supervisor's SwarmConfig both have it."""

    @property
    def key_prefix(self) -> str: ...
    @property
    def cluster_sharding(self) -> str: ...
    @property
    def queue_partitions(self) -> str: ...
    @property
    def sidekiq_compat(self) -> str: ...
    @property
    def sidekiq_namespace(self) -> str: ...


HOME_TAG = "{home}"
# A queue name may hold '}' (queue_names.py allows it); the tag then ends inside the name, so every
# partition of that queue hashes the same text: still legal (each partition's keys share its slot), only
# not spread. '#' separates the index and may appear in a name: the index is after the last one.
_INDEX_MARK = "#"


@dataclass(frozen=True, slots=True, order=True)
class Partition:
    """Partition `index` of `queue` (0 for an unpartitioned queue)."""

    queue: str
    index: int = 0

    @property
    def prefix(self) -> str:
        """The start of every key of this partition: the deployment's prefix and the partition's tag.
        Outside the sharded layout, the deployment's prefix (every key in one place)."""
        if not _state.sharded:
            return keys.PREFIX
        return f"{_state.prefix}{{{self.queue}{_INDEX_MARK}{self.index}}}:"

    def __str__(self) -> str:
        return self.queue if not _state.sharded else f"{self.queue}{_INDEX_MARK}{self.index}"


@dataclass
class _State:
    sharded: bool = False
    prefix: str = keys.DEFAULT_PREFIX  # the deployment's own prefix (without the home tag)
    spec: PartitionSpec = field(default_factory=PartitionSpec)


_state = _State()


def use_settings(settings: LayoutSettings) -> None:
    """Bind the key layout to `settings`: the one-slot layout under COGWORKER_KEY_PREFIX, or the sharded
    one (keys.py rebound to the home slot). Called wherever a process's settings take effect."""
    sharded = settings.cluster_sharding == "queues"
    _state.sharded = sharded
    _state.prefix = settings.key_prefix
    _state.spec = parse_partitions(settings.queue_partitions) if sharded else PartitionSpec()
    if sharded:
        keys.use_prefix(home_prefix(settings.key_prefix))
    else:
        compat, namespace = settings.sidekiq_compat, settings.sidekiq_namespace
        keys.use_prefix(settings.key_prefix, sidekiq_rule.shared_prefix(compat, namespace), compat)


def home_prefix(prefix: str) -> str:
    """The sharded layout's home slot: every key that is not a partition's."""
    return f"{prefix}{HOME_TAG}:"


def is_sharded() -> bool:
    return _state.sharded


def deployment_prefix() -> str:
    """COGWORKER_KEY_PREFIX as set (keys.PREFIX is the home slot's in the sharded layout)."""
    return _state.prefix


def configured_count(queue: str) -> int:
    return _state.spec.count(queue) if _state.sharded else 1


def partitions(queue: str, recorded: int = 0) -> tuple[Partition, ...]:
    """Every partition of `queue` a reader must cover: max(configured, `recorded`) of them."""
    if not _state.sharded:
        return (Partition(queue),)
    return tuple(Partition(queue, i) for i in range(max(configured_count(queue), recorded)))


def push_partitions(queue: str) -> tuple[Partition, ...]:
    """The partitions a pusher spreads `queue`'s jobs over (its configured count)."""
    return partitions(queue)


def partition_of_key(key: str) -> Partition | None:
    """The partition a sharded key belongs to, or None (a home key, or not the sharded layout)."""
    if not _state.sharded or not key.startswith(_state.prefix + "{"):
        return None
    end = key.find("}:", len(_state.prefix))
    tag = key[len(_state.prefix) + 1 : end]
    queue, mark, index = tag.rpartition(_INDEX_MARK)
    if end == -1 or not mark or not index.isdigit():
        return None
    return Partition(queue, int(index))


# The keys of one partition. Outside the sharded layout each is the one-slot layout's key.


def queue_key(p: Partition) -> str:
    return p.prefix + "queue" if _state.sharded else keys.queue(p.queue)


def suspects(p: Partition) -> str:
    return p.prefix + "suspects" if _state.sharded else keys.suspects(p.queue)


def in_progress(p: Partition, identity: str) -> str:
    """A process's in-progress list for this partition (one list per process in the one-slot layout)."""
    return f"{p.prefix}inprogress:{identity}" if _state.sharded else keys.in_progress(identity)


def schedule(p: Partition) -> str:
    return p.prefix + "schedule" if _state.sharded else keys.SCHEDULE


def retry(p: Partition) -> str:
    return p.prefix + "retry" if _state.sharded else keys.RETRY


def dead(p: Partition) -> str:
    return p.prefix + "dead" if _state.sharded else keys.DEAD


def job_sets(p: Partition) -> dict[str, str]:
    """The partition's sorted sets of jobs, by the names the CLI and the UI give them."""
    return {"retry": retry(p), "scheduled": schedule(p), "dead": dead(p)}


def deaths(p: Partition) -> str:
    return p.prefix + "deaths" if _state.sharded else keys.DEATHS


def paused(p: Partition) -> str:
    """A set holding the queue's name while it is paused: the same type and reading as keys.PAUSED, so
    fetch.lua is the same script in both layouts. Pausing a sharded queue writes every partition's."""
    return p.prefix + "paused" if _state.sharded else keys.PAUSED


def registry(p: Partition) -> str:
    """The queue registry a push script is given: the home set in the one-slot layout; in the sharded
    one a set in the partition's own slot (holding the queue's name), since a script may not reach the
    home slot. The pusher adds the queue to the home registry itself (record_partitions)."""
    return p.prefix + "queues" if _state.sharded else keys.QUEUES


def wake_channel(p: Partition) -> str:
    """The pub/sub channel a push script wakes idle fetchers on. A channel is not a key (PUBLISH reaches
    every node of a cluster), but a script names it in KEYS, so in the sharded layout it is named in the
    partition's slot; fetchers subscribe with a pattern (wake_pattern)."""
    return p.prefix + "wake" if _state.sharded else keys.WAKE_CHANNEL


def wake_pattern() -> str:
    """PSUBSCRIBE pattern covering every partition's wake channel (sharded layout only)."""
    return _state.prefix + "{*}:wake"


def stat(p: Partition, name: str) -> str:
    """A counter (`processed`, `failed`, or one of keys.COUNTED_OUTCOMES) kept by this partition; the
    readers sum every partition's (ops/stats.py)."""
    return f"{p.prefix}stat:{name}" if _state.sharded else keys.stat(name)


def stat_day(p: Partition, name: str, day: str) -> str:
    return f"{p.prefix}stat:{name}:{day}" if _state.sharded else keys.stat_day(name, day)


def orphanings(p: Partition, jid: str) -> str:
    return f"{p.prefix}orphanings:{jid}" if _state.sharded else keys.orphanings(jid)


def orphanings_raw(p: Partition, digest: str) -> str:
    return f"{p.prefix}orphanings-raw:{digest}" if _state.sharded else keys.orphanings_raw(digest)


def pushed(p: Partition, jid: str) -> str:
    return f"{p.prefix}pushed:{jid}" if _state.sharded else keys.pushed(jid)


def handed_over(p: Partition, digest: str) -> str:
    return f"{p.prefix}handed-over:{digest}" if _state.sharded else keys.handed_over(digest)


def partitions_key() -> str:
    """Home hash: queue name -> the number of partitions recorded for it (only grows)."""
    return keys.PREFIX + "partitions"


# Add the queue to the registry (KEYS[2]) and raise its recorded partition count (KEYS[1]) to ARGV[2] if
# it is below, in one round trip; answers the count before and after, and whether the home slot's paused
# set (KEYS[3], the pause's intent) lists the queue (0 when that key has the wrong type: the key guard's
# to report). A set add and a max: sending it again after a lost reply changes nothing.
_RECORD = """
redis.call('SADD', KEYS[2], ARGV[1])
local before = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local want = tonumber(ARGV[2])
local now = before
if before < want then
  redis.call('HSET', KEYS[1], ARGV[1], want)
  now = want
end
local paused = redis.pcall('SISMEMBER', KEYS[3], ARGV[1])
if type(paused) ~= 'number' then
  paused = 0
end
return {before, now, paused}
"""


def record_partitions(home: redis.Redis, queue: str, at_least: int = 0) -> int:
    """Make sure the home hash records at least this process's partition count for `queue` (or
    `at_least`, when higher: an outbox entry written by a process with more), and add the queue to the
    home registry; both idempotent. Answers the count recorded."""
    return record_state(home, queue, at_least)[1]


def record_state(home: redis.Redis, queue: str, at_least: int = 0) -> tuple[int, int, bool]:
    """`record_partitions`, answering the count before, the count after and whether the queue is paused
    (its intent in the home slot): a caller whose record raised the count copies the pause to the new
    partitions (store/fanout.record)."""
    if not _state.sharded:
        return 1, 1, False
    want = max(configured_count(queue), at_least)
    before, now, paused = home.eval(_RECORD, 3, partitions_key(), keys.QUEUES, keys.PAUSED, queue, want)
    return int(before), int(now), bool(int(paused))


def outbox(p: Partition) -> str:
    """Hash in the partition's slot: steps to carry out after a job's move there (store/outbox.py)."""
    return p.prefix + "outbox"


def recorded_partitions(home: redis.Redis) -> dict[str, int]:
    """Every queue's recorded partition count (empty outside the sharded layout)."""
    if not _state.sharded:
        return {}
    raw = home.hgetall(partitions_key())
    return {str(queue): int(n) for queue, n in raw.items() if str(n).isdigit()}


def every_partition(queue_names: list[str] | tuple[str, ...], recorded: dict[str, int]) -> list[Partition]:
    """Every partition of every queue named, for a reader that fans out over all of them."""
    return [p for name in queue_names for p in partitions(name, recorded.get(name, 0))]
