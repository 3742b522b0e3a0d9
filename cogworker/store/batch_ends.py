"""Batches in the sharded layout (docs/architecture.md "Batches in the sharded layout"): a member's end
runs in its queue partition's slot while its batch lives in the home slot, so the end is carried over
by the outbox (store/outbox.py).

1. The end (the member's ack, dead filing, handed-over dead filing or burial) writes a `batch_end`
   entry into its partition's outbox in the same script, only when the job moved now
   (batch_end.lua: `run_end`). Its id, `batch:<bid>:<jid>:<outcome>`, is fixed by the member, so a
   resend after a lost reply, which finds the job gone and writes nothing, moves the same entry.
2. Its apply (`apply_end`, any mover, as often as it takes) counts the member in the home slot by
   batch_apply.lua: batch_lib.lua's SREM (once per jid) and HSETNX decision, which writes each
   callback it fires as a `batch_cb` entry of the home outbox (`cb:<bid>:<kind>`, the payload and the
   partition chosen when the batch was created), then moves those entries.
3. A `batch_cb` entry's push sends the callback with its pre-assigned jid and a `pushed:<jid>`
   marker: pushed once however often the entry is moved. Its apply has nothing left to do.

A block's close (`close`, batch_close.lua's sharded variant) decides the same way in an app process.
A member run's hold on its batch released by the requeue of its dead process's list is the same
close: requeue.lua writes a `batch_hold` entry in the partition's outbox for each member it took off
the list, and its apply (`apply_hold`) releases `hold:run:<jid>` only while its value is still that
list (a later run may have taken it over) and decides the batch if that was its last hold.
"""

from __future__ import annotations

from typing import Any

import redis

from cogworker.settings_fields import SettingsFields
from cogworker.store import batch_scripts, key_guard, keys, outbox, shards
from cogworker.store.shard_clients import SlotClients

END = "batch_end"
CALLBACK = "batch_cb"
HOLD = "batch_hold"
CALLBACK_KINDS = ("success", "complete", "death")
# A member's own fields that name its batches: all an end's count needs of the payload.
_MEMBER_FIELDS = ("bid", "bup", "bcb", "jid")


def member_of(job: dict[str, Any]) -> dict[str, Any]:
    return {name: job[name] for name in _MEMBER_FIELDS if name in job}


def end_entry(job: dict[str, Any], outcome: str, error: str) -> tuple[str, str]:
    """The id and JSON of the `batch_end` entry for `job`'s end: outcome "ok", "failed" (ended
    unrun) or "dead"."""
    callback = job.get("bcb")
    owner = job.get("bid") or (callback[0] if isinstance(callback, list) and callback else "")
    entry_id = f"batch:{owner}:{job.get('jid') or ''}:{outcome}"
    return entry_id, outbox.encode(END, member=member_of(job), outcome=outcome, error=error[:1000])


def run_end(
    client: redis.Redis,
    ending: str,
    partition: shards.Partition,
    script_keys: list[str],
    args: list[Any],
    job: dict[str, Any],
    outcome: str,
    error: str,
) -> tuple[Any, str]:
    """Run the ending script `ending` ("member_ack", "settle", "file_unsettled", "swap_dead") in
    `partition`'s slot with the member's `batch_end` entry written by the same script when the job
    moved. Returns the script's reply and the entry's id (to move, whatever the reply: an earlier
    call whose reply was lost may have written it)."""
    entry_id, text = end_entry(job, outcome, error)
    reply = batch_scripts.run(
        client, f"outboxed:{ending}", [*script_keys, outbox.key(partition)], [*args, entry_id, text]
    )
    return reply, entry_id


def callback_ids(member: dict[str, Any]) -> list[str]:
    """The ids every callback entry a count of `member` may write has (its batch's and its parents')."""
    bids = [member.get("bid"), *(member.get("bup") or [])] if member.get("bid") else []
    return [f"cb:{bid}:{kind}" for bid in bids if isinstance(bid, str) for kind in CALLBACK_KINDS]


def apply_end(mover: outbox.Mover, entry: outbox.Entry) -> None:
    """A `batch_end` entry's apply: the member counted in its batch (home slot), and the callbacks a
    decision wrote moved now. Run again, it counts nothing and fires nothing; the callback entries
    another run left (its reply lost) are moved here all the same."""
    member = entry.fields.get("member")
    if not isinstance(member, dict):
        raise ValueError(f"outbox entry {entry.id!r} has no member")
    outcome, error = str(entry.fields.get("outcome") or "ok"), str(entry.fields.get("error") or "")
    layout_keys, layout_args = batch_scripts.layout(member, outcome, error, mover.settings.batch_ttl_s)
    reply = batch_scripts.run(mover.home, "batch_apply", [keys.OUTBOX, *layout_keys], layout_args)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(mover.home, wrong)
    mover.move_ids(None, callback_ids(member))


def apply_callback(mover: outbox.Mover, entry: outbox.Entry) -> None:
    """A `batch_cb` entry's apply: nothing. The decision that wrote it was made with it (HSETNX in
    the same home script); only its push is left."""


def apply_hold(mover: outbox.Mover, entry: outbox.Entry) -> None:
    """A `batch_hold` entry's apply: the requeued member's run hold released in the home slot
    (batch_close.lua, "owner": only while the hold's value is still the list the requeue emptied),
    and the batch decided if nothing else holds it and nothing is pending. Run again it releases
    nothing; the callback entries an earlier run's decision wrote are moved all the same."""
    member, listed = entry.fields.get("member"), entry.fields.get("list")
    if not isinstance(member, dict) or not isinstance(member.get("bid"), str) or not isinstance(listed, str):
        raise ValueError(f"outbox entry {entry.id!r} has no member or list")
    up = [bid for bid in member.get("bup") or [] if isinstance(bid, str)]  # {} from cjson: none
    layout_keys, layout_args = batch_scripts.close_layout(member["bid"], up, [], mover.settings.batch_ttl_s)
    close(
        mover.home,
        mover.clients,
        mover.settings,
        [keys.BATCH_LEASES, *layout_keys],
        [f"run:{member.get('jid') or ''}", "owner", listed, *layout_args],
    )
    mover.move_ids(None, callback_ids(member))


def close(
    home: redis.Redis, clients: SlotClients, settings: SettingsFields, script_keys: list[str], args: list[Any]
) -> int:
    """batch_close.lua in the sharded layout: the hold released and, if that decides the batch, its
    callbacks written to the home outbox in the same script, then moved. Returns how many holds it
    released. A mover that dies before the move leaves the entries to a worker's sweep."""
    reply = batch_scripts.run(home, "batch_close:outbox", [*script_keys, keys.OUTBOX], args)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(home, wrong)
    released, *ids = reply
    if ids:
        outbox.Mover(clients, settings).move_ids(None, [str(i) for i in ids])
    return int(released)
