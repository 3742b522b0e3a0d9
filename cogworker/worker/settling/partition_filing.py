"""A filing in the sharded layout (store/shards.py): settle.lua on the job's own partition, with that
partition's in-progress list, set, counters, orphan counter and deaths list, on that partition's client,
so the removal from the list and the filing stay one atomic step in one slot (shard_route.py says how
the partition is known). settle.lua is the one-slot layout's script, replies included: a filing sent
again after a lost reply answers "already filed" (2) and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import time

from cogworker.api import death
from cogworker.api.retry import Filing, encoded
from cogworker.settings_fields import SettingsFields
from cogworker.store import batch_scripts, key_guard, keys, shards
from cogworker.store.scripts import Scripts
from cogworker.worker.fetching.fetch import on_list
from cogworker.worker.settling.batch_shard_acks import end_dead
from cogworker.worker.settling.filing import death_notice, settle_reply
from cogworker.worker.settling.shard_route import ShardRoute, set_of


def file_in_partition(
    via: tuple[Scripts, SettingsFields, ShardRoute], raw: str, filing: Filing, in_progress: str, run_id: str
) -> bool:
    """_file_now in the sharded layout: settle.lua on the job's partition, with that partition's
    set, counters, orphan counter and deaths list. A batch member's dead filing writes its end to the
    partition's outbox in the same script (batch_shard_acks.py moves it)."""
    scripts, settings, route = via
    filing, text = encoded(filing, raw)
    partition = route.partition_of(in_progress, raw)
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    dead = filing.dead
    jid = str(filing.payload.get("jid") or "")
    set_key = set_of(filing.set_key, partition)
    notice_keys, notice_args = death_notice(
        settings, death.cause_of(filing.payload), text, dead, shards.deaths(partition)
    )
    counter = keys.LIMITED if filing.set_key == keys.SCHEDULE else "failed"
    listed, payload = on_list(in_progress, raw, set_key)
    client = route.client(partition)
    script_keys = [
        listed,
        set_key,
        shards.stat(partition, counter),
        shards.stat_day(partition, counter, day),
        shards.orphanings(partition, jid),
        *notice_keys,
    ]
    args = [
        payload,
        filing.score,
        text,
        "1",
        settings.dead_max_jobs if dead else 0,
        time.time() - settings.dead_timeout_s,
        run_id,
        *notice_args,
    ]
    if dead and batch_scripts.is_member(filing.payload):
        # A batch member's death is written to the partition's outbox by the same script, then
        # counted in its batch by moving it (store/batch_ends.py).
        reply = end_dead(client, settings, "settle", partition, script_keys, args, filing.payload)
    else:
        reply = scripts.run("settle", script_keys, args, client=client)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.WrongTypeKey(wrong, None)
    return settle_reply(reply, jid, set_key)
