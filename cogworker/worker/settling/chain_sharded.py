"""A chain step's success in the sharded layout (store/shards.py): its ack in its partition's slot, the
rest through the outbox (store/outbox.py).

In the one-slot layout one script (chain_ack.lua) takes the step off its in-progress list and, only if
it was there, writes the result, records the progress and pushes the next step. Here the list is in the
step's partition's slot, the chain's record and the result are in the home slot, and the next step
goes to its own partition, so the step is split in three, each exactly once:

1. `chain_ack_partition.lua`, in the partition's slot: the same gate (LREM), the processed count, and
   only when the LREM removed the job an outbox entry `chain:<cid>:<index>` in that slot carrying the
   result, the record's update and the next step's payload (built here, with its pre-assigned jid and
   its partition chosen now by api/push_shards.partition_of); for a group next, its batch and every
   member's payload, each to its own partition (api/chain_group_outbox.py).
2. `apply` (the entry's kind, `chain_step`), in the home slot, `chain_apply.lua`: the result key and
   its publish, `done` = max(done, index + 1), `done_at:<index>`, the state; then a group's batch,
   created unless it exists (group_create.lua); idempotent.
3. the outbox's push of the next step or the group's members (their `pushed:<jid>` markers make a
   repeat a no-op), then HDEL.

The worker moves the entry right after its ack, on the job's thread, retrying Redis failures as the
ack does; an entry it could not move (it died, or Redis stayed away) is moved by any worker's sweep.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from cogworker import codec
from cogworker.api import chain_group_outbox, push_shards
from cogworker.api.chain_group import FIELD, Grouped
from cogworker.store import key_guard, keys, outbox, scripts, shards
from cogworker.store.outage import Outages
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.settling.settle import Settler
from cogworker.worker.settling.shard_route import ShardRoute

log = structlog.get_logger("cogworker.chain")

KIND = "chain_step"
ACK_RETRY_S = 30.0
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 2.0
COMPONENT = "ChainAck"
outages = Outages()
_ack = scripts.ClientScript("chain_ack_partition")
_apply = scripts.ClientScript("chain_apply")

T = TypeVar("T")


def entry_id(cid: str, index: int) -> str:
    """The step's outbox entry: one per step, so a second write replaces the first."""
    return f"chain:{cid}:{index}"


def entry(
    job: dict[str, Any], nxt: dict[str, Any] | Grouped | None, record: str | None, ttl: float | None
) -> str:
    """The entry's JSON: what the home slot records for this step, and the next step's push (for a
    group: its batch, created by the apply, and its members' pushes)."""
    carried = job[FIELD]
    group: dict[str, Any] = {}
    if isinstance(nxt, Grouped):
        pushes, body = chain_group_outbox.entry_group(nxt.spec, nxt.following, nxt.previous)
        group = {"group": body}
    else:
        pushes = [] if nxt is None else [(push_shards.partition_of(nxt), codec.dumps(nxt))]
    kept = record if record is not None and ttl is not None else ""
    return outbox.encode(
        KIND,
        pushes,
        **group,
        cid=str(carried["id"]),
        index=int(carried.get("step", 0)),
        jid=str(job.get("jid") or ""),
        result=kept,
        result_ttl_ms=max(1, int((ttl or 0) * 1000)),
        ttl=int(carried.get("ttl") or 86400),
        done_at=repr(time.time()),
        last=nxt is None,
    )


def succeeded(
    settler: Settler, route: ShardRoute, work: Work, job: dict[str, Any],
    nxt: dict[str, Any] | Grouped | None, record: str | None, ttl: float | None,
) -> bool:  # fmt: skip
    """Acknowledge the step in its partition (writing its entry) and move the entry. True when the
    ack was this run's (False: another run or recovery had taken the step, or Redis failed for
    ACK_RETRY_S: the step then stays in progress and runs again)."""
    carried = job[FIELD]
    cid, index = str(carried["id"]), int(carried.get("step", 0))
    jid = str(job.get("jid") or "")
    # Always gated: the sharded layout has no basic fetch, so the step was fetched onto this process's
    # list in its partition (named by its placement, else its queue's first partition's, as a filing's).
    listed = settler.list_for(work.raw)
    partition = route.partition_of(listed, work.raw)
    listed = listed or route.list_of(partition)
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    ident = entry_id(cid, index)
    script_keys = [
        listed,
        shards.stat(partition, "processed"),
        shards.stat_day(partition, "processed", day),
        shards.orphanings(partition, jid),
        shards.outbox(partition),
    ]
    args = [work.raw, ident, entry(job, nxt, record, ttl)]
    conn = route.client(partition)

    tries = [0]

    def ack() -> Any:
        tries[0] += 1
        reply = _ack.on(conn)(keys=script_keys, args=args, client=conn)
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            raise key_guard.wrong_type_error(settler.client, wrong)
        return reply

    reply = _retrying(ack, "chain_ack_failed", cid, index)
    if reply is None:
        return False
    # Moved whatever the reply: a 0 after a resend may follow our own first try, whose reply was lost
    # and whose entry is there. Moving an entry twice (or another run's) changes nothing.
    mover = outbox.Mover(route.clients, settler.settings)
    _retrying(lambda: mover.move_ids(partition, [ident]), "chain_entry_not_moved", cid, index)
    if not reply:
        # After a failed try, the job may be gone by that try's own ack, whose reply was lost.
        event = "chain_ack_resent" if tries[0] > 1 else "chain_step_taken_elsewhere"
        log.info(event, chain=cid, step=index)
        return False
    return True


def _retrying(call: Callable[[], T], failed: str, cid: str, index: int) -> T | None:
    """`call`, tried again on any error for up to ACK_RETRY_S (each try is safe: the ack is gated, the
    move idempotent); None when it never succeeded."""
    deadline = time.monotonic() + ACK_RETRY_S
    wait = _RETRY_FIRST_S
    while True:
        try:
            done = call()
        except Exception as exc:
            outages.report(COMPONENT, exc)
            if time.monotonic() + wait > deadline:
                note = (
                    "the step stays in progress: it runs again, and that run pushes the next step"
                    if failed == "chain_ack_failed"
                    else "the entry stays in its partition's outbox: a worker's sweep moves it"
                )
                log.error(failed, chain=cid, step=index, error=f"{type(exc).__name__}: {exc}", note=note)
                return None
            time.sleep(wait)  # a retry's backoff on this job's own thread, not synchronisation
            wait = min(wait * 2, _RETRY_MAX_S)
            continue
        outages.recovered(COMPONENT)
        return done


def apply(mover: outbox.Mover, item: outbox.Entry) -> None:
    """The entry's home step (outbox.KINDS["chain_step"]): the step's result and the chain's progress,
    idempotent (chain_apply.lua), and a group next: its batch created unless it exists (before the
    outbox pushes its members). Raises on a Redis error or a wrong-type key: the entry stays."""
    body = item.fields
    jid = str(body.get("jid") or "")
    script_keys = [keys.chain(str(body["cid"])), keys.result(jid), keys.result_channel(jid)]
    args: list[str | int] = [
        int(body["index"]),
        str(body.get("done_at") or repr(time.time())),
        str(body.get("result") or ""),
        int(body.get("result_ttl_ms") or 1),
        int(body.get("ttl") or 86400),
        "1" if body.get("last") else "0",
    ]
    home = mover.home
    reply = _apply.on(home)(keys=script_keys, args=args, client=home)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(home, wrong)
    group = body.get("group")
    if isinstance(group, dict):
        chain_group_outbox.create(home, mover.settings, group)
