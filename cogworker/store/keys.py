"""Every Redis key name cogworker uses, built in this one module.

Lists, sets and hashes are documented with their type so the key guard (key_guard.py) can check them.
"""

from __future__ import annotations

PREFIX = "cogworker:"

QUEUE_PREFIX = PREFIX + "queue:"  # list per queue; LPUSH to enqueue, the right end is popped next
QUEUES = PREFIX + "queues"  # set: every queue name ever pushed to
PAUSED = PREFIX + "paused"  # set: queue names no process fetches from
SCHEDULE = PREFIX + "schedule"  # zset: jobs due at a time (score = epoch seconds)
RETRY = PREFIX + "retry"  # zset: failed jobs waiting for their next try
DEAD = PREFIX + "dead"  # zset: jobs out of retries (score = time of death)
# list: one notice per job filed in dead, written in the same script as the dead entry and popped by
# workers with on_death hooks (api/death.py); capped at COGWORKER_DEATH_NOTICES_MAX, newest at the head
DEATHS = PREFIX + "deaths"
IN_PROGRESS_PREFIX = PREFIX + "inprogress:"  # list per process: fetched, not yet acknowledged
IN_PROGRESS_IDENTITIES = PREFIX + "inprogress-identities"  # set: identities that may own such a list
PROCESSES = PREFIX + "processes"  # set: identities that have beaten
PROCESS_PREFIX = PREFIX + "process:"  # hash per process, with the presence TTL
WORK_PREFIX = PREFIX + "work:"  # hash per process: thread -> job running on it
SIGNAL_PREFIX = PREFIX + "signals:"  # list per process: remote commands (quiet, stop, resume)
LAST_BEAT = PREFIX + "last-beat"  # hash: identity -> last beat, seconds on Redis's clock
LIVE_QUEUES = PREFIX + "live-queues"  # zset: queue -> last time a live process said it reads it
ORPHANINGS_PREFIX = PREFIX + "orphanings:"  # string per jid: times its process died running it
UNSETTLED = PREFIX + "unsettled"  # list: settles a stopping process could not file itself
QUARANTINE_PREFIX = PREFIX + "quarantine:"  # anything moved aside for a human, with a TTL
GUARD_REQUESTS = PREFIX + "key-guard:requests"  # set: keys some component found of the wrong type
STAT_PROCESSED = PREFIX + "stat:processed"
STAT_FAILED = PREFIX + "stat:failed"
# Jobs that ended without running to an outcome of their own, each counted in cogworker:stat:<name>
# (and per UTC day, like processed/failed): outcomes.py writes them, ops/stats.py reads them.
ENDED_UNRUN = ("expired", "cancelled")
UNIQUE_PREFIX = PREFIX + "unique:"  # string per digest: the jid holding the unique claim
PERIODIC_SLOT_PREFIX = PREFIX + "periodic:slot:"  # string per (entry, slot): the one enqueue's claim
PERIODIC_RUNNING_PREFIX = PREFIX + "periodic:running:"  # string per entry: the jid of the run in flight
PERIODIC_ENTRIES = PREFIX + "periodic:entries"  # hash: entry name -> its registration (JSON)
STATUS_PREFIX = PREFIX + "status:"  # hash per jid, with a TTL
# zset: jid -> when `cogworker.cancel` was asked for it (Redis's clock), trimmed by age and size;
# every worker process reads it about once a second (worker/cancel_watch.py).
CANCELS = PREFIX + "cancels"
RESULT_PREFIX = PREFIX + "result:"  # string per jid, with a TTL: a job's kept result (api/results.py)
RESULT_CHANNEL_PREFIX = PREFIX + "result-ready:"  # pub/sub per jid: "its result was just written"
WAKE_CHANNEL = PREFIX + "wake"  # pub/sub: "a job was pushed to <queue>", for idle fetchers


def queue(name: str) -> str:
    return QUEUE_PREFIX + name


def queue_name(key: str) -> str:
    return key.removeprefix(QUEUE_PREFIX)


def in_progress(identity: str) -> str:
    return IN_PROGRESS_PREFIX + identity


def process(identity: str) -> str:
    return PROCESS_PREFIX + identity


def work(identity: str) -> str:
    return WORK_PREFIX + identity


def signals(identity: str) -> str:
    return SIGNAL_PREFIX + identity


def orphanings(jid: str) -> str:
    return ORPHANINGS_PREFIX + jid


def stat_processed_day(day: str) -> str:
    return f"{STAT_PROCESSED}:{day}"


def stat_failed_day(day: str) -> str:
    return f"{STAT_FAILED}:{day}"


def stat(outcome: str) -> str:
    return f"{PREFIX}stat:{outcome}"


def stat_day(outcome: str, day: str) -> str:
    return f"{PREFIX}stat:{outcome}:{day}"


def unique(digest: str) -> str:
    return UNIQUE_PREFIX + digest


def periodic_slot(name: str, slot: int) -> str:
    return f"{PERIODIC_SLOT_PREFIX}{name}:{slot}"


def periodic_running(name: str) -> str:
    return PERIODIC_RUNNING_PREFIX + name


def status(jid: str) -> str:
    return STATUS_PREFIX + jid


def result(jid: str) -> str:
    return RESULT_PREFIX + jid


def result_channel(jid: str) -> str:
    return RESULT_CHANNEL_PREFIX + jid


def quarantine(what: str) -> str:
    return QUARANTINE_PREFIX + what


# The types the key guard expects. Prefix entries cover every key that starts with them.
EXPECTED_TYPES: dict[str, str] = {
    QUEUES: "set",
    PAUSED: "set",
    SCHEDULE: "zset",
    RETRY: "zset",
    DEAD: "zset",
    DEATHS: "list",
    IN_PROGRESS_IDENTITIES: "set",
    PROCESSES: "set",
    LAST_BEAT: "hash",
    LIVE_QUEUES: "zset",
    UNSETTLED: "list",
    STAT_PROCESSED: "string",
    STAT_FAILED: "string",
    **{stat(outcome): "string" for outcome in ENDED_UNRUN},
    PERIODIC_ENTRIES: "hash",
    GUARD_REQUESTS: "set",
    CANCELS: "zset",
}
EXPECTED_PREFIX_TYPES: dict[str, str] = {
    QUEUE_PREFIX: "list",
    IN_PROGRESS_PREFIX: "list",
    PROCESS_PREFIX: "hash",
    WORK_PREFIX: "hash",
    SIGNAL_PREFIX: "list",
    ORPHANINGS_PREFIX: "string",
    UNIQUE_PREFIX: "string",
    STATUS_PREFIX: "hash",
    RESULT_PREFIX: "string",
    PERIODIC_SLOT_PREFIX: "string",
    PERIODIC_RUNNING_PREFIX: "string",
    STAT_PROCESSED + ":": "string",  # the per-day counters
    STAT_FAILED + ":": "string",
}
