"""What the sharded status, doctor and metrics tests share: the one-slot layout bound again after each
test (store/shards.py keeps the layout per process, and the CLI, the Web UI and the scrape bind the
sharded one when they load their settings)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cogworker.store import keys, shards


@dataclass(frozen=True)
class OneSlot:
    key_prefix: str = keys.DEFAULT_PREFIX
    cluster_sharding: str = "off"
    queue_partitions: str = ""


@pytest.fixture(autouse=True)
def one_slot_after() -> Iterator[None]:
    yield
    shards.use_settings(OneSlot())
