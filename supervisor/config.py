"""What the supervisor knows of the settings: the swarm's own knobs, nothing about jobs.

The supervisor doesn't validate settings itself. Its fork server has them checked with pydantic-settings
by a child of its own (forkserver/settings_check.py; 78 on a bad one, before anything is forked) and
sends them over as JSON; this is the part the supervisor keeps. Not importing pydantic, the Redis
client or the app is what keeps the supervisor small: the fork server holds the client and the app,
and its children share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class SwarmConfig:
    """No defaults here: every value comes from the validated settings (cogworker/settings.py)."""

    count: int
    preload: bool
    phased_restart: bool
    graceful_stop_timeout_s: float
    restart_ready_timeout_s: float
    boot_timeout_s: float  # a child's first line (and a fork server's `ready`) must come within this
    healthy_uptime_s: float
    respawn_base_delay_s: float
    respawn_max_delay_s: float
    liveness_timeout_s: float
    maxmem_mb: int | None
    memory_check_interval_s: float
    metrics_port: int | None
    metrics_host: str
    # For the metrics scrape only. Kept out of the repr: it may hold the Redis password.
    redis_url: str = field(repr=False)
    # The metrics scrape's TLS to Redis (cogworker/redis_tls.py); paths, no secret.
    redis_ssl_ca_file: str
    redis_ssl_cert_file: str
    redis_ssl_key_file: str
    redis_ssl_check_hostname: bool
    # The metrics scrape's sentinels (cogworker/redis_sentinel.py); their password is kept out of the repr.
    redis_sentinels: str
    redis_sentinel_master: str
    redis_sentinel_password: str = field(repr=False)
    redis_cluster: bool  # the scrape pins its client to the deployment's slot's master (cluster_pool.py)
    redis_timeout_s: float  # a requeue in the fork server may wait this long on Redis
    metrics_job_labels: bool  # label job counts by class, or count them all under job="(all)"
    metrics_max_job_labels: int  # past this many classes, further ones count under job="(other)"
    key_prefix: str  # the metrics scrape reads this deployment's keys only (cogworker/store/keys.py)
    # The key layout (cogworker/store/shards.py): the scrape and the fork server's requeue name keys by it.
    cluster_sharding: str
    queue_partitions: str
    # Sidekiq's names for the shared keys (cogworker/store/sidekiq_layout.py), for the same reason.
    sidekiq_compat: str
    sidekiq_namespace: str
    log_level: str
    log_format: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwarmConfig:
        """From validated settings (settings_fields.values_of); other keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
