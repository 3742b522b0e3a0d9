"""The jobs a chain's group pushes as its batch's callbacks (api/chain_group.py). Any worker may run
them, whatever its COGWORKER_REQUIRE (api/registry.py BUILT_IN): a callback is fetched by whichever
worker takes its queue."""

from __future__ import annotations

import time
from typing import Any

from cogworker import codec
from cogworker.api import client
from cogworker.api.chain_group import NAME_CONTINUE, NAME_DIED
from cogworker.api.decorator import job
from cogworker.store import keys


@job(name=NAME_CONTINUE)
def continue_group(bid: str, jids: list[str], passing: bool) -> list[Any] | None:
    """The group's batch succeeded: this job's ack (chain_ack.lua) pushes the chain's next step.
    With `passing` (the chain passes results) it returns the members' results, in order."""
    if not passing:
        return None
    raw = client.connection().mget([keys.result(jid) for jid in jids])
    values = []
    for text in raw:
        record = codec.loads_dict(text) if text else None
        values.append(record.get("value") if record else None)
    return values


@job(name=NAME_DIED)
def group_died(bid: str, cid: str, step: int, ttl: int) -> None:
    """A member of the group went to dead: the chain stops there (its record says which member, and
    its error)."""
    conn = client.connection()
    failures: dict[str, str] = conn.hgetall(keys.batch_failures(bid))  # type: ignore[assignment]
    jid, error = next(iter(sorted(failures.items())), ("", ""))
    error_class, _, message = error.partition(": ")
    record = keys.chain(cid)
    pipe = conn.pipeline(transaction=True)
    fields = {"state": "dead", "dead_step": step, "dead_jid": jid, "error_class": error_class,
              "error_message": message, "dead_at": repr(time.time())}  # fmt: skip
    pipe.hset(record, mapping=fields)  # type: ignore[arg-type]
    pipe.expire(record, int(ttl))
    pipe.execute()
