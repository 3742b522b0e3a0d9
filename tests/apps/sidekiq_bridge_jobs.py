"""The Python side of tests/apps/sidekiq_bridge.rb: BridgeJob under the name Sidekiq's Ruby class has,
failing in cogworker first."""

from __future__ import annotations

import cogworker


@cogworker.job(name="BridgeJob", retry=5)
def bridge_job(n: int) -> None:
    raise ValueError(f"failed in cogworker: {n}")
