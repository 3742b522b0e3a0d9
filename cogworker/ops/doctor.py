"""`cogworker doctor`: is this Redis, and what is in it, fit to run cogworker? Reads only.

Each check gives one OK/WARN/FAIL line. FAIL means jobs are lost or never run as things stand;
WARN means something a human should look at. A check that can't be made (a command refused by an
ACL or a managed Redis) is a WARN that says so, never a crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import redis

from cogworker.ops import doctor_cluster, doctor_languages, doctor_sharded, redis_time
from cogworker.ops import processes as process_ops
from cogworker.ops.doctor_check import Check, listed
from cogworker.settings import Settings
from cogworker.store import fanout, key_guard, keys, shards, sidekiq_keys
from cogworker.worker.fetching.fetch import MIN_RELIABLE_VERSION, parse_version

CLOCK_SKEW_WARN_S = 1.0


def version_check(version: str) -> Check:
    parts = parse_version(version)
    if parts is None:
        return Check("redis version", "WARN", f"can't read the version {version!r}")
    if parts >= MIN_RELIABLE_VERSION:
        return Check("redis version", "OK", f"{version} (reliable fetch needs 6.2 or later)")
    return Check(
        "redis version",
        "FAIL",
        f"{version}: reliable fetch needs 6.2 or later; workers fall back to BRPOP, and a worker "
        "that is killed loses the jobs it was running",
    )


def check_version(client: redis.Redis, settings: Settings) -> Check:
    return doctor_sharded.per_master(client, _version)


def _version(client: redis.Redis) -> Check:
    info = client.info("server")
    return version_check(str(info.get("redis_version", "?")))


def check_eviction(client: redis.Redis, settings: Settings) -> Check:
    return doctor_sharded.per_master(client, _eviction)


def _eviction(client: redis.Redis) -> Check:
    info = client.info("memory")
    policy = str(info.get("maxmemory_policy", "?"))
    if policy == "noeviction":
        return Check("maxmemory-policy", "OK", "noeviction")
    return Check(
        "maxmemory-policy",
        "FAIL",
        f"{policy}: Redis may evict keys when it is full, and an evicted queue loses its jobs; "
        "set maxmemory-policy noeviction",
    )


def check_persistence(client: redis.Redis, settings: Settings) -> Check:
    return doctor_sharded.per_master(client, _persistence)


def _persistence(client: redis.Redis) -> Check:
    try:
        save = str(cast(dict[str, str], client.config_get("save")).get("save", ""))
    except redis.ResponseError as exc:
        return Check("persistence", "WARN", f"can't read the save setting (CONFIG refused: {exc})")
    aof = str(client.info("persistence").get("aof_enabled", "0")) == "1"
    kinds = ([f"RDB (save {save})"] if save.strip() else []) + (["AOF"] if aof else [])
    if kinds:
        return Check("persistence", "OK", " and ".join(kinds))
    return Check("persistence", "WARN", "off (no RDB save, no AOF): a Redis restart loses every queued job")


def clock_check(redis_now: float, local_before: float, local_after: float) -> Check:
    """Skew between this host and Redis, with the round trip's midpoint as our reading."""
    skew = redis_now - (local_before + local_after) / 2
    text = f"{skew:+.3f} s (Redis minus this host; round trip {1000 * (local_after - local_before):.1f} ms)"
    if abs(skew) > CLOCK_SKEW_WARN_S:
        return Check(
            "clock skew",
            "WARN",
            f"{text}: scheduled jobs and latencies use each host's clock; sync this host (NTP)",
        )
    return Check("clock skew", "OK", text)


def check_clock(client: redis.Redis, settings: Settings, clock: Callable[[], float] = time.time) -> Check:
    before = clock()
    now = redis_time(client)
    return clock_check(now, before, clock())


