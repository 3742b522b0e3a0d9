"""A periodic slot's push in the sharded layout (COGWORKER_CLUSTER_SHARDING=queues): through the outbox.

The slot's claim, its entry's `last_slot`, its run history and its running lock are home-slot keys,
while the job's queue partition is a slot of its own, so periodic.lua can't claim and LPUSH in one
script there. Instead the same script that claims the slot writes an entry to the home outbox
(store/outbox.py) carrying the job: id `periodic:<name>:<slot>`, kind `periodic_push`, one push to the
partition `api/push_shards.partition_of` picks for the job's pre-assigned jid. The ticker then moves
the entry at once (`SlotPusher.move`).

Exactly once: the entry is written only by the script whose SET NX claimed the slot (a claim is made
once, so one entry per slot); the mover's push leaves a `pushed:<jid>` marker in the partition, so
moving the entry again (a sweep after the ticker died, or two sweeps at once) pushes no second copy;
the entry is deleted only after the push. A ticker that dies after the claim, or loses the move's
connection, leaves the entry: any worker's poller sweep moves it once its lease (OUTBOX_LEASE_S) lapsed.

The kind's apply step does nothing: everything the home slot keeps of the slot (claim, `last_slot`,
the run history's "enqueued" record with the jid, the running lock) was written with the claim, in
the same script as the entry; what is left is the push, which every move does.
"""

from __future__ import annotations

from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api.push_shards import partition_of
from cogworker.settings_fields import SettingsFields
from cogworker.store import fanout, keys, outbox
from cogworker.store.shard_clients import SlotClients

log = structlog.get_logger("cogworker.periodic")

KIND = "periodic_push"


def entry_id(name: str, slot: int) -> str:
    """One id per slot of an entry: a slot's entry written twice would overwrite, not double."""
    return f"periodic:{name}:{slot}"


def script_args(name: str, slot: int, job: dict[str, Any] | None) -> list[str]:
    """periodic.lua's ARGV[13] and ARGV[14] in the sharded layout: the outbox entry pushing `job` (with
    its jid already assigned) and its id; an empty entry when no job goes with the call (modes other
    than "enqueue")."""
    if job is None:
        return ["", ""]
    text = codec.dumps(job)
    return [outbox.encode(KIND, [(partition_of(job), text)], name=name, slot=slot), entry_id(name, slot)]


def apply(mover: outbox.Mover, entry: outbox.Entry) -> None:
    """The kind's apply step: nothing (the module's doc says why); idempotent by having no effect."""


class SlotPusher:
    """Moves the outbox entries this process's ticker writes; its Mover is made on first use, from the
    worker's partition clients or, without them, clients derived from the home client.

    An entry whose move failed, or whose claim script's reply was lost (it may have run and written
    the entry), is kept in `left` and moved again at the ticker's next check (`retry_left`): its job is
    pushed a poll later rather than when a sweep finds it. An id whose entry isn't there (the script
    never ran, or a sweep moved it) is simply forgotten."""

    def __init__(self, home: redis.Redis, settings: SettingsFields, clients: SlotClients | None) -> None:
        self._home = home
        self._settings = settings
        self._clients = clients
        self._mover: outbox.Mover | None = None
        self.left: set[str] = set()

    def _get_mover(self) -> outbox.Mover:
        if self._mover is None:
            clients = self._clients if self._clients is not None else fanout.clients_of(self._home)
            self._mover = outbox.Mover(clients, self._settings)
        return self._mover

    def move(self, entry: str) -> bool:
        """Push the slot's job now; False when that failed and the entry is left (logged)."""
        try:
            self._get_mover().move_ids(None, [entry])
        except redis.RedisError as exc:
            self.left.add(entry)
            log.warning(
                "periodic_push_left",
                entry=entry,
                outbox=keys.OUTBOX,
                error=f"{type(exc).__name__}: {exc}",
                note="claimed: moved again at the next check, or by any worker's outbox sweep",
            )
            return False
        except (ValueError, KeyError, TypeError) as exc:
            # Not an entry this version can read (edited by hand?): the sweep logs it and leaves it;
            # retrying it here every check would only repeat the error.
            self.left.discard(entry)
            log.error("periodic_push_unreadable", entry=entry, outbox=keys.OUTBOX, error=str(exc))
            return False
        self.left.discard(entry)
        return True

    def retry_left(self) -> None:
        """Move the entries left by a failed move or a lost reply (a failure keeps them for next time)."""
        for entry in sorted(self.left):
            self.move(entry)
