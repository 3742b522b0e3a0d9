"""A chain's state and each step's, read from its record and its steps' statuses (api/chain.py).

The record (`chain:<cid>`) says how many steps are done (written by `chain_ack.lua` with each
step's ack) and whether a step's death stopped the chain (written by the worker that filed it). The
step in flight is described by its status hash (chain steps are always tracked): queued, running,
retrying, or dead -- which also covers a step filed in dead where no worker wrote the record (a
poison pill buried by recovery) -- cancelled or expired. A group step (api/chain_group.py) is
described by its batch: queued before the batch exists, running while members are pending or its
continuation is on the way, dead once a member went to dead (stopped: one ended unrun).
"""

from __future__ import annotations

from typing import Any

import redis

from cogworker import codec
from cogworker.store import keys

# A step's status (api/job_status.py) as a chain step's state.
_STEP_STATES = {
    "queued": "queued",
    "working": "running",
    "retrying": "retrying",
    "complete": "running",  # succeeded, its ack (and the next step's push) on the way
    "failed": "dead",
    "cancelled": "cancelled",
    "expired": "expired",
}
# A step state that stops the chain: the chain's own state then.
_STOPPING = {"dead": "dead", "cancelled": "stopped", "expired": "stopped"}


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def chain_status(conn: redis.Redis, cid: str) -> dict[str, Any] | None:
    """{id, state (running, complete, dead, stopped), created_at, completed_at, done, total,
    pass_results, error, steps: [{index, class, queue, jid, state, done_at}]}; None when unknown."""
    record: dict[str, str] = conn.hgetall(keys.chain(cid))  # type: ignore[assignment]
    if not record:
        return None
    steps_meta = codec.loads(record.get("steps") or "[]")
    if not isinstance(steps_meta, list):
        steps_meta = []
    done = int(_number(record.get("done")) or 0)
    state = record.get("state") or "running"
    steps: list[dict[str, Any]] = []
    for index, meta in enumerate(steps_meta):
        meta = meta if isinstance(meta, dict) else {}
        step = {
            "index": index,
            "class": meta.get("class"),
            "queue": meta.get("queue"),
            "jid": meta.get("jid"),
            "state": "done" if index < done else "pending",
            "done_at": _number(record.get(f"done_at:{index}")),
        }
        if isinstance(meta.get("members"), list):
            step["bid"] = meta.get("jid")
            step["members"] = [m.get("jid") for m in meta["members"] if isinstance(m, dict)]
        steps.append(step)
    error = None
    if state == "dead":
        dead_step = int(_number(record.get("dead_step")) or 0)
        if 0 <= dead_step < len(steps):
            steps[dead_step]["state"] = "dead"
        error = {"error_class": record.get("error_class"), "error_message": record.get("error_message")}
    elif state == "running" and done < len(steps) and "bid" in steps[done]:
        state, error = _group_state(conn, steps[done])
    elif state == "running" and done < len(steps):
        current = steps[done]
        found: dict[str, str] = conn.hgetall(keys.status(str(current["jid"])))  # type: ignore[assignment]
        current["state"] = _STEP_STATES.get(found.get("status", ""), "queued")
        state = _STOPPING.get(current["state"], state)
        if current["state"] == "dead":
            error = {name: found.get(name) for name in ("error_class", "error_message")}
    return {
        "id": cid,
        "state": state,
        "created_at": _number(record.get("created_at")),
        "completed_at": _number(record.get("completed_at")),
        "done": done,
        "total": len(steps),
        "pass_results": record.get("pass_results") == "1",
        "error": error,
        "steps": steps,
    }


def _group_state(conn: redis.Redis, current: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The chain's state and error while a group step is in flight; sets the step's state and its
    batch's counts (`batch`: total, done, failed, dead)."""
    bid = str(current["bid"])
    batch: dict[str, str] = conn.hgetall(keys.batch(bid))  # type: ignore[assignment]
    if not batch:
        current["state"] = "queued"
        return "running", None
    counts = {name: int(_number(batch.get(name)) or 0) for name in ("total", "done", "failed", "dead")}
    current["batch"] = counts
    if counts["dead"] > 0:
        current["state"] = "dead"
        failures: dict[str, str] = conn.hgetall(keys.batch_failures(bid))  # type: ignore[assignment]
        _, text = next(iter(sorted(failures.items())), ("", ""))
        error_class, _, message = text.partition(": ")
        return "dead", {"error_class": error_class, "error_message": message}
    if counts["failed"] > 0 and batch.get("completed_at"):
        current["state"] = "stopped"
        return "stopped", None
    current["state"] = "running"
    return "running", None
