"""A group inside a chain: `cogworker.chain(a.s(), cogworker.group(b.s(1), b.s(2)), c.s())`.

The group's members run in parallel as one batch (api/batch.py). Everything about it is fixed when
the chain is created: the batch's id, every member's jid, the callbacks' jids. The step before the
group is acknowledged by `chain_ack.lua`, which (only when its LREM took that step off the
in-progress list, and only when the batch doesn't exist yet) creates the batch with every member
already pending and nothing holding it, and pushes the members, in the same atomic step. So the
group is pushed once however many times the step before it ran, and the batch can't be decided
before every member is in it.

The batch's `on_success` callback is `continue_group`, a job that carries the chain field for the
group's index: it is acknowledged by `chain_ack.lua` like any step, which pushes the step after the
group, exactly once (the batch pushes its callback once; the ack's gate covers a callback run twice).
With `pass_results` it returns the members' results, in the group's order, so the next step gets
that list as its first argument (and every member gets the previous step's result first, as
Celery's groups do). `on_death` is `group_died`: the first member to go to dead stops the chain,
recorded on the chain's record with the member and its error.

The members carry no chain field: a job is never both a chain step and a batch member in one ack.
Both internal jobs (api/group_jobs.py) are importable by any worker whatever its COGWORKER_REQUIRE
(api/registry.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from cogworker import codec
from cogworker.api import client, payload, push_shards
from cogworker.api.payload import new_jid
from cogworker.store import key_guard, keys, scripts, shards

# The payload field that puts a job on the chain path (worker/settling/chain_step.py); api/chain.py's FIELD.
FIELD = "chain"
# Its name in a chain's record and `chain_status` (a group has no job of its own).
CLASS = "cogworker.group"
# The batch's callbacks (api/group_jobs.py), by name: this module is imported by api/chain.py, which
# the decorator imports, so it doesn't import the jobs.
NAME_CONTINUE = "cogworker.api.group_jobs.continue_group"
NAME_DIED = "cogworker.api.group_jobs.group_died"


@dataclass(frozen=True, slots=True)
class Grouped:
    """A chain's next step that is a group: its spec, the chain field of its own step (`following`),
    and the previous step's result its members get first (`previous`: empty when none)."""

    spec: dict[str, Any]
    following: dict[str, Any]
    previous: tuple[Any] | tuple[()]


def spec(members: list[dict[str, Any]], queue: str, pass_results: bool, result_ttl: float) -> dict[str, Any]:
    """The group as the chain carries it: its members' specs (as steps'), its batch id (`jid`), the
    queue its callbacks run on (the next step's, or its first member's), the continuation's jid."""
    # With pass_results the continuation keeps its result (the members' values) for the next step.
    kept = result_ttl if pass_results else None
    return {"class": CLASS, "queue": queue, "jid": new_jid(), "group": members, "cont": new_jid(),
            "result_ttl": kept}  # fmt: skip


def _callback(name: str, args: list[Any], queue: str, bid: str, kind: str, extra: dict[str, Any]) -> str:
    """A batch callback's payload as the batch stores it: a JSON object without its closing brace
    (the script that pushes it adds the push time)."""
    built = payload.build(name, args, {}, queue=queue, retry=True, extra={**extra, "bcb": [bid, kind]})
    text = codec.dumps(built)
    return text[: text.rindex("}")]


def members_built(
    group: dict[str, Any], previous: tuple[Any] | tuple[()], now: float
) -> list[dict[str, Any]]:
    """Every member's payload, with its pre-assigned jid: a member of the group's batch (`bid`), the
    previous step's result first among its arguments (`previous`: empty when none)."""
    bid, queue = str(group["jid"]), str(group["queue"])
    built_members: list[dict[str, Any]] = []
    for member in group["group"]:
        options = dict(member.get("options") or {})
        retry = options.pop("retry", True)
        built = payload.build(
            member["class"], [*previous, *(member.get("args") or [])], dict(member.get("kwargs") or {}),
            queue=member["queue"], retry=retry, extra={**options, "bid": bid, "bq": [queue]},
        )  # fmt: skip
        built["jid"] = member["jid"]
        built["enqueued_at"] = now
        built_members.append(built)
    return built_members


