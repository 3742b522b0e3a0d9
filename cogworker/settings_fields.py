"""Every setting's name, type and default (each is a `COGWORKER_*` variable, listed with its default in
deploy_kit/cogworker.env.example), without pydantic.

Two classes have them. cogworker.settings.Settings, the pydantic model built from the environment,
derives from SettingsFields and adds the checks: every command but the swarm's workers validates its
settings with it. PlainSettings holds settings already validated by that model in another process:
a swarm's fork server starts one process that validates them while it imports the worker code
(supervisor/forkserver/settings_check.py), and then it and every worker forked from it hold a
PlainSettings. pydantic and pydantic-settings are a third of what a worker would import otherwise
(about 90 ms on the way to a swarm's first job and every restart's); a worker imports pydantic only
for a job with typed arguments (api/typed_args.py).

Code that only reads settings takes a SettingsFields, so it takes either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cogworker.queue_names import QUEUE_NAME_RULE, is_queue_name
from cogworker.redact import safe_url
from cogworker.secret import Secret
from cogworker.usable_cpus import usable_cpus


@dataclass(frozen=True)
class QueueSpec:
    """The queues a process reads: names with weights, or a strict order (all weights None)."""

    names: tuple[str, ...]
    weights: tuple[int, ...] | None  # None: strict order, first non-empty queue wins

    @property
    def strict(self) -> bool:
        return self.weights is None


def parse_queues(text: str) -> QueueSpec:
    """`a:3,b:1` (weighted) or `a,b` (strict). Mixing the two forms is an error."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("at least one queue name is needed")
    weighted = [":" in p for p in parts]
    if any(weighted) and not all(weighted):
        raise ValueError("give every queue a weight (a:3,b:1) or none (a,b), not a mix")
    names: list[str] = []
    weights: list[int] = []
    for part in parts:
        name, _, weight = part.partition(":")
        name = name.strip()
        if not is_queue_name(name):
            raise ValueError(f"{part!r} is not a queue name ({QUEUE_NAME_RULE})")
        if name in names:
            raise ValueError(f"queue {name!r} is listed twice")
        names.append(name)
        if weight:
            if not weight.strip().isdigit() or int(weight) < 1:
                raise ValueError(f"weight in {part!r} must be a whole number of 1 or more")
            weights.append(int(weight))
    return QueueSpec(tuple(names), tuple(weights) if all(weighted) else None)


# More partitions than this buys nothing on any cluster Redis documents (its masters top out far below),
# and every fetcher, poller and reader walks each one.
MAX_PARTITIONS = 64


@dataclass(frozen=True)
class PartitionSpec:
    """COGWORKER_QUEUE_PARTITIONS parsed: a count for every queue, with per-queue exceptions."""

    default: int = 1
    per_queue: tuple[tuple[str, int], ...] = ()

    def count(self, queue: str) -> int:
        return dict(self.per_queue).get(queue, self.default)


def parse_partitions(text: str) -> PartitionSpec:
    """`4` (every queue), `default=4,reports=2` (the rest one), or empty (one each)."""
    text = text.strip()
    if not text:
        return PartitionSpec()

    def number(part: str, value: str) -> int:
        if not value.strip().isdigit() or not 1 <= int(value) <= MAX_PARTITIONS:
            raise ValueError(f"{part!r}: a partition count is a whole number from 1 to {MAX_PARTITIONS}")
        return int(value)

    if "=" not in text:
        return PartitionSpec(default=number(text, text))
    per_queue: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not is_queue_name(name):
            raise ValueError(f"{part!r} is not <queue>=<count> ({QUEUE_NAME_RULE})")
        if name in per_queue:
            raise ValueError(f"queue {name!r} is given twice")
        per_queue[name] = number(part, value)
    return PartitionSpec(per_queue=tuple(sorted(per_queue.items())))


