"""A chain's state and each step's, read from its record and its steps' statuses (api/chain.py).

The record (`chain:<cid>`) says how many steps are done (written by `chain_ack.lua` with each
step's ack) and whether a step's death stopped the chain (written by the worker that filed it). The
step in flight is described by its status hash (chain steps are always tracked): queued, running,
retrying, or dead -- which also covers a step filed in dead where no worker wrote the record (a
poison pill buried by recovery) -- cancelled or expired.
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
        steps.append(step)
    error = None
    if state == "dead":
        dead_step = int(_number(record.get("dead_step")) or 0)
        if 0 <= dead_step < len(steps):
            steps[dead_step]["state"] = "dead"
        error = {"error_class": record.get("error_class"), "error_message": record.get("error_message")}
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
