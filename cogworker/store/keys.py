"""Every Redis key name cogworker uses, built in this one module from the deployment's prefix.

Lists, sets and hashes are documented with their type so the key guard (key_guard.py) can check them.

The prefix (COGWORKER_KEY_PREFIX, default `cogworker:`) lets two apps share one Redis without seeing
each other's queues, stats, processes or periodic entries, and a prefix holding a hash tag
(`{myapp}:`) puts every key of a deployment in one Redis Cluster slot. It is one per process:
`use_prefix` rebinds the names below, and is called wherever a process's settings take effect
(`cogworker.configure` and the job API's first use, the CLI, the fork server, the supervisor's
metrics, the Web UI). Rebinding module names works because every caller reads them as `keys.NAME`
at the time of use; nothing copies one (`from ... keys import NAME`) or keeps one in a module-level
constant, or it would keep the default prefix.
"""

from __future__ import annotations

DEFAULT_PREFIX = "cogworker:"
# Jobs that ended without running to an outcome of their own, each counted in <prefix>stat:<name>
# (and per UTC day, like processed/failed): outcomes.py writes them, ops/stats.py reads them.
ENDED_UNRUN = ("expired", "cancelled")
# Jobs a rate limiter put back in the schedule set (api/limit_jobs.py): not an end, but counted the
# same way (total and per day, in the reschedule's own settle), and shown beside the outcomes above.
LIMITED = "limited"
COUNTED_OUTCOMES = (*ENDED_UNRUN, LIMITED)
# The counters Sidekiq keeps too, under its names when the Sidekiq mode is on.
SHARED_STATS = ("processed", "failed")

# Set by use_prefix (at the bottom of this module, then by each process's settings).
PREFIX: str
# The start of the families shared with Sidekiq (COGWORKER_SIDEKIQ_COMPAT, store/sidekiq_keys.py): PREFIX
# when the mode is off, else "" (bare keys) or a Sidekiq 6 namespace with its colon.
SHARED_PREFIX: str
# The Sidekiq version the mode writes for ("6", "7"), or "" when it is off.
SIDEKIQ: str
QUEUE_PREFIX: str
SUSPECTS_PREFIX: str
QUEUES: str
PAUSED: str
SCHEDULE: str
RETRY: str
DEAD: str
DEATHS: str
IN_PROGRESS_PREFIX: str
IN_PROGRESS_IDENTITIES: str
PROCESSES: str
PROCESS_PREFIX: str
WORK_PREFIX: str
SIGNAL_PREFIX: str
LAST_BEAT: str
LIVE_QUEUES: str
ORPHANINGS_PREFIX: str
ORPHANINGS_RAW_PREFIX: str
UNSETTLED: str
HANDED_OVER_PREFIX: str
QUARANTINE_PREFIX: str
GUARD_REQUESTS: str
STAT_PROCESSED: str
STAT_FAILED: str
UNIQUE_PREFIX: str
PERIODIC_SLOT_PREFIX: str
PERIODIC_RUNNING_PREFIX: str
PERIODIC_ENTRIES: str
STATUS_PREFIX: str
CANCELS: str
# How long a jid stays in the cancel record (CANCELS): ops/cancel.py says why it is kept. Here, not
# there, so a worker reads it without importing the operator-side modules (start-up time, issue 18).
CANCEL_KEEP_S = 24 * 3600
RESULT_PREFIX: str
RESULT_CHANNEL_PREFIX: str
CHAIN_PREFIX: str
WAKE_CHANNEL: str
BATCHES: str
BATCH_LEASES: str
BATCH_PREFIX: str
BATCH_PENDING_PREFIX: str
BATCH_FAILURES_PREFIX: str
LIMITER_PREFIX: str
PUSHED_PREFIX: str
CANCELLED_PREFIX: str
PERIODIC_RUNS_PREFIX: str
PERIODIC_PAUSED: str
AUDIT: str
METRICS_PREFIX: str
METRICS_FLUSHED_PREFIX: str
OUTBOX: str
# The types the key guard expects. Prefix entries cover every key that starts with them.
EXPECTED_TYPES: dict[str, str]
EXPECTED_PREFIX_TYPES: dict[str, str]