class SettingsFields:
    """The settings' names, types and defaults; read-only for every process (both subclasses are frozen)."""

    # Each field's docstring (the string below it) is its description on the docs site's settings page
    # (docs/hooks/reference.py reads them); a test fails when a field has none.

    redis_url: str = "redis://localhost:6379/0"
    """Where the queues live: `redis://[user:password@]host:port/db`, `rediss://` for TLS,
    `unix:///path/to/redis.sock?db=0`, `redis+cluster://` seed nodes or a `redis+sentinel://` URL. Redis
    6.2 or newer gives reliable fetch. %-encode a password holding `/ ? # @ :`; logs show it as `***`."""
    redis_timeout_s: float = 5.0
    """Seconds a Redis command may take before the client gives up and counts Redis as down (a blocking
    wait gets its block time on top)."""
    require: str = ""
    """Comma-separated modules every worker imports at start so their `@job` functions are known (like
    `sidekiq -r`); their submodules are imported on demand. A swarm without it can run none of your jobs."""
    queues: str = "default"
    """The queues to read: weighted (`critical:3,default:1`, picked in proportion to the weights) or in
    strict order (`critical,default`, the first non-empty queue wins)."""
    concurrency: int = 10
    """Job threads in each worker process."""
    async_concurrency: int = 100
    """`async def` jobs running at once on each worker's one event loop (worker/running/async_loop.py), beside
    the `concurrency` job threads."""
    async_lag_threshold_s: float = 0.5
    """How long the event loop may go without running a callback before the job blocking it is logged
    with its stack (`async_loop_blocked`): a sync call inside `async def` stalls every async job."""
    job_timeout_s: float | None = None
    """The time limit of a job that sets no `timeout_s` (api/time_limits.py). Unset: none, as in
    Sidekiq, since a limit interrupts a job wherever it is; set one only for jobs safe to cut short."""
    job_timeout_grace_s: float = 10.0
    """How long past its limit a job no exception reaches (stuck in a C call or a lock) may stay before
    it is filed as failed with `JobTimeout` and its process replaced (`job_stuck` in the log)."""
    count: int = usable_cpus()
    """Worker processes in a swarm: by default one per CPU this process may use (its affinity mask,
    lowered to its cgroup's CPU quota, at least 1; usable_cpus.py), not one per CPU of the host."""
    timeout_s: float = 25.0
    """How long a worker told to stop waits for its running jobs; what still runs then is requeued."""
    graceful_stop_timeout_s: float = 35.0
    """How long a stopping swarm waits for its children before it kills stragglers and requeues their
    jobs. Keep it below the systemd unit's `TimeoutStopSec=`."""
    maxmem_mb: int | None = None
    """Restart a swarm child gracefully when its memory (RSS) goes above this many MB. Unset: off."""
    preload: bool = False
    """Import the app (`COGWORKER_REQUIRE`) in the fork server before forking, so children share its
    memory copy-on-write. A restart still runs the code on disk at the time of the restart."""
    phased_restart: bool = True
    """A reload (SIGHUP) replaces the swarm's children one at a time, each replacement ready before the
    old child is told to stop; false: all at once."""
    respawn_base_delay_s: float = 1.0
    """The first wait before a slot whose children keep dying young gets a new one; it doubles up to
    `respawn_max_delay_s`, so an app that crashes at boot doesn't spin the CPU."""
    respawn_max_delay_s: float = 60.0
    """The longest wait before a crashing slot gets a new child."""
    healthy_uptime_s: float = 30.0
    """A child that ran at least this long before it died is replaced at once (the backoff resets)."""
    restart_ready_timeout_s: float = 60.0
    """How long a replacement child may take to report ready in a rolling restart; past it the restart
    fails and the old child keeps running."""
    boot_timeout_s: float = 120.0
    """How long a new child may take to say its first line (it imports the app first, without preload),
    and a new fork server to be ready, before it is killed as hung at boot."""
    memory_check_interval_s: float = 5.0
    """Seconds between checks of the children's memory against `maxmem_mb`."""
    orphan_threshold_s: float = 300.0
    """Seconds without a heartbeat after which a process (on any host) is presumed dead and its
    in-progress jobs are recovered by the others."""
    max_orphanings: int = 3
    """A job recovered from dead processes more often than this is a poison pill and goes to dead."""
    log_format: Literal["json", "console", "auto"] = "auto"
    """`json` (one object a line) or `console` (for people); `auto`: console on a terminal, else json."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """The lowest level logged, by cogworker and by the standard library's loggers (your app's, its
    libraries') unless `log_levels` names them."""
    log_levels: str = ""
    """Levels per standard-library logger, overriding `log_level` for those loggers and the loggers
    under them: `urllib3=warning,myapp.jobs=debug` (levels: debug, info, warning, error, critical)."""
    # Intervals most job systems hard-code, settings here so tests and operators can shorten them.
    heartbeat_interval_s: float = 5.0
    """Seconds between a process's heartbeats to Redis (what `orphan_threshold_s` measures)."""
    presence_ttl_s: float = 60.0
    """Seconds a process's presence key lives without a new heartbeat."""
    poll_interval_s: float = 5.0
    """Seconds between polls for due scheduled and retry jobs (randomised by ±50 % so processes don't
    poll in lockstep). Between polls each process looks at the sets' first entries once a second, so
    a job falling due is enqueued within about a second of its time, whatever this is."""
    orphan_check_interval_s: float = 60.0
    """Seconds between checks for jobs left in progress by dead processes."""
    key_guard_interval_s: float = 300.0
    """Seconds between checks that cogworker's keys have the right Redis types."""
    fetch_idle_max_s: float = 1.0
    """Seconds an idle fetcher reading several queues waits before looking again when no wake-up came."""
    dead_max_jobs: int = 10_000
    """The dead set keeps at most this many jobs (the oldest go first)."""
    dead_timeout_s: float = 180 * 24 * 3600
    """The dead set keeps a job at most this long (180 days)."""
    death_notices_max: int = 1000
    """Death notices (`cogworker:deaths`, for `on_death` hooks) kept at most: bounded even with no hooks."""
    status_ttl_s: float = 30 * 60
    """How long a job's status (`cogworker.status(jid)`) is kept."""
    unique_ttl_s: float = 3600.0
    """Default lifetime of a unique job's claim, counted from when the job is due (`unique_for=`)."""
    liveness_timeout_s: float = 30.0
    """Seconds a swarm child may stay silent on its pipe before the supervisor treats it as hung
    (SIGKILL, its jobs requeued, a new child), counted from the child's first line."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on this TCP port. Unset: off."""
    metrics_host: str = "127.0.0.1"
    """The address the metrics port listens on; loopback unless you mean to expose it."""
    metrics: bool = True
    """Record per-class and per-queue metrics in Redis (the Web UI's Metrics page): each worker process
    adds up its jobs in memory and writes them in one script call every `metrics_flush_s`."""
    metrics_flush_s: float = 5.0
    """Seconds between a worker process's writes of its per-class metrics (and at a clean stop)."""
    metrics_job_labels: bool = True
    """Label the swarm's Prometheus job counts and durations by job class (`job`); off: every job is
    counted under `job="(all)"`, one series per queue."""
    metrics_max_job_labels: int = 200
    """The swarm's Prometheus metrics label at most this many job classes; jobs of any further class
    are counted under `job="(other)"`, so generated class names can't grow every scrape."""
    quarantine_ttl_s: float = 30 * 24 * 3600
    """Seconds quarantined records (wrong-type keys, unusable hand-overs) are kept for a human."""
    status_all: bool = False
    """Record a status for every job, not only those with `@job(status=True)` (api/job_status.py)."""
    result_ttl_s: float | None = None
    """Keep every job's result this long unless its options say otherwise (api/results.py). Unset: only
    jobs with `@job(result_ttl=...)` keep one. Read where jobs are pushed: the pushing side decides."""
    periodic_check_interval_s: float = 1.0
    """How often the poller looks for due periodic slots (api/periodic.py, worker/loops/ticker.py); it can't
    look more often than it polls: lower `poll_interval_s` for sub-minute crons."""
    periodic_grace_s: float = 3600.0
    """How late a periodic slot missed during downtime may still be enqueued (only the latest, once)."""
    web_host: str = "127.0.0.1"
    """Where `cogworker web` listens. Anything but loopback needs `web_username` and `web_password`."""
    web_port: int = 7433
    """The port `cogworker web` listens on."""
    web_username: str = ""
    """The Web UI's HTTP Basic user name (set both it and `web_password`, or neither)."""
    web_password: Secret = Secret("")
    """The Web UI's HTTP Basic password (set both it and `web_username`, or neither)."""
    web_read_only: bool = False
    """The Web UI shows everything and changes nothing: every action hidden and refused."""
    web_session_secret: Secret = Secret("")
    """The key that signs the Web UI's session cookie. Unset: random per process, so flash messages
    don't survive a restart."""
    web_trust_forwarded: bool = False
    """Whether the Web UI's same-origin check believes a reverse proxy's `X-Forwarded-Proto` and
    `X-Forwarded-Host`: only behind a proxy that sets them, or a client could claim any origin."""
    # TLS to Redis, for a `rediss://` URL. Every connection cogworker makes uses these; they are checked
    # (readable, a certificate that matches its key) at start, so a bad one stops the command with exit
    # 78, not each connection later.
    redis_ssl_ca_file: str = ""
    """The CA that signed the Redis server's certificate (unset: the system's trust store)."""
    redis_ssl_cert_file: str = ""
    """A client certificate, for a Redis that demands one (`tls-auth-clients yes`); with its key."""
    redis_ssl_key_file: str = ""
    """The client certificate's unencrypted private key."""
    redis_ssl_check_hostname: bool = True
    """Whether the Redis server's certificate must name the URL's host."""
    redis_cluster: bool = False
    """Treat a `redis://` or `rediss://` URL as one seed node of a Redis Cluster (a `redis+cluster://` URL
    says so itself). Needs a hash-tagged `key_prefix` (cluster_url.check_prefix says why)."""
    key_prefix: str = "cogworker:"
    """The start of every key and channel name (store/keys.py), so apps with different prefixes share one
    Redis unseen by each other. A hash tag in it (`{myapp}:`) puts every key in one Redis Cluster slot,
    which cluster mode needs: a script's keys must share a slot. Changing it strands the old keys' jobs."""
    cluster_sharding: Literal["off", "queues"] = "off"
    """With a Redis Cluster, `queues` spreads the deployment over the cluster's masters: each queue (or
    each partition of one, `queue_partitions`) keeps its jobs, in-progress lists, sets and counters in a
    slot of its own, and everything else in one home slot (store/shards.py). Needs a `key_prefix` with no
    hash tag. `off` keeps the whole deployment in the prefix's one slot."""
    queue_partitions: str = ""
    """With `cluster_sharding=queues`, how many partitions each queue has: `4` (every queue), or
    `default=4,reports=2` (the rest have one). Pushes spread over a queue's partitions and fetchers read
    them all. Raising it later is safe; lowering it leaves the old partitions read until they are empty
    (the count recorded in Redis only grows)."""
    sidekiq_compat: Literal["off", "6", "7"] = "off"
    """Share one Redis with Ruby's Sidekiq (docs/migrating/beside-sidekiq.md): `6` or `7` names the Sidekiq
    version beside this deployment. The queues, the queue registry, the schedule, retry and dead sets, the
    processed and failed counters and the process registry then take Sidekiq's names (bare keys, or under
    `sidekiq_namespace`); every key only cogworker uses stays under `key_prefix`. Each process also writes
    the presence Sidekiq's Web UI reads, and payloads follow Sidekiq's meanings. Not with a Redis Cluster,
    which Sidekiq doesn't run on. `off`: no key or payload changes, and no cost."""
    sidekiq_namespace: str = ""
    """With `sidekiq_compat=6`, the redis-namespace the Sidekiq app sets (`namespace: "myapp"` in its Redis
    options): the shared keys are then `myapp:queue:default` and so on. Empty: bare keys, as Sidekiq
    writes them without a namespace (Sidekiq 7 has no namespaces)."""
    sidekiq_metrics: bool = False
    """With `sidekiq_compat=7` (and `metrics` on), each worker process's metrics flush also writes the keys
    Sidekiq 7's Metrics tab reads for the Python jobs it ran: per-minute run, failure and millisecond
    counts per class, and the execution-time histograms, in Sidekiq's names and units."""
    cpu_affinity: Literal["auto", "none", "spread"] = "auto"
    """Whether the swarm pins each worker to one CPU (supervisor/forkserver/cpu_affinity.py). `spread`:
    slot N's worker runs on the Nth CPU the swarm may use; `auto`: the same when there is one worker per
    CPU, and a worker found using more than one CPU (threads computing outside the GIL: numpy, torch,
    compression) is unpinned while it does; `none`: the kernel places every thread. Pinned, short
    Redis-bound jobs ran 40-70 % faster (RUNBOOK "Pinning workers to CPUs")."""
    cpu_affinity_probe_interval_s: float = 60.0
    """With `cpu_affinity=auto`, how often a pinned worker is unpinned for a second to see whether it uses
    more than one CPU."""
    redis_sentinels: str = ""
    """Redis Sentinel without a `redis+sentinel://` URL: the sentinels, `host:port` (26379 if left out),
    comma-separated; the URL then gives the master's password and database (redis_sentinel.py)."""
    redis_sentinel_master: str = ""
    """The master's name the sentinels know, with `redis_sentinels`."""
    redis_sentinel_password: Secret = Secret("")
    """The sentinels' own password (their `requirepass`), in either form; never put it in the URL."""
    redis_min_replicas: int = 0
    """A push (and a fetch's acknowledgements) returns only once WAIT saw it reach this many replicas
    within `redis_min_replicas_timeout_s`; fewer: the push raises `NotReplicated` (store/replicas.py).
    0: no WAIT."""
    redis_min_replicas_timeout_s: float = 1.0
    """How long a push waits for `redis_min_replicas`; below `redis_timeout_s` when that is on."""
    limiter_max_wait_s: float = 3600.0
    """How long in all a job may be put back in the schedule set by a full rate limiter before `OverLimit`
    is its failure (a limiter's `max_wait_s=` overrides it; api/limiter.py, api/limit_jobs.py)."""
    batch_ttl_s: float = 30 * 24 * 3600.0
    """How long a completed batch's records (its hash, pending set and failures) are kept: `batch_status`
    and the Web UI read them until then (api/batch.py). An open batch's keys have no expiry."""
    batch_hold_lease_s: float = 60.0
    """A block that holds a batch outside a member run of it (`with cogworker.batch()` in an app) renews a
    lease this long, every third of it; if its process dies, the poller releases the hold this long after
    the last renewal (api/batch_holds.py)."""

    @property
    def queue_spec(self) -> QueueSpec:
        """COGWORKER_QUEUES parsed: the queues a worker fetches from, weighted or in strict order."""
        return parse_queues(self.queues)

    @property
    def partition_spec(self) -> PartitionSpec:
        """COGWORKER_QUEUE_PARTITIONS parsed (store/shards.py uses it only with cluster_sharding=queues)."""
        return parse_partitions(self.queue_partitions)

    @property
    def require_modules(self) -> tuple[str, ...]:
        """COGWORKER_REQUIRE as a list: the modules a worker imports (its jobs' modules)."""
        return tuple(m.strip() for m in self.require.split(",") if m.strip())


