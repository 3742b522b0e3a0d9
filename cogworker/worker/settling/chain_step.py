"""The worker's side of a chain (api/chain.py): a step's success pushes the next step, its death
stops the chain.

Only a payload with a `chain` field comes here (worker/running/processor.py checks the one field,
and imports this module on the first chain step), so a plain job's ack is still the batched one in
fetch.lua.

A step's success is acknowledged at once, on its job thread, by `chain_ack.lua`: the job leaves the
in-progress list, its result (if it keeps one) is written, the chain's progress recorded and the next
step pushed, atomically, and only if the job was still on the list. Not batched into the next fetch:
the successor would wait for it. When Redis fails the ack is tried again (each try is safe: only the
one whose LREM removes the job writes anything) for up to ACK_RETRY_S; past that the job is left in
progress, so a stop, a reconcile or recovery puts it back and it runs again (at least once, as any
job whose ack was lost), and that run's ack pushes the successor.

When the next step is a group (api/chain_group.py) the same ack creates its batch and pushes its
members; the batch's `on_success` callback is itself a chain step, whose ack pushes the step after.
In the sharded layout the step's entry carries the group (api/chain_group_outbox.py).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api import chain_group, payload
from cogworker.api.chain_group import FIELD, Grouped
from cogworker.store import key_guard, keys, scripts
from cogworker.store.outage import Outages
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.settling.settle import Settler

log = structlog.get_logger("cogworker.chain")

ACK_RETRY_S = 30.0
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 2.0
COMPONENT = "ChainAck"
outages = Outages()
_ack = scripts.ClientScript("chain_ack")


def successor(job: dict[str, Any], record: str | None) -> dict[str, Any] | Grouped | None:
    """The next step's payload (None after the last step), with the previous result first among its
    arguments when the chain passes results; for a group, the group with its chain field and the
    previous result its members get first."""
    carried = job[FIELD]
    if not isinstance(carried, dict) or not isinstance(carried.get("id"), str):
        raise TypeError(
            f"the payload's {FIELD!r} field is not a chain's: {codec.escape(repr(carried)[:100])}"
        )
    rest: list[dict[str, Any]] = carried.get("next") or []
    if not rest:
        return None
    spec = rest[0]
    args = list(spec.get("args") or [])
    if carried.get("pass"):
        previous = codec.loads_dict(record) if record else None
        args.insert(0, previous.get("value") if previous else None)
    following = {**carried, "step": int(carried.get("step", 0)) + 1, "next": rest[1:]}
    if "group" in spec:
        return Grouped(spec, following, tuple(args[:1]) if carried.get("pass") else ())
    options = dict(spec.get("options") or {})
    retry = options.pop("retry", True)
    built = payload.build(
        spec["class"], args, dict(spec.get("kwargs") or {}), queue=spec["queue"], retry=retry,
        extra={**options, FIELD: following},
    )  # fmt: skip
    built["jid"] = spec["jid"]
    built["enqueued_at"] = time.time()
    return built


def succeeded(
    settler: Settler, work: Work, job: dict[str, Any], record: str | None, ttl: float | None
) -> bool:
    """Acknowledge a chain step that succeeded and push the next one. True when acknowledged here
    (False: another run or recovery had taken it, or Redis failed for ACK_RETRY_S)."""
    carried = job[FIELD]
    jid = str(job.get("jid") or "")
    try:
        nxt = successor(job, record)
    except Exception as exc:
        # Not a chain field cogworker wrote: the job itself succeeded, so it is acknowledged as any
        # job is (never lost, never run again for it); the chain can't go on, and says why.
        log.error(
            "chain_field_unusable", error=f"{type(exc).__name__}: {exc}", note="acknowledged as a plain job"
        )
        settler.ack(work.raw, jid)
        return False
    route = settler.route
    if route is not None:  # the sharded layout: the partition's ack, then the outbox (chain_sharded.py)
        from cogworker.worker.settling import chain_sharded

        return chain_sharded.succeeded(settler, route, work, job, nxt, record, ttl)
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    record_key = keys.chain(str(carried["id"]))
    # Basic fetch (BRPOP) keeps no in-progress list: nothing to take the job off (chain_ack.lua).
    in_progress = settler.list_for(work.raw)
    script_keys = [
        in_progress or record_key,
        keys.STAT_PROCESSED,
        keys.stat_processed_day(day),
        keys.orphanings(jid),
        record_key,
        keys.result(jid),
        keys.result_channel(jid),
    ]
    text = queue = ""
    grouped: tuple[list[str], list[Any]] | None = None
    if isinstance(nxt, Grouped):
        grouped = chain_group.layout(nxt.spec, nxt.following, nxt.previous)
        script_keys += grouped[0]
    elif nxt is not None:
        text, queue = codec.dumps(nxt), nxt["queue"]
        script_keys += [keys.queue(queue), keys.QUEUES, keys.WAKE_CHANNEL]
    args: list[Any] = [
        work.raw,
        int(carried.get("step", 0)),
        record if record is not None and ttl is not None else "",
        max(1, int((ttl or 0) * 1000)),
        text,
        queue,
        int(carried.get("ttl") or 86400),
        repr(time.time()),
        "1" if in_progress else "0",
    ]
    if grouped is not None:
        args += grouped[1]
    conn = settler.client
    deadline = time.monotonic() + ACK_RETRY_S
    wait = _RETRY_FIRST_S
    while True:
        try:
            reply = _ack.on(conn)(keys=script_keys, args=args, client=conn)
            wrong = key_guard.script_wrong_type(reply)
            if wrong is not None:
                raise key_guard.wrong_type_error(conn, wrong)
        except Exception as exc:
            outages.report(COMPONENT, exc)
            if time.monotonic() + wait > deadline:
                log.error(
                    "chain_ack_failed",
                    chain=carried["id"],
                    step=carried.get("step"),
                    note="the step stays in progress: it runs again, and that run pushes the next step",
                )
                return False
            time.sleep(wait)  # a retry's backoff on this job's own thread, not synchronisation
            wait = min(wait * 2, _RETRY_MAX_S)
            continue
        outages.recovered(COMPONENT)
        if not reply:
            log.info("chain_step_taken_elsewhere", chain=carried["id"], step=carried.get("step"))
            return False
        return True


def died(conn: redis.Redis, job: dict[str, Any], dead: dict[str, Any]) -> None:
    """A step filed in dead stops the chain: recorded on the chain (best-effort; the step's status,
    "failed", says it too)."""
    carried = job.get(FIELD)
    if not isinstance(carried, dict) or "id" not in carried:
        return
    record = keys.chain(str(carried["id"]))
    fields = {
        "state": "dead",
        "dead_step": int(carried.get("step", 0)),
        "dead_jid": str(job.get("jid") or ""),
        "error_class": str(dead.get("error_class", ""))[:1000],
        "error_message": str(dead.get("error_message", ""))[:1000],
        "dead_at": repr(time.time()),
    }
    try:
        pipe = conn.pipeline(transaction=True)
        pipe.hset(record, mapping=fields)  # type: ignore[arg-type]
        pipe.expire(record, int(carried.get("ttl") or 86400))
        pipe.execute()
    except Exception as exc:
        log.error("chain_death_not_recorded", chain=carried["id"], error=f"{type(exc).__name__}: {exc}")
    log.warning("chain_stopped", chain=carried["id"], step=carried.get("step"))