def batch_fields(group: dict[str, Any], following: dict[str, Any]) -> dict[str, str]:
    """The group's batch hash fields besides its counts: its description and its two callbacks
    (`continue_group` carrying `following`, the chain field of the group's own step; `group_died`).
    In the sharded layout each callback's partition is chosen now (`cbp:<kind>`), as a sharded
    batch's are (api/batch_records.py), so every mover of its outbox entry pushes it to the same one."""
    bid = str(group["jid"])
    queue = str(group["queue"])
    jids = [str(m["jid"]) for m in group["group"]]
    step = int(following.get("step", 0))
    # The continuation is the group's step for the chain's ack (it carries the chain field), tracked
    # like every step so chain_status can describe it.
    cont_options: dict[str, Any] = {FIELD: following, "status": True, "jid": group["cont"]}
    passing = bool(group.get("result_ttl"))
    if passing:
        cont_options["result_ttl"] = group["result_ttl"]
    cont = _callback(NAME_CONTINUE, [bid, jids, passing], queue, bid, "success", cont_options)
    ttl = int(following.get("ttl") or 86400)
    death_jid = new_jid()
    death_args = [bid, str(following["id"]), step, ttl]
    death = _callback(NAME_DIED, death_args, queue, bid, "death", {"jid": death_jid})
    fields = {
        "description": f"chain {following['id']} step {step}",
        "parent": "",
        "up": "[]",
        "queues": codec.dumps([queue]),
        "chain": str(following["id"]),
        "chain_step": str(step),
    }
    for kind, text, jid in (("success", cont, str(group["cont"])), ("death", death, death_jid)):
        fields |= {
            f"cb:{kind}": text,
            f"cbq:{kind}": queue,
            f"cbjid:{kind}": jid,
            f"cbstate:{kind}": "waiting",
        }
        if shards.is_sharded():
            fields[f"cbp:{kind}"] = str(push_shards.partition_of({"queue": queue, "jid": jid}).index)
    return fields


def layout(
    group: dict[str, Any], following: dict[str, Any], previous: tuple[Any] | tuple[()]
) -> tuple[list[str], list[Any]]:
    """KEYS[8 ..] and ARGV[10 ..] of `chain_ack.lua` pushing `group` as the chain's next step.
    `following`: the chain field of the group's own step (its index, the steps after it);
    `previous`: the previous step's result, given to every member first (empty: none)."""
    bid = str(group["jid"])
    now = time.time()
    members = members_built(group, previous, now)
    member_args: list[Any] = []
    member_keys: list[str] = []
    for built in members:
        member_args += [built["jid"], built["queue"], codec.dumps(built)]
        member_keys.append(keys.queue(str(built["queue"])))
    script_keys = [keys.batch(bid), keys.QUEUES, keys.WAKE_CHANNEL, keys.batch_pending(bid), keys.BATCHES]
    args: list[Any] = ["group", bid, now - client.settings().batch_ttl_s, len(members), *member_args]
    for name, value in batch_fields(group, following).items():
        args += [name, value]
    return script_keys + member_keys, args


def start(conn: redis.Redis, group: dict[str, Any], carried: dict[str, Any]) -> None:
    """Push a group that is a chain's first step: `chain_ack.lua` with nothing to acknowledge."""
    record = keys.chain(str(carried["id"]))
    bid = str(group["jid"])
    following = {**carried, "step": 0, "next": carried["next"]}
    extra_keys, extra_args = layout(group, following, ())
    day = time.strftime("%Y-%m-%d", time.gmtime())
    script_keys = [record, keys.STAT_PROCESSED, keys.stat_processed_day(day), keys.orphanings(bid), record,
                   keys.result(bid), keys.result_channel(bid), *extra_keys]  # fmt: skip
    args = ["", 0, "", 1, "", "", int(carried["ttl"]), repr(time.time()), "start", *extra_args]
    reply = conn.register_script(scripts.source("chain_ack"))(keys=script_keys, args=args, client=conn)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)
