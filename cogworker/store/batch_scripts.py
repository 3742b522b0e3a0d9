"""The batch scripts (api/batch.py): each is batch_lib.lua followed by its own text, and a batch
member's dead filing is the filing script itself (settle.lua, file_unsettled.lua, or swap_dead.lua
for a poison pill's burial) wrapped as a function ahead of batch_filed.lua, so the filing and the
member's count are one atomic step.

Built and registered on first use, not with the other scripts (store/scripts.py): a worker that never
meets a batch member never reads them. `layout` builds the keys and arguments batch_lib.lua reads
from a member's payload (its `bid`, `bup`, `bq` and `bcb` fields: api/batch.py)."""

from __future__ import annotations

import os
import threading
import time
from functools import cache
from typing import Any

import redis
from redis.commands.core import Script

from cogworker.store import keys, shards
from cogworker.store.scripts import body, source, with_prelude

# Where the batch layout starts after each filing script's own keys and arguments (with the dead
# set's death notice, which a dead filing always has).
_FILINGS = {"settle": (7, 10), "file_unsettled": (5, 6), "swap_dead": (3, 6)}
# The same for the sharded layout's ends (batch_end.lua's outbox key and entry after them).
_ENDS = {**_FILINGS, "member_ack": (5, 2)}

_lock = threading.Lock()
_scripts: dict[str, Script] = {}


def _renew_lock() -> None:
    # A preloading fork server forks workers while app threads run: one may hold this lock then
    # (docs/architecture.md, "Locks across a fork").
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock)


@cache
def text(name: str) -> str:
    # The parts are joined from their files' own texts, and the prelude's helpers any of them calls
    # go once in front of the whole (store/scripts.py).
    lib = body("batch_lib")
    if name.startswith("filed:"):
        filing = name.removeprefix("filed:")
        kb, ab = _FILINGS[filing]
        wrapped = f"local function filing()\n{body(filing)}\nend\nlocal KB, AB = {kb}, {ab}\n"
        return with_prelude(f"{lib}\n{wrapped}{body('batch_filed')}")
    if name.startswith("outboxed:"):
        # The sharded layout: the end in its partition's slot, its count written to that slot's outbox.
        ending = name.removeprefix("outboxed:")
        ko, ao = _ENDS[ending]
        wrapped = f"local function filing()\n{body(ending)}\nend\nlocal KO, AO = {ko}, {ao}\n"
        return with_prelude(f"{wrapped}{body('batch_end')}")
    if name == "batch_close:outbox":
        wrapped = f"local function closing()\n{body('batch_close')}\nend\n"
        return with_prelude(f"{lib}\n{wrapped}{body('batch_close_outbox')}")
    if name == "batch_open":
        return source(name)
    return with_prelude(f"{lib}\n{body(name)}")


def script(name: str) -> Script:
    """The batch script `name` ("batch_ack", "batch_close", "batch_open", "filed:settle",
    "filed:file_unsettled", "filed:swap_dead"; in the sharded layout "outboxed:member_ack",
    "outboxed:settle", "outboxed:file_unsettled", "outboxed:swap_dead", "batch_apply" and
    "batch_close:outbox"), bound to no client: every call names its own."""
    found = _scripts.get(name)
    if found is None:
        with _lock:
            found = _scripts.get(name)
            if found is None:
                found = _scripts[name] = Script(redis.Redis(), text(name))
    return found


def run(client: Any, name: str, script_keys: list[str], args: list[Any]) -> Any:
    """Run batch script `name` on `client` (redis-py loads it again on NOSCRIPT)."""
    return script(name)(keys=script_keys, args=args, client=client)


def is_member(job: dict[str, Any]) -> bool:
    """A batch member or a batch callback: its end is recorded by the batch scripts."""
    return "bid" in job or "bcb" in job


def layout(job: dict[str, Any], outcome: str, error: str, ttl_s: float) -> tuple[list[str], list[Any]]:
    """The keys and arguments of batch_lib.lua's layout for this job's end."""
    bids = _strings(job.get("bup")) if job.get("bid") else []
    if isinstance(job.get("bid"), str):
        bids.insert(0, job["bid"])
    callback = job.get("bcb")
    owner, kind = ("", "")
    if isinstance(callback, list) and len(callback) == 2 and all(isinstance(x, str) for x in callback):
        owner, kind = callback
    # The sharded layout pushes callbacks through the home outbox (batch_ends.py): no queue keys.
    queues = [] if shards.is_sharded() else _strings(job.get("bq"))
    script_keys = [keys.QUEUES, keys.WAKE_CHANNEL, keys.SCHEDULE, keys.batch(owner) if kind else keys.QUEUES]
    for bid in bids:
        script_keys += [keys.batch(bid), keys.batch_pending(bid), keys.batch_failures(bid)]
    script_keys += [keys.queue(name) for name in queues]
    args: list[Any] = [str(job.get("jid") or ""), outcome, error, repr(time.time()), max(1, int(ttl_s)), kind]
    args += [len(bids), *bids, len(queues), *queues]
    return script_keys, args


def close_layout(bid: str, up: list[str], queues: list[str], ttl_s: float) -> tuple[list[str], list[Any]]:
    """The layout for closing a block that held batch `bid` (parents `up`)."""
    return layout({"bid": bid, "bup": up, "bq": queues, "jid": ""}, "close", "", ttl_s)


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
