"""Poison pills' dead entries: requeue.lua and reconcile.lua file a pill raw in dead (a script can't
build the entry Python writes); here it is swapped for a proper one, with its ProcessDied error and its
death notice (api/death.py), its orphan counter deleted and the failure counted. A swap that fails
(Redis away, a key of the wrong type) is kept and retried at the next poll.

In the sharded layout a pill lies in the dead set of the partition whose list it was on: it is swapped
there, on that partition's client, with the partition's death notices and counters. A batch member's
swap writes its death to the partition's outbox in the same script, and its batch, in the home slot,
counts it when the entry is moved (store/batch_ends.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api import death, retry, sidekiq_payload
from cogworker.api.job_status import record_failed
from cogworker.store import job_keys, key_guard, keys, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.scripts import Scripts

log = structlog.get_logger("cogworker.recovery")

# The client and scripts of a partition's slot (sharded layout).
PartitionScriptsOf = Callable[[shards.Partition], tuple[redis.Redis, Scripts]]


class Burials:
    def __init__(self, ctx: RedisContext, partition_scripts: PartitionScriptsOf | None = None) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = ctx.settings
        self._outages = ctx.outages
        self._locks = ctx.locks
        self._partition_scripts = partition_scripts
        self._pending: list[tuple[str, shards.Partition | None]] = []
        self._mutex = threading.Lock()

    def complete(self, raws: list[str], partition: shards.Partition | None = None) -> None:
        """`partition`: the sharded layout's partition whose dead set holds them (None: keys.DEAD)."""
        for raw in raws:
            pending = (raw, partition)
            try:
                self._complete(raw, partition)
            except Exception as exc:
                with self._mutex:
                    if pending not in self._pending:
                        self._pending.append(pending)
                self._outages.report("Orphan recovery", exc)
                if isinstance(exc, key_guard.WrongTypeKey):
                    key_guard.request(self._client, exc.key)
                elif key_guard.is_wrong_type(exc):
                    key_guard.request(
                        self._client, keys.DEAD if partition is None else shards.dead(partition)
                    )
            else:
                with self._mutex:
                    if pending in self._pending:
                        self._pending.remove(pending)

    def _complete(self, raw: str, partition: shards.Partition | None) -> None:
        job: dict[str, Any] = codec.loads_dict(raw) or {
            "class": "cogworker.UnreadablePayload",
            **codec.raw_fields(raw),  # bytes that aren't UTF-8 kept escaped, and exactly in base64
        }
        now = time.time()
        job.update(
            {
                "error_class": "cogworker.ProcessDied",
                "error_message": (
                    f"its process died while running it more than {self._settings.max_orphanings} times, "
                    "the last time running it alone (killed for memory? SIGKILL? a crash in native "
                    "code?): not retried again"
                ),
                "failed_at": job.get("failed_at", now),
                "died_at": now,
            }
        )
        # Encoded before the Redis call, sanitised if JSON can't hold it: an encoding error retried
        # as if Redis had failed would never succeed.
        filing, text = retry.encoded(retry.Filing(keys.DEAD, now, job), raw)
        job = filing.payload
        # Its death notice (api/death.py) goes with the proper entry, in the same swap.
        args = [raw, now, text, death.notice(death.POISON_PILL, text), self._settings.death_notices_max]
        jid = job.get("jid")
        if partition is not None and self._partition_scripts is not None:
            client, scripts = self._partition_scripts(partition)
            dead_keys = [shards.dead(partition), shards.deaths(partition)]
            if "bid" in job or "bcb" in job:
                # A batch member: its death written to the partition's outbox by the same swap, then
                # counted in its batch in the home slot (store/batch_ends.py; loaded only for one).
                from cogworker.worker.settling.batch_shard_acks import end_dead

                swapped = end_dead(client, self._settings, "swap_dead", partition, dead_keys, args, job)
            else:
                swapped = scripts.run("swap_dead", dead_keys, args, client=client)
            counter = (
                shards.orphanings(partition, jid)
                if isinstance(jid, str)
                else shards.orphanings_raw(partition, job_keys.digest(raw))
            )
            failed = shards.stat(partition, "failed")
        else:
            client = self._client
            if sidekiq_payload.batch_member(job):
                # A batch member: counted dead in its batch by the same swap (loaded only for one).
                # A foreign `bid` (Sidekiq Pro's, in the Sidekiq mode) is not one.
                from cogworker.worker.settling.batch_settle import run_filed

                swapped = run_filed(client, self._settings, "swap_dead", [keys.DEAD, keys.DEATHS], args, job)
            else:
                swapped = self._scripts.run("swap_dead", [keys.DEAD, keys.DEATHS], args, client=client)
            counter = (
                keys.orphanings(jid) if isinstance(jid, str) else keys.orphanings_raw(job_keys.digest(raw))
            )
            failed = keys.STAT_FAILED
        wrong = key_guard.script_wrong_type(swapped)
        if wrong is not None:
            raise key_guard.WrongTypeKey(wrong, None)
        if swapped:
            where = {"partition": str(partition)} if partition is not None else {}
            log.error("poison_pill_to_dead", jid=jid, job=job.get("class"), **where)
            self._locks.release_terminal(job)
            pipe = client.pipeline(transaction=False)
            pipe.delete(counter)
            pipe.incr(failed)
            pipe.execute()
            self._record_failed(job)

    def _record_failed(self, job: dict[str, Any]) -> None:
        """Best-effort, like every status write: a tracked pill's status says "failed", not
        "working" (its last word, written when it started the run that killed its process)."""
        try:
            record_failed(self._client, self._settings.status_ttl_s, job)
        except Exception as exc:
            self._outages.report("Status", exc)

    def retry(self) -> None:
        with self._mutex:
            pending = list(self._pending)
        for raw, partition in pending:
            self.complete([raw], partition)

    @property
    def pending(self) -> int:
        with self._mutex:
            return len(self._pending)

    def reset(self) -> None:
        with self._mutex:
            self._pending.clear()