def check_key_types(client: redis.Redis, settings: Settings) -> Check:
    """What the key guard would quarantine (this only reports; the workers' guard moves them)."""
    candidates = key_guard.keys_to_check(client, ())
    if _is(client, keys.PROCESSES, "set"):
        for identity in sorted(cast(set[str], client.smembers(keys.PROCESSES))):
            candidates += [keys.process(identity), keys.work(identity), keys.signals(identity)]
    wrong = []
    for key, kind in zip(candidates, key_guard.types_of(client, candidates), strict=True):
        want = key_guard.expected_type(key)
        if kind != "none" and want is not None and kind != want:
            wrong.append(f"{key} is a {kind}, should be a {want}")
    if not wrong:
        return Check("key types", "OK", f"{len(candidates)} keys checked")
    return Check(
        "key types",
        "FAIL",
        f"{len(wrong)} key(s) of the wrong type: every command on them fails; the workers' key guard "
        "moves them under cogworker:quarantine:* for a human",
        listed(wrong),
    )


def _is(client: redis.Redis, key: str, kind: str) -> bool:
    return client.type(key) in (kind, "none")


def check_processes(client: redis.Redis, settings: Settings) -> Check:
    live = process_ops.processes(client) if _is(client, keys.PROCESSES, "set") else []
    if not live:
        return Check("processes", "WARN", "no live worker process: nothing is running jobs")
    threads = sum(p.concurrency for p in live)
    quiet = sum(p.quiet for p in live)
    extra = f", {quiet} quiet" if quiet else ""
    # The Sidekiq mode: Sidekiq's own processes, beside cogworker's, each listed with what it reads.
    ruby = [p for p in live if p.is_ruby]
    extra += f" ({len(ruby)} of them Sidekiq's, in Ruby)" if ruby else ""
    details = [
        f"Ruby {p.hostname} pid {p.pid} ({p.identity}): {p.busy}/{p.concurrency} busy, "
        f"queues {', '.join(p.queues)}{', quiet' if p.quiet else ''}"
        for p in ruby
    ]
    return Check("processes", "OK", f"{len(live)} live, {threads} threads{extra}", listed(details))


def check_unread_queues(client: redis.Redis, settings: Settings) -> Check:
    """Queues whose `cogworker:live-queues` stamp is missing or older than the live-queue window
    (2 x presence TTL): no live process has said lately that it reads them."""
    window = 2 * settings.presence_ttl_s
    now = redis_time(client)
    gather = doctor_sharded.queue_sizes if shards.is_sharded() else _queue_sizes
    ordered, sizes, stamps = gather(client)
    # The Sidekiq mode: a queue a live Sidekiq process reads is read (Sidekiq stamps no live-queues).
    by_ruby = doctor_languages.ruby_queues(client) if sidekiq_keys.enabled() else set()
    waiting, idle = [], []
    for name in ordered:
        stamp = stamps[name]
        if (stamp is not None and float(stamp) >= now - window) or name in by_ruby:
            continue
        seen = "never read" if stamp is None else f"last read {now - float(stamp):.0f} s ago"
        if sizes.get(name, 0):
            waiting.append(f"{name}: {sizes[name]} job(s) waiting, {seen}")
        else:
            idle.append(f"{name}: empty, {seen}")
    if waiting:
        return Check(
            "unread queues",
            "FAIL",
            f"{len(waiting)} queue(s) with jobs that no live process reads: those jobs never run; "
            "add the queue to some worker's COGWORKER_QUEUES",
            listed(waiting + idle),
        )
    if idle:
        return Check(
            "unread queues", "WARN", f"{len(idle)} known queue(s) no live process reads", listed(idle)
        )
    return Check("unread queues", "OK", f"all {len(ordered)} queue(s) read by a live process")


def _queue_sizes(client: redis.Redis) -> tuple[list[str], dict[str, int], dict[str, Any]]:
    """Every queue the registry names or a queue key holds, the waiting jobs of each that is a list,
    and each one's live-queue stamp."""
    names: set[str] = set()
    if _is(client, keys.QUEUES, "set"):
        names = {str(n) for n in cast(set[str], client.smembers(keys.QUEUES))}
    for key in client.scan_iter(match=keys.QUEUE_PREFIX + "*", count=1000):
        names.add(keys.queue_name(str(key)))
    ordered = sorted(names)
    pipe = client.pipeline(transaction=False)
    for name in ordered:
        pipe.zscore(keys.LIVE_QUEUES, name)
        pipe.type(keys.queue(name))
    replies = pipe.execute()
    stamps = dict(zip(ordered, replies[0::2], strict=True))
    lists = [name for name, kind in zip(ordered, replies[1::2], strict=True) if kind == "list"]
    pipe = client.pipeline(transaction=False)
    for name in lists:
        pipe.llen(keys.queue(name))
    sizes = dict(zip(lists, (int(n) for n in pipe.execute()), strict=True)) if lists else {}
    return ordered, sizes, stamps


