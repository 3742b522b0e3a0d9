"""One typed, frozen settings object built from `COGWORKER_*` variables and checked (the fields, with
their defaults, are in settings_fields.py; each is listed in deploy_kit/cogworker.env.example). Built once
per command and passed down explicitly; nothing deeper reads the environment. A bad value is reported
as one line naming the variable and what it accepts; the command exits 78 (CONFIG_ERROR).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from pydantic import ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cogworker import cluster_url, exitcodes, redis_sentinel, redis_tls, sidekiq_rule
from cogworker.config_error import ConfigError as ConfigError
from cogworker.log_levels import parse_log_levels
from cogworker.prefix_rule import check_key_prefix
from cogworker.redact import safe_url
from cogworker.settings_fields import SettingsFields, parse_partitions, parse_queues

_SCHEMES = ("redis", "rediss", "unix", *redis_sentinel.SCHEMES)
# A password holding one of these characters ends the URL's host part early, and the rest of it
# reads as a port, a path or a fragment.
_ENCODE_HINT = " (a password holding / ? # @ or : must be %-encoded, e.g. / as %2F)"


class Settings(BaseSettings, SettingsFields):
    """The settings from the COGWORKER_* environment, checked and frozen.

    Each field is one variable: `redis_url` is COGWORKER_REDIS_URL. The fields and their defaults
    are in SettingsFields (cogworker/settings_fields.py) and `cogworker deploy print-env`. Build one
    with `cogworker.load_settings()`, which reports a bad value as one readable line.
    """

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

    @field_validator("queue_partitions")
    @classmethod
    def _check_partitions(cls, value: str) -> str:
        parse_partitions(value)
        return value

    @field_validator("queues")
    @classmethod
    def _check_queues(cls, value: str) -> str:
        parse_queues(value)
        return value

    @field_validator("log_levels")
    @classmethod
    def _check_log_levels(cls, value: str) -> str:
        parse_log_levels(value)
        return value

    @field_validator("cpu_affinity")
    @classmethod
    def _can_pin(cls, value: str) -> str:
        # `auto` only pins where it can.
        if value == "spread" and not hasattr(os, "sched_setaffinity"):
            raise ValueError("this platform can't pin a process to a CPU (no sched_setaffinity); use none")
        return value

    @field_validator("redis_min_replicas")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 (no WAIT) or more")
        return value

    @field_validator(
        "concurrency",
        "async_concurrency",
        "count",
        "max_orphanings",
        "dead_max_jobs",
        "death_notices_max",
        "metrics_max_job_labels",
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
            if self.cluster_sharding == "queues":
                cluster_url.check_sharded_prefix(self.key_prefix)
            else:
                cluster_url.check_prefix(self.key_prefix)
        elif self.cluster_sharding != "off":
            raise ValueError(
                "COGWORKER_CLUSTER_SHARDING=queues spreads queues over a Redis Cluster's masters: it needs "
                "a redis+cluster:// COGWORKER_REDIS_URL (or COGWORKER_REDIS_CLUSTER=true)"
            )
        sidekiq_rule.check_settings(self)
        if bool(self.web_username) != bool(self.web_password.get_secret_value()):
            raise ValueError("set both COGWORKER_WEB_USERNAME and COGWORKER_WEB_PASSWORD, or neither")
        # The Sentinel forms agree (one line naming the variables), and a WAIT ends before the client
        # gives up on its reply.
        redis_sentinel.target(self)
        if self.redis_min_replicas and self.redis_min_replicas_timeout_s >= self.redis_timeout_s:
            raise ValueError(
                f"COGWORKER_REDIS_TIMEOUT_S={self.redis_timeout_s:g} must be above "
                f"COGWORKER_REDIS_MIN_REPLICAS_TIMEOUT_S={self.redis_min_replicas_timeout_s:g}: "
                "a WAIT must end before the client gives up on its reply"
            )
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
    (
        "timeout_s",
        "graceful_stop_timeout_s",
        "a stopping swarm would kill its workers while they still drain, and jobs that would have "
        "finished in time run again",
    ),
)


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
    """Read the settings from the COGWORKER_* environment, plus overrides, and check them.

    Args:
        **overrides: Settings by field name (`redis_url="redis://..."`), winning over the
            environment's.

    Returns:
        The checked, frozen Settings.

    Raises:
        ConfigError: A setting is invalid, or two disagree; the message names each.

    Example:
        >>> settings = cogworker.load_settings(queues="critical,default")  # doctest: +SKIP
    """
    try:
        return Settings(**overrides)
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