def use_prefix(prefix: str, shared: str | None = None, sidekiq: str = "") -> None:
    """Build every key name from `prefix` (validated by settings.py: non-empty, no whitespace, a
    balanced non-empty hash tag if any). With the Sidekiq mode on (`sidekiq` "6" or "7"), the families
    Sidekiq reads and writes too start with `shared` instead (sidekiq_rule.shared_prefix)."""
    global \
        PREFIX, \
        SHARED_PREFIX, \
        SIDEKIQ, \
        QUEUE_PREFIX, \
        QUEUES, \
        PAUSED, \
        SCHEDULE, \
        RETRY, \
        DEAD, \
        DEATHS, \
        IN_PROGRESS_PREFIX
    global IN_PROGRESS_IDENTITIES, PROCESSES, PROCESS_PREFIX, WORK_PREFIX, SIGNAL_PREFIX, LAST_BEAT
    global LIVE_QUEUES, ORPHANINGS_PREFIX, UNSETTLED, QUARANTINE_PREFIX, GUARD_REQUESTS, STAT_PROCESSED
    global STAT_FAILED, UNIQUE_PREFIX, PERIODIC_SLOT_PREFIX, PERIODIC_RUNNING_PREFIX, PERIODIC_ENTRIES
    global STATUS_PREFIX, CANCELS, RESULT_PREFIX, RESULT_CHANNEL_PREFIX, WAKE_CHANNEL
    global CHAIN_PREFIX, SUSPECTS_PREFIX, ORPHANINGS_RAW_PREFIX
    global BATCHES, BATCH_LEASES, BATCH_PREFIX, BATCH_PENDING_PREFIX, BATCH_FAILURES_PREFIX
    global STATUS_PREFIX, CANCELS, RESULT_PREFIX, RESULT_CHANNEL_PREFIX, WAKE_CHANNEL, LIMITER_PREFIX
    global HANDED_OVER_PREFIX
    global EXPECTED_TYPES, EXPECTED_PREFIX_TYPES
    global PUSHED_PREFIX, CANCELLED_PREFIX, PERIODIC_RUNS_PREFIX, PERIODIC_PAUSED, AUDIT
    global METRICS_PREFIX, METRICS_FLUSHED_PREFIX, OUTBOX
    PREFIX = prefix
    SIDEKIQ = sidekiq if shared is not None else ""
    SHARED_PREFIX = shared = prefix if shared is None else shared
    # Sidekiq's families: the queues and their registry, the job sets, the two counters and the process
    # registry. Everything else is cogworker's own and stays under `prefix` in every mode.
    QUEUE_PREFIX = shared + "queue:"  # list per queue; LPUSH to enqueue, the right end is popped next
    # list per queue: jobs orphaned more than once, each run alone by a process
    # (worker/recovering/recovery.py)
    SUSPECTS_PREFIX = prefix + "suspects:"
    QUEUES = shared + "queues"  # set: every queue name ever pushed to
    PAUSED = prefix + "paused"  # set: queue names no process fetches from
    SCHEDULE = shared + "schedule"  # zset: jobs due at a time (score = epoch seconds)
    RETRY = shared + "retry"  # zset: failed jobs waiting for their next try
    DEAD = shared + "dead"  # zset: jobs out of retries (score = time of death)
    # list: one notice per job filed in dead, written in the same script as the dead entry and popped by
    # workers with on_death hooks (api/death.py); capped at COGWORKER_DEATH_NOTICES_MAX, newest at the head
    DEATHS = prefix + "deaths"
    IN_PROGRESS_PREFIX = prefix + "inprogress:"  # list per process: fetched, not yet acknowledged
    IN_PROGRESS_IDENTITIES = prefix + "inprogress-identities"  # set: identities that may own such a list
    PROCESSES = shared + "processes"  # set: identities that have beaten
    PROCESS_PREFIX = prefix + "process:"  # hash per process, with the presence TTL
    WORK_PREFIX = prefix + "work:"  # hash per process: thread -> job running on it
    SIGNAL_PREFIX = prefix + "signals:"  # list per process: remote commands (quiet, stop, resume)
    LAST_BEAT = prefix + "last-beat"  # hash: identity -> last beat, seconds on Redis's clock
    LIVE_QUEUES = prefix + "live-queues"  # zset: queue -> last time a live process said it reads it
    ORPHANINGS_PREFIX = prefix + "orphanings:"  # string per jid: times its process died running it
    # string per SHA-1 of a payload without a jid: the same count, for a payload no jid names
    ORPHANINGS_RAW_PREFIX = prefix + "orphanings-raw:"
    UNSETTLED = prefix + "unsettled"  # list: settles a stopping process could not file itself
    # string per handover record (its SHA-1), an hour: written by the handover itself, so a handover
    # whose reply was lost is known to have happened when it is sent again (worker/settling/handover.py)
    HANDED_OVER_PREFIX = prefix + "handed-over:"
    QUARANTINE_PREFIX = prefix + "quarantine:"  # anything moved aside for a human, with a TTL
    GUARD_REQUESTS = prefix + "key-guard:requests"  # set: keys some component found of the wrong type
    STAT_PROCESSED = shared + "stat:processed"
    STAT_FAILED = shared + "stat:failed"
    UNIQUE_PREFIX = prefix + "unique:"  # string per digest: the jid holding the unique claim
    PERIODIC_SLOT_PREFIX = prefix + "periodic:slot:"  # string per (entry, slot): the one enqueue's claim
    PERIODIC_RUNNING_PREFIX = prefix + "periodic:running:"  # string per entry: the jid of the run in flight
    PERIODIC_ENTRIES = prefix + "periodic:entries"  # hash: entry name -> its registration (JSON)
    # list per entry, newest first: its last slots' outcomes (JSON), written by periodic.lua with the
    # claim and capped there (worker/loops/ticker.py RUNS_KEPT)
    PERIODIC_RUNS_PREFIX = prefix + "periodic:runs:"
    PERIODIC_PAUSED = prefix + "periodic:paused"  # set: entry names whose slots enqueue nothing
    # list, newest first: the Web UI's actions with who took them (ops/audit.py), capped
    AUDIT = prefix + "audit"
    STATUS_PREFIX = prefix + "status:"  # hash per jid, with a TTL
    # zset: jid -> when `cogworker.cancel` was asked for it (Redis's clock), trimmed by age and size;
    # every worker process reads it about once a second (worker/running/cancelled.py).
    CANCELS = prefix + "cancels"
    RESULT_PREFIX = prefix + "result:"  # string per jid, with a TTL: a job's kept result (api/results.py)
    RESULT_CHANNEL_PREFIX = prefix + "result-ready:"  # pub/sub per jid: "its result was just written"
    CHAIN_PREFIX = prefix + "chain:"  # hash per chain, with a TTL: its steps and progress (api/chain.py)
    WAKE_CHANNEL = prefix + "wake"  # pub/sub: "a job was pushed to <queue>", for idle fetchers
    # Batches (api/batch.py): a hash per batch (counts, times, callbacks), the set of its members not
    # yet finished, and a hash of its failed members (jid -> error); all expire COGWORKER_BATCH_TTL_S
    # after it completed. zset: bid -> created, for `cogworker batch list` (trimmed by the same age).
    BATCHES = prefix + "batches"
    BATCH_PREFIX = prefix + "batch:"
    BATCH_PENDING_PREFIX = prefix + "batch-pending:"
    BATCH_FAILURES_PREFIX = prefix + "batch-failures:"
    # zset: "<bid> <token>" -> expiry (epoch seconds) of each hold a block outside a member run keeps
    # on a batch; the block renews it, the poller releases a lapsed one (batch_close.lua).
    BATCH_LEASES = prefix + "batch-leases"
    # Rate limiters (api/limiter.py), one key per limiter name, expiring once idle:
    # limiter:concurrent:<name> zset of holders scored by lease end (ms, Redis's clock);
    # limiter:window:<name> and limiter:bucket:<name> hashes of the state and the limit.
    LIMITER_PREFIX = prefix + "limiter:"
    # string per jid, for minutes: the write attempt that pushed the job, written with it, so a client
    # whose reply was lost learns whether it was written, and a retry of the same jid pushes no copy
    # (api/push_outcome.py).
    PUSHED_PREFIX = prefix + "pushed:"
    # string per jid, for CANCEL_KEEP_S: what the cancel that took the job off its queue or set
    # answered, written in the same step, so a cancel retried after a lost reply answers the same.
    CANCELLED_PREFIX = prefix + "cancelled:"
    # Per-class and per-queue metrics: the minute hashes and deploy markers of store/metrics_layout.py,
    # and a string per worker process, for RETENTION_S: the last metrics flush it applied
    # (worker/metrics/flusher.py), so a flush sent again after a lost reply is not counted twice.
    METRICS_PREFIX = prefix + "metrics:"
    METRICS_FLUSHED_PREFIX = prefix + "metrics:flushed:"
    # hash: entry id -> a step to carry out after a move in another slot (sharded layout only:
    # store/outbox.py); each queue partition's slot has one too (shards.outbox).
    OUTBOX = prefix + "outbox"
    EXPECTED_TYPES = {
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
        **{stat(outcome): "string" for outcome in COUNTED_OUTCOMES},
        PERIODIC_ENTRIES: "hash",
        PERIODIC_PAUSED: "set",
        AUDIT: "list",
        GUARD_REQUESTS: "set",
        CANCELS: "zset",
        BATCHES: "zset",
        BATCH_LEASES: "zset",
        METRICS_PREFIX + "marks": "zset",
        OUTBOX: "hash",
    }
    EXPECTED_PREFIX_TYPES = {
        QUEUE_PREFIX: "list",
        SUSPECTS_PREFIX: "list",
        IN_PROGRESS_PREFIX: "list",
        PROCESS_PREFIX: "hash",
        WORK_PREFIX: "hash",
        SIGNAL_PREFIX: "list",
        ORPHANINGS_PREFIX: "string",
        ORPHANINGS_RAW_PREFIX: "string",
        HANDED_OVER_PREFIX: "string",
        UNIQUE_PREFIX: "string",
        STATUS_PREFIX: "hash",
        RESULT_PREFIX: "string",
        CHAIN_PREFIX: "hash",
        PERIODIC_SLOT_PREFIX: "string",
        PERIODIC_RUNNING_PREFIX: "string",
        PERIODIC_RUNS_PREFIX: "list",
        STAT_PROCESSED + ":": "string",  # the per-day counters
        STAT_FAILED + ":": "string",
        BATCH_PREFIX: "hash",
        BATCH_PENDING_PREFIX: "set",
        BATCH_FAILURES_PREFIX: "hash",
        LIMITER_PREFIX + "concurrent:": "zset",
        LIMITER_PREFIX + "window:": "hash",
        LIMITER_PREFIX + "bucket:": "hash",
        PUSHED_PREFIX: "string",
        CANCELLED_PREFIX: "string",
        METRICS_PREFIX + "j:": "hash",
        METRICS_PREFIX + "q:": "hash",
        METRICS_FLUSHED_PREFIX: "string",
    }