def _expiry(ttl_s: int) -> str:
    if ttl_s < 0:
        return "no expiry"
    if ttl_s >= 2 * 86400:
        return f"expires in {ttl_s / 86400:.0f} days"
    if ttl_s >= 2 * 3600:
        return f"expires in {ttl_s / 3600:.0f} hours"
    return f"expires in {ttl_s / 60:.0f} minutes"


def check_quarantine(client: redis.Redis, settings: Settings) -> Check:
    found = key_guard.quarantined(client)
    if not found:
        return Check("quarantine", "OK", "nothing quarantined")
    # One pipeline outside the sharded layout; in it, one per slot (a partition's records are in its own).
    replies = fanout.keyed(client, found, lambda pipe, key: (pipe.type(key), pipe.ttl(key)))
    details = [f"{key} ({replies[key][0]}, {_expiry(int(replies[key][1]))})" for key in found]
    return Check(
        "quarantine",
        "WARN",
        f"{len(found)} record(s) moved aside for a human (wrong-type keys, unusable records); "
        "look at them before their TTL runs out",
        listed(details),
    )


def check_unsettled(client: redis.Redis, settings: Settings) -> Check:
    if not _is(client, keys.UNSETTLED, "list"):
        return Check("unsettled", "FAIL", f"{keys.UNSETTLED} has the wrong type (see key types)")
    backlog = client.llen(keys.UNSETTLED)
    if shards.is_sharded():
        backlog += doctor_sharded.unsettled_backlog(client)
    if not backlog:
        return Check("unsettled", "OK", "no backlog")
    return Check(
        "unsettled",
        "WARN",
        f"{backlog} retry/dead filing(s) handed over by stopping processes, waiting for a live "
        "process's poller to file them",
    )


def check_orphans(client: redis.Redis, settings: Settings) -> Check:
    if not _is(client, keys.PROCESSES, "set") or not _is(client, keys.IN_PROGRESS_IDENTITIES, "set"):
        return Check("orphaned jobs", "WARN", "can't tell (a registry key has the wrong type)")
    lists = process_ops.orphaned_lists(client)
    if not lists:
        return Check("orphaned jobs", "OK", "no in-progress jobs of dead processes")
    jobs = sum(o.size for o in lists)
    details = [
        f"{o.identity}: {o.size} job(s), "
        + ("never beat" if o.last_beat_age_s is None else f"silent {o.last_beat_age_s:.0f} s")
        for o in lists
    ]
    return Check(
        "orphaned jobs",
        "WARN",
        f"{jobs} job(s) on the in-progress lists of {len(lists)} process(es) that are not live; they "
        f"are requeued after {settings.orphan_threshold_s:.0f} s of silence, or now with "
        "`cogworker recover-orphans`",
        listed(details),
    )


CHECKS: list[Callable[[redis.Redis, Settings], Check]] = [
    check_version,
    check_eviction,
    check_persistence,
    check_clock,
    check_key_types,
    check_processes,
    check_unread_queues,
    check_orphans,
    check_quarantine,
    check_unsettled,
]


def run_checks(client: redis.Redis, settings: Settings) -> list[Check]:
    """Every check (with a Redis Cluster's, ops/doctor_cluster.py); an unreachable Redis raises (the
    caller reports it once), a refused command makes that one check a WARN."""
    client.ping()
    results = []
    for check in [*CHECKS, *doctor_languages.checks(), *doctor_cluster.checks(settings)]:
        try:
            results.append(check(client, settings))
        except redis.ResponseError as exc:
            name = check.__name__.removeprefix("check_").replace("_", " ")
            results.append(Check(name, "WARN", f"can't check: Redis refused a command ({exc})"))
    return results


def failed(results: list[Check]) -> bool:
    return any(c.level == "FAIL" for c in results)
