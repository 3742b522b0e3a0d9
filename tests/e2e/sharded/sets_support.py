"""What the sharded set tests share: the queues and partitions they seed, payloads, and putting this
process's key names back to the one-slot layout after a test."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cogworker import codec
from cogworker.store import keys, shards

QUEUES = {"default": 4, "reports": 2, "mail": 1}


def one_slot() -> None:
    """This process's names back to the one-slot layout (the next test module may expect it)."""
    layout = SimpleNamespace(key_prefix=keys.DEFAULT_PREFIX, cluster_sharding="off", queue_partitions="")
    shards.use_settings(SimpleNamespace(**vars(layout), sidekiq_compat="off", sidekiq_namespace=""))


def payload(jid: str, queue: str, **extra: Any) -> str:
    job: dict[str, Any] = {
        "class": "app.Report" if queue == "reports" else "app.Job",
        "queue": queue,
        "jid": jid,
    }
    job |= {"args": [jid], "error_class": "Boom", "error_message": "it broke", "retry_count": 1}
    return codec.dumps(job | extra)


def every_partition() -> list[shards.Partition]:
    return sorted(p for q, n in QUEUES.items() for p in shards.partitions(q, n))