def job_sets() -> dict[str, str]:
    """The sorted sets of jobs, by the name the CLI, the UI and the metrics give them."""
    return {"retry": RETRY, "scheduled": SCHEDULE, "dead": DEAD}


def queue(name: str) -> str:
    return QUEUE_PREFIX + name


def queue_name(key: str) -> str:
    return key.removeprefix(QUEUE_PREFIX)


def metrics_flushed(identity: str) -> str:
    return METRICS_FLUSHED_PREFIX + identity


def in_progress(identity: str) -> str:
    return IN_PROGRESS_PREFIX + identity


def process(identity: str) -> str:
    return PROCESS_PREFIX + identity


def work(identity: str) -> str:
    return WORK_PREFIX + identity


def signals(identity: str) -> str:
    return SIGNAL_PREFIX + identity


def handed_over(record_digest: str) -> str:
    return HANDED_OVER_PREFIX + record_digest


def orphanings(jid: str) -> str:
    return ORPHANINGS_PREFIX + jid


def orphanings_raw(digest: str) -> str:
    """The orphan counter of a payload without a jid, by the SHA-1 (hex) of its bytes."""
    return ORPHANINGS_RAW_PREFIX + digest


def suspects(name: str) -> str:
    return SUSPECTS_PREFIX + name


def stat_processed_day(day: str) -> str:
    return f"{STAT_PROCESSED}:{day}"


