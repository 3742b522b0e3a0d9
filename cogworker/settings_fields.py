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


class SettingsFields:
    """The settings' names, types and defaults; read-only for every process (both subclasses are frozen)."""

    redis_url: str = "redis://localhost:6379/0"
    # Seconds a Redis command may take before the client gives up and counts Redis as down (a
    # blocking wait gets its block time on top).
    redis_timeout_s: float = 5.0
    require: str = ""
    queues: str = "default"
    concurrency: int = 10
    # `async def` jobs (worker/running/async_loop.py): how many run at once on each worker's event
    # loop, beside the `concurrency` job threads, and how long the loop may go without running a
    # callback before the job blocking it is logged with its stack (a sync call inside `async def`
    # stalls them all).
    async_concurrency: int = 100
    async_lag_threshold_s: float = 0.5
    # Job time limits (api/time_limits.py, worker/running/time_limits.py): the default limit of a
    # job that sets no `timeout_s` (None: none, as in Sidekiq: a limit interrupts a job wherever it
    # is), and how long past its limit a job no exception reaches may stay stuck before its process
    # is replaced.
    job_timeout_s: float | None = None
    job_timeout_grace_s: float = 10.0
    # Worker processes in a swarm: by default one per CPU this process may use (its affinity mask,
    # lowered to its cgroup's CPU quota; usable_cpus.py), not one per CPU of the host.
    count: int = usable_cpus()
    timeout_s: float = 25.0
    graceful_stop_timeout_s: float = 35.0
    maxmem_mb: int | None = None
    preload: bool = False
    phased_restart: bool = True
    # Swarm (supervisor/): respawn backoff for a slot whose child keeps dying young (1 s doubling to
    # a minute, reset after 30 s of health), how long a replacement may take to report ready in a restart, how
    # long a child may take to say its first line (it imports the app first, without preload; the
    # liveness timeout starts after that), and how often children's memory is checked.
    respawn_base_delay_s: float = 1.0
    respawn_max_delay_s: float = 60.0
    healthy_uptime_s: float = 30.0
    restart_ready_timeout_s: float = 60.0
    boot_timeout_s: float = 120.0
    memory_check_interval_s: float = 5.0
    orphan_threshold_s: float = 300.0
    max_orphanings: int = 3
    log_format: Literal["json", "console", "auto"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Intervals most job systems hard-code, settings here so tests and operators can shorten them.
    heartbeat_interval_s: float = 5.0
    presence_ttl_s: float = 60.0
    poll_interval_s: float = 5.0
    orphan_check_interval_s: float = 60.0
    key_guard_interval_s: float = 300.0
    fetch_idle_max_s: float = 1.0
    dead_max_jobs: int = 10_000
    dead_timeout_s: float = 180 * 24 * 3600
    # Death notices (cogworker:deaths, for on_death hooks) kept at most: bounded even with no hooks.
    death_notices_max: int = 1000
    status_ttl_s: float = 30 * 60
    unique_ttl_s: float = 3600.0
    liveness_timeout_s: float = 30.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    quarantine_ttl_s: float = 30 * 24 * 3600
    # Job status (api/job_status.py): record it for every job, not only those with @job(status=True).
    status_all: bool = False
    # Job results (api/results.py): keep every job's result this long unless its options say (unset:
    # only jobs with @job(result_ttl=...) keep one).
    result_ttl_s: float | None = None
    # Periodic jobs (api/periodic.py, worker/loops/ticker.py): how often the poller looks for due slots
    # (it can't look more often than it polls: lower poll_interval_s for sub-minute crons), and how
    # late a slot missed during downtime may still be enqueued.
    periodic_check_interval_s: float = 1.0
    periodic_grace_s: float = 3600.0
    # The Web UI (cogworker/web/): where `cogworker web` listens; HTTP Basic credentials (required to
    # listen anywhere but loopback); read-only mode (every action hidden and refused); the key that
    # signs its session cookie (random per process when unset: flash messages then don't survive a
    # restart); and whether the same-origin check believes a reverse proxy's X-Forwarded-Proto and
    # X-Forwarded-Host (only behind a proxy that sets them, or a client could claim any origin).
    web_host: str = "127.0.0.1"
    web_port: int = 7433
    web_username: str = ""
    web_password: Secret = Secret("")
    web_read_only: bool = False
    web_session_secret: Secret = Secret("")
    web_trust_forwarded: bool = False
    # TLS to Redis, for a `rediss://` URL (README "TLS and ACL users"): the CA that signed the server's
    # certificate (unset: the system's trust store), a client certificate and its key for a server that
    # demands one (`tls-auth-clients yes`), and whether the server's certificate must name the URL's
    # host. Every connection cogworker makes uses them; they are checked (readable, a certificate that
    # matches its key) at start, so a bad one stops the command with exit 78, not each connection later.
    redis_ssl_ca_file: str = ""
    redis_ssl_cert_file: str = ""
    redis_ssl_key_file: str = ""
    redis_ssl_check_hostname: bool = True
    # Redis Cluster (README "Redis Cluster"): the URL names seed nodes. Set by a redis+cluster:// or
    # rediss+cluster:// URL, or by this with a redis:// / rediss:// URL naming one node. Needs a
    # hash-tagged COGWORKER_KEY_PREFIX (cluster_url.check_prefix says why).
    redis_cluster: bool = False
    # Every key and channel name starts with this (store/keys.py), so apps with different prefixes share
    # one Redis unseen by each other. A hash tag in it (`{myapp}:`) puts all of them in one Redis
    # Cluster slot, which cluster mode needs: a script's keys must share a slot.
    key_prefix: str = "cogworker:"
    # COGWORKER_CPU_AFFINITY: whether the swarm pins each worker to one CPU (supervisor/forkserver/
    # cpu_affinity.py). A CPython process runs Python on one CPU at a time; spread across CPUs, its
    # threads hand the GIL over from core to core at every socket call, and a core idles while the
    # thread it woke waits to run elsewhere. Pinned, short Redis-bound jobs ran 40-70 % faster (RUNBOOK
    # "Pinning workers to CPUs"). `spread`: slot N's worker (and every thread it starts) runs on the Nth
    # CPU the swarm may use, wrapping round. `auto`: the same when there is one worker per CPU (COUNT
    # equals those CPUs), and a pinned worker checks every cpu_affinity_probe_interval_s, unpinned for
    # a second, whether it uses more than one CPU (threads computing outside the GIL: numpy, torch,
    # compression); it stays unpinned while it does. `none`: the kernel places every thread.
    cpu_affinity: Literal["auto", "none", "spread"] = "auto"
    cpu_affinity_probe_interval_s: float = 60.0
    # Redis Sentinel (README "Redis Sentinel"; redis_sentinel.py): the sentinels and the master's name,
    # as an alternative to a redis+sentinel:// URL, and the sentinels' own password (both forms).
    redis_sentinels: str = ""
    redis_sentinel_master: str = ""
    redis_sentinel_password: Secret = Secret("")
    # A push (and a fetch's acknowledgements) returns only once WAIT saw it reach this many replicas
    # within redis_min_replicas_timeout_s (store/replicas.py says what fewer means). 0: no WAIT.
    redis_min_replicas: int = 0
    redis_min_replicas_timeout_s: float = 1.0
    # Rate limiters (api/limiter.py, api/limit_jobs.py): how long in all a job may be put back in the
    # schedule set by a full limiter before OverLimit is its failure (a limiter's max_wait_s= overrides it).
    limiter_max_wait_s: float = 3600.0
    # Batches (api/batch.py): how long a batch's records (its hash, pending set and failures) are kept
    # once it completed: `batch_status` and the Web UI read them until then. An open batch's keys have
    # no expiry (it may wait on a retried member for weeks); its completion starts the clock.
    batch_ttl_s: float = 30 * 24 * 3600.0
    # A block that holds a batch outside a member run of that batch (`with cogworker.batch()` in an
    # app, say) renews a lease this long, every third of it; if its process dies, the hold lapses
    # this long after the last renewal and the poller releases it (api/batch_holds.py).
    batch_hold_lease_s: float = 60.0

    @property
    def queue_spec(self) -> QueueSpec:
        """COGWORKER_QUEUES parsed: the queues a worker fetches from, weighted or in strict order."""
        return parse_queues(self.queues)

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
