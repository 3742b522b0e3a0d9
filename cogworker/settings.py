"""One typed, frozen settings object built from `COGWORKER_*` variables (each is listed, with its
default, in deploy/cogworker.env.example; some concerns' fields live in bases, *_settings.py). Built
once per command and passed down explicitly; nothing deeper reads the environment. A bad value is
reported as one line naming the variable and what it accepts; the command exits 78 (CONFIG_ERROR).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from cogworker import cluster_url, exitcodes, redis_sentinel, redis_tls
from cogworker.affinity_settings import AffinitySettings
from cogworker.limiter_settings import LimiterSettings
from cogworker.prefix_rule import check_key_prefix
from cogworker.queue_names import QUEUE_NAME_RULE, is_queue_name
from cogworker.redact import safe_url
from cogworker.replication_settings import ReplicationSettings
from cogworker.workflow_settings import WorkflowSettings

_SCHEMES = ("redis", "rediss", "unix", *redis_sentinel.SCHEMES)
# A password holding one of these characters ends the URL's host part early, and the rest of it
# reads as a port, a path or a fragment.
_ENCODE_HINT = " (a password holding / ? # @ or : must be %-encoded, e.g. / as %2F)"


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


class Settings(ReplicationSettings, WorkflowSettings, LimiterSettings, AffinitySettings):
    model_config = SettingsConfigDict(
        env_prefix="COGWORKER_",
        env_nested_delimiter="__",
        frozen=True,
        extra="ignore",
        # pydantic's own message quotes the input: the Redis URL's password, for a Settings() built
        # directly. load_settings reports the (redacted) value itself.
        hide_input_in_errors=True,
        # "nan" and "inf" parse as floats: TIMEOUT_S=nan meant no drain at all.
        allow_inf_nan=False,
    )

    redis_url: str = "redis://localhost:6379/0"
    # Seconds a Redis command may take before the client gives up and counts Redis as down (a
    # blocking wait gets its block time on top).
    redis_timeout_s: float = 5.0
    require: str = ""
    queues: str = "default"
    concurrency: int = 10
    # `async def` jobs (worker/async_loop.py): how many run at once on each worker's event loop, beside
    # the `concurrency` job threads, and how long the loop may go without running a callback before
    # the job blocking it is logged with its stack (a sync call inside `async def` stalls them all).
    async_concurrency: int = 100
    async_lag_threshold_s: float = 0.5
    # Job time limits (api/time_limits.py, worker/time_limits.py): the default limit of a job that sets
    # no `timeout_s` (None: none, as in Sidekiq: a limit interrupts a job wherever it is), and how long
    # past its limit a job no exception reaches may stay stuck before its process is replaced.
    job_timeout_s: float | None = None
    job_timeout_grace_s: float = 10.0
    count: int = max(os.cpu_count() or 1, 1)
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
    # Periodic jobs (api/periodic.py, worker/ticker.py): how often the poller looks for due slots
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
    web_password: SecretStr = SecretStr("")
    web_read_only: bool = False
    web_session_secret: SecretStr = SecretStr("")
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

    @field_validator("redis_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if value.partition("://")[0] in cluster_url.CLUSTER_SCHEMES:
            cluster_url.seeds(value)  # several hosts: urlparse can't read them
            return value
        parsed = urlparse(value)
        if parsed.scheme not in _SCHEMES:
            raise ValueError(
                "must start with redis://, rediss://, unix://, redis(s)+cluster://, redis+sentinel://"
            )
        if redis_sentinel.is_sentinel_url(value):
            return redis_sentinel.checked_url(value)
        try:
            port = parsed.port
        except ValueError:
            # Not the parser's message: it quotes what it took for the port, which may be part of
            # a password.
            raise ValueError(f"has a bad port{_ENCODE_HINT}") from None
        if parsed.scheme != "unix" and not parsed.hostname:
            raise ValueError(f"names no host (e.g. redis://localhost:6379/0){_ENCODE_HINT}")
        if parsed.scheme == "unix" and not parsed.path:
            raise ValueError("names no socket path (e.g. unix:///run/redis/redis.sock)")
        if "@" in parsed.path + parsed.query + parsed.fragment:
            # The parser took the start of a password for the host: redis-py would try that host.
            raise ValueError(f"has an '@' after its host{_ENCODE_HINT}")
        database = parsed.path.replace("/", "")  # as redis-py reads it
        if parsed.scheme != "unix" and database and not database.isdigit():
            raise ValueError("names a bad database: the path is a number (redis://localhost:6379/0)")
        del port
        return value

    @field_validator("redis_ssl_ca_file", "redis_ssl_cert_file", "redis_ssl_key_file")
    @classmethod
    def _readable_file(cls, value: str) -> str:
        return redis_tls.readable(value) if value else value

    @field_validator("key_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        return check_key_prefix(value)

    @field_validator("queues")
    @classmethod
    def _check_queues(cls, value: str) -> str:
        parse_queues(value)
        return value

    @field_validator(
        "concurrency", "async_concurrency", "count", "max_orphanings", "dead_max_jobs", "death_notices_max"
    )
    @classmethod
    def _positive_int(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be 1 or more")
        return value

    @field_validator("maxmem_mb")
    @classmethod
    def _positive_mem(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("must be 1 or more (MB), or unset")
        return value

    @field_validator("metrics_port")
    @classmethod
    def _port(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 65535:
            raise ValueError("must be a TCP port (1 to 65535), or unset")
        return value

    @field_validator("web_port")
    @classmethod
    def _web_port(cls, value: int) -> int:
        if not 1 <= value <= 65535:
            raise ValueError("must be a TCP port (1 to 65535)")
        return value

    @field_validator("*")
    @classmethod
    def _seconds(cls, value: object, info: ValidationInfo) -> object:
        """Every float setting is a number of seconds: above 0 and at most ten years (a larger wait
        overflows thread timeouts and Redis expiries). nan and inf are refused by `allow_inf_nan`."""
        if isinstance(value, float) and not 0 < value <= MAX_SECONDS:
            raise ValueError(f"must be a number of seconds above 0 and at most {MAX_SECONDS:.0f} (ten years)")
        if info.field_name in WHOLE_SECONDS and isinstance(value, float) and not value.is_integer():
            raise ValueError("must be a whole number of seconds (Redis expires keys in whole seconds)")
        return value

    @model_validator(mode="after")
    def _agree(self) -> Settings:
        """Settings that only make sense in order; the message names both variables."""
        for smaller, larger, why in MUST_BE_ABOVE:
            if not getattr(self, larger) > getattr(self, smaller):
                raise ValueError(self._order_error(larger, "above", smaller, why))
        if self.respawn_base_delay_s > self.respawn_max_delay_s:
            raise ValueError(
                self._order_error(
                    "respawn_max_delay_s",
                    "at least",
                    "respawn_base_delay_s",
                    "the delays grow from one to the other",
                )
            )
        redis_tls.check_together(self)
        if cluster_url.is_cluster(self):
            try:
                cluster_url.seeds(self.redis_url)
            except ValueError as exc:
                raise ValueError(f"COGWORKER_REDIS_CLUSTER=true: COGWORKER_REDIS_URL {exc}") from None
            cluster_url.check_prefix(self.key_prefix)
        if bool(self.web_username) != bool(self.web_password.get_secret_value()):
            raise ValueError("set both COGWORKER_WEB_USERNAME and COGWORKER_WEB_PASSWORD, or neither")
        return self

    def _order_error(self, larger: str, relation: str, smaller: str, why: str) -> str:
        return (
            f"COGWORKER_{larger.upper()}={getattr(self, larger):g} must be {relation} "
            f"COGWORKER_{smaller.upper()}={getattr(self, smaller):g}: {why}"
        )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """The repr (and str) show the Redis URL without its password."""
        for name, value in super().__repr_args__():
            yield (name, safe_url(value)) if name == "redis_url" and isinstance(value, str) else (name, value)

    @property
    def queue_spec(self) -> QueueSpec:
        return parse_queues(self.queues)

    @property
    def require_modules(self) -> tuple[str, ...]:
        return tuple(m.strip() for m in self.require.split(",") if m.strip())


MAX_SECONDS = 10 * 365 * 24 * 3600.0
# Given to Redis as EXPIRE/SET EX seconds, which int() would truncate (0.4 became EXPIRE 0).
WHOLE_SECONDS = frozenset({"presence_ttl_s", "quarantine_ttl_s"})
# (smaller, larger, why the larger must be above the smaller).
MUST_BE_ABOVE = (
    (
        "heartbeat_interval_s",
        "presence_ttl_s",
        "a live process's presence would expire between its heartbeats",
    ),
    (
        "presence_ttl_s",
        "orphan_threshold_s",
        "a process's jobs would count as orphaned while its presence may still be alive",
    ),
)


class ConfigError(Exception):
    """A setting that cannot be used; the message is the one line shown to the operator."""


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        if not item["loc"]:  # a check across settings: its message names the variables
            lines.append(item["msg"].removeprefix("Value error, "))
            continue
        field = str(item["loc"][0])
        variable = f"COGWORKER_{field.upper()}"
        value = item.get("input")
        if field == "redis_url":
            value = safe_url(str(value))
        msg = item["msg"].removeprefix("Value error, ")
        lines.append(f"{variable}={value!r}: {msg}")
    return "; ".join(lines)


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment (plus overrides); raises ConfigError with a readable line."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def load_or_exit(**overrides: object) -> Settings:
    """For commands: a bad setting prints one line and exits 78 before anything starts."""
    try:
        settings = load_settings(**overrides)
    except ConfigError as exc:
        print(f"cogworker: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(exitcodes.CONFIG_ERROR) from None
    unknown = unknown_variables(os.environ)
    if unknown:
        # A warning, not an error: the variable may be meant for a newer version. But a typo
        # (COGWORKER_TIMEOUT for COGWORKER_TIMEOUT_S) must not silently leave the default in force.
        print(f"cogworker: warning: not a setting, ignored: {', '.join(unknown)}", file=sys.stderr)
    return settings


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """COGWORKER_* variables that name no setting (the names are case-insensitive, as pydantic reads them)."""
    prefix = Settings.model_config.get("env_prefix", "")
    return sorted(
        name
        for name in environ
        if name.upper().startswith(prefix) and name[len(prefix) :].lower() not in Settings.model_fields
    )