def stat_failed_day(day: str) -> str:
    return f"{STAT_FAILED}:{day}"


def stat(outcome: str) -> str:
    """A counter by name: processed and failed are the shared ones, the others cogworker's own."""
    start = SHARED_PREFIX if outcome in SHARED_STATS else PREFIX
    return f"{start}stat:{outcome}"


def stat_day(outcome: str, day: str) -> str:
    return f"{stat(outcome)}:{day}"


def pushed(jid: str) -> str:
    return PUSHED_PREFIX + jid


def cancelled(jid: str) -> str:
    return CANCELLED_PREFIX + jid


def unique(digest: str) -> str:
    return UNIQUE_PREFIX + digest


def periodic_slot(name: str, slot: int) -> str:
    return f"{PERIODIC_SLOT_PREFIX}{name}:{slot}"


def periodic_runs(name: str) -> str:
    return PERIODIC_RUNS_PREFIX + name


def periodic_running(name: str) -> str:
    return PERIODIC_RUNNING_PREFIX + name


def status(jid: str) -> str:
    return STATUS_PREFIX + jid


def result(jid: str) -> str:
    return RESULT_PREFIX + jid


def result_channel(jid: str) -> str:
    return RESULT_CHANNEL_PREFIX + jid


def chain(cid: str) -> str:
    return CHAIN_PREFIX + cid


def batch(bid: str) -> str:
    return BATCH_PREFIX + bid


def batch_pending(bid: str) -> str:
    return BATCH_PENDING_PREFIX + bid


def batch_failures(bid: str) -> str:
    return BATCH_FAILURES_PREFIX + bid


def limiter(kind: str, name: str) -> str:
    """A limiter's state: `kind` is concurrent, window or bucket."""
    return f"{LIMITER_PREFIX}{kind}:{name}"


def quarantine(what: str) -> str:
    return QUARANTINE_PREFIX + what


use_prefix(DEFAULT_PREFIX)
