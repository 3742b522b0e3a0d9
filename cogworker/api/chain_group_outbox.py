"""A group inside a chain in the sharded layout (docs/architecture.md "Chains in the sharded layout").

In the one-slot layout `chain_ack.lua` creates the group's batch and pushes its members in the step
that acknowledges the step before it. Here that step's in-progress list is in its partition's slot,
the batch in the home slot and each member in its own partition, so the group rides on the outbox
(store/outbox.py) like a plain next step does:

- **After a step** (worker/settling/chain_sharded.py): the step's partition ack writes its
  `chain_step` entry with the group in it (`entry_group`: the bid, the member jids, the batch's
  fields with each callback's partition chosen now) and the members' pre-built payloads as the entry's
  pushes, each to its own partition (api/push_shards.partition_of of its pre-assigned jid).
- **First in the chain** (`start`, called by `chain()`): the chain's record and a `chain_group` entry
  `group:<bid>` of the home outbox are written in one transaction of the home slot, then moved.

The entry's apply creates the batch in the home slot (`create`, group_create.lua) only when it doesn't
exist yet, every member pending and nothing holding it; then the outbox pushes the members with their
`pushed:<jid>` markers. So however many movers carry the entry out, the batch is created once and each
member pushed once, and the batch can't be decided before every member is in it. The members then end
through the sharded batch path (store/batch_ends.py), and the batch's `continue_group` callback
continues the chain through the sharded chain path.
"""

from __future__ import annotations

import time
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api import chain_group, client, push_shards
from cogworker.settings_fields import SettingsFields
from cogworker.store import fanout, key_guard, keys, outbox, scripts, shards

log = structlog.get_logger("cogworker.chain")

KIND = "chain_group"
_create = scripts.ClientScript("group_create")


def entry_id(bid: str) -> str:
    """A first group's home outbox entry: one per group, so a second write replaces the first."""
    return f"group:{bid}"


def entry_group(
    group: dict[str, Any], following: dict[str, Any], previous: tuple[Any] | tuple[()]
) -> tuple[list[tuple[shards.Partition, str]], dict[str, Any]]:
    """The pushes of an entry that pushes `group` (each member's payload to its partition), and the
    entry's `group` field: what its apply creates the batch with."""
    now = time.time()
    members = chain_group.members_built(group, previous, now)
    pushes = [(push_shards.partition_of(member), codec.dumps(member)) for member in members]
    body = {
        "bid": str(group["jid"]),
        "jids": [str(member["jid"]) for member in members],
        "fields": chain_group.batch_fields(group, following),
        "created_at": repr(now),
    }
    return pushes, body


def create(home: redis.Redis, settings: SettingsFields, body: dict[str, Any]) -> bool:
    """The group's batch created in the home slot unless it exists (group_create.lua): True when it
    was created now. Raises on a Redis error or a wrong-type key: the entry stays for a later move."""
    bid = str(body["bid"])
    jids = [str(jid) for jid in body["jids"]]
    fields: dict[str, str] = body["fields"]
    created = float(body["created_at"])
    args: list[Any] = [bid, body["created_at"], created - settings.batch_ttl_s, len(jids), *jids]
    for name, value in fields.items():
        args += [name, value]
    script_keys = [keys.batch(bid), keys.batch_pending(bid), keys.BATCHES]
    reply = _create.on(home)(keys=script_keys, args=args, client=home)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(home, wrong)
    return bool(reply)


def apply(mover: outbox.Mover, entry: outbox.Entry) -> None:
    """A `chain_group` entry's apply (outbox.KINDS): the batch created unless it exists."""
    create(mover.home, mover.settings, entry.fields["group"])


def start(
    home: redis.Redis,
    group: dict[str, Any],
    carried: dict[str, Any],
    record: dict[str, str | int],
    ttl_s: int,
) -> None:
    """Write the chain's record (`record`, its fields) and its first step, the group `group`, as one
    home outbox entry, in one transaction; then move the entry. Raises when the transaction failed
    (nothing written, or with a lost reply perhaps both). A move that fails is logged: the entry is
    written, a worker's sweep creates the batch and pushes the members."""
    bid = str(group["jid"])
    following = {**carried, "step": 0}
    pushes, body = entry_group(group, following, ())
    ident = entry_id(bid)
    text = outbox.encode(KIND, pushes, group=body, cid=str(carried["id"]))
    record_key = keys.chain(str(carried["id"]))
    pipe = home.pipeline(transaction=True)
    pipe.hset(record_key, mapping=record)  # type: ignore[arg-type]
    pipe.expire(record_key, ttl_s)
    pipe.hset(keys.OUTBOX, ident, text)
    pipe.execute()
    try:
        outbox.Mover(fanout.clients_of(home), client.settings()).move_ids(None, [ident])
    except Exception as exc:
        log.warning(
            "chain_group_not_moved",
            chain=carried["id"],
            bid=bid,
            error=f"{type(exc).__name__}: {exc}",
            note="the group is written in the home outbox: a worker's sweep pushes it",
        )