FIELD_NAMES: tuple[str, ...] = tuple(SettingsFields.__annotations__)
# With postponed annotations these are the annotations' texts.
SECRET_FIELDS = frozenset(name for name, kind in SettingsFields.__annotations__.items() if kind == "Secret")


class PlainSettings(SettingsFields):
    """Settings validated elsewhere, rebuilt from `values_of`'s dict: frozen, equal by value."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        missing = [name for name in FIELD_NAMES if name not in values]
        if missing:
            raise ValueError(f"settings values lack {', '.join(missing)}")
        for name in FIELD_NAMES:
            value = values[name]
            if name in SECRET_FIELDS and not isinstance(value, Secret):
                value = Secret(value)
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"settings are read-only (tried to set {name})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlainSettings) and values_of(other, reveal=True) == values_of(
            self, reveal=True
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = values_of(self, reveal=False)
        shown["redis_url"] = safe_url(self.redis_url)
        return "PlainSettings(" + ", ".join(f"{name}={value!r}" for name, value in shown.items()) + ")"


def values_of(settings: SettingsFields, *, reveal: bool) -> dict[str, Any]:
    """Every setting by name, as JSON takes them: a secret as itself (`reveal`) or as stars."""
    values: dict[str, Any] = {}
    for name in FIELD_NAMES:
        value = getattr(settings, name)
        if isinstance(value, Secret):
            value = value.get_secret_value() if reveal else str(value)
        values[name] = value
    return values
