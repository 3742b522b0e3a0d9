"""The settings of a replicated Redis: Sentinel (redis_sentinel.py) and COGWORKER_REDIS_MIN_REPLICAS
(store/replicas.py). A base of cogworker's Settings, which reads them from COGWORKER_* variables like
every other; kept here so settings.py stays one screenful of fields per concern."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

from cogworker import redis_sentinel


class ReplicationSettings(BaseSettings):
    # Redis Sentinel (README "Redis Sentinel"): the sentinels and the master's name, as an alternative
    # to a redis+sentinel:// URL, and the sentinels' own password (both forms).
    redis_sentinels: str = ""
    redis_sentinel_master: str = ""
    redis_sentinel_password: SecretStr = SecretStr("")
    # A push (and a fetch's acknowledgements) returns only once WAIT saw it reach this many replicas
    # within redis_min_replicas_timeout_s (store/replicas.py says what fewer means). 0: no WAIT.
    redis_min_replicas: Annotated[int, Field(ge=0)] = 0
    redis_min_replicas_timeout_s: float = 1.0

    @model_validator(mode="after")
    def _replication_agrees(self) -> ReplicationSettings:
        """The Sentinel forms agree (one line naming the variables), and a WAIT ends before the client
        gives up on its reply."""
        redis_sentinel.target(self)  # type: ignore[arg-type]
        timeout_s = float(getattr(self, "redis_timeout_s", 0.0))
        if self.redis_min_replicas and self.redis_min_replicas_timeout_s >= timeout_s:
            raise ValueError(
                f"COGWORKER_REDIS_TIMEOUT_S={timeout_s:g} must be above "
                f"COGWORKER_REDIS_MIN_REPLICAS_TIMEOUT_S={self.redis_min_replicas_timeout_s:g}: "
                "a WAIT must end before the client gives up on its reply"
            )
        return self
