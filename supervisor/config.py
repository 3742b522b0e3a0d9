"""What the supervisor knows of the settings: the swarm's own knobs, nothing about jobs.

The supervisor doesn't validate settings itself. Its fork server loads them with pydantic-settings
(exiting 78 on a bad one, before anything is forked) and sends them over as JSON; this is the part
the supervisor keeps. Not importing pydantic, the Redis client or the app is what keeps the
supervisor small: those live in the fork server, and its children share them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class SwarmConfig:
    count: int
    preload: bool = False
    phased_restart: bool = True
    graceful_stop_timeout_s: float = 35.0
    restart_ready_timeout_s: float = 60.0
    healthy_uptime_s: float = 30.0
    respawn_base_delay_s: float = 1.0
    respawn_max_delay_s: float = 60.0
    liveness_timeout_s: float = 30.0
    maxmem_mb: int | None = None
    memory_check_interval_s: float = 5.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    redis_url: str = "redis://localhost:6379/0"  # for the metrics scrape only
    log_level: str = "info"
    log_format: str = "auto"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwarmConfig:
        """From validated settings (Settings.model_dump()); other keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
