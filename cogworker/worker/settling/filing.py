"""Filing into the job sets outside a settler: the records stopping processes handed over
(cogworker:unsettled), quarantining an unusable record, and the parts of a filing script's call every
filing shares (its death notice; a batch member's count: worker/settling/batch_settle.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api import death, sidekiq_payload
from cogworker.settings_fields import SettingsFields
from cogworker.store import key_guard, keys, shards
from cogworker.store.connection import is_unavailable
from cogworker.store.locks import Locks
from cogworker.store.scripts import Scripts

log = structlog.get_logger("cogworker.settle")

# settle.lua's replies besides a wrong-type key: nothing filed (recovery took the job, NOT_LISTED);
# filed now; filed by an earlier call whose reply was lost; filed though Redis had lost the job's
# in-progress entry (a server that is not the one the job was fetched from).
NOT_LISTED, FILED, ALREADY_FILED, FILED_THOUGH_LOST = 0, 1, 2, 3


def settle_reply(reply: Any, jid: str, set_key: str) -> bool:
    """Whether settle.lua's `reply` means the job is filed: by this call, or by an earlier call of the
    same filing whose reply was lost (its locks are then released by the caller, as for any). A job
    filed after Redis lost its in-progress entry is logged: the loss was Redis's, and the operator
    learns which jobs were caught by this check."""
    if reply == FILED_THOUGH_LOST:
        log.warning(
            "job_filed_after_redis_lost_it",
            jid=jid,
            set=set_key,
            note="Redis is not the server the job was fetched from (restarted without its data, or "
            "failed over) and had lost its in-progress entry: filed all the same",
        )
    return reply in (FILED, ALREADY_FILED, FILED_THOUGH_LOST)


# A dead filing of a handed-over record whose call got no answer: (set, payload text, payload). The
# call may have filed it and popped the record, so no later poll meets the record again: the next
# poll looks for the payload in its set instead, and releases the job's locks if it is there.
Unanswered = list[tuple[str, str, dict[str, Any]]]


def file_unsettled(
    client: redis.Redis,
    scripts: Scripts,
    settings: SettingsFields,
    locks: Locks,
    unanswered: Unanswered | None = None,
) -> int:
    """File the records stopping processes handed over. A record that can't be filed (not JSON, or
    naming a set that isn't one of ours) is quarantined for a human with a TTL, so it neither blocks
    the records behind it nor is silently deleted. `unanswered` (the caller's, kept between calls)
    holds the dead filings whose call got no answer. The one-slot layout's list; in the sharded layout
    each partition has one, filed by partition_unsettled.py (the poller calls whichever applies)."""
    if unanswered is None:
        unanswered = []
    _settle_unanswered(client, locks, unanswered)
    sets: tuple[str, ...] = (keys.RETRY, keys.DEAD, keys.SCHEDULE)
    if keys.SIDEKIQ:  # a discarded job's filing (api/sidekiq_payload.py)
        sets = (*sets, sidekiq_payload.discarded_key())
    return file_records(
        (client, scripts, settings, locks),
        Target(keys.UNSETTLED, sets, keys.DEAD, keys.DEATHS),
        unanswered,
    )


@dataclass(frozen=True, slots=True)
class Target:
    """The keys of one `unsettled` list: the one-slot layout's, or a partition's (shard_route.py)."""

    unsettled: str
    sets: tuple[str, ...]  # the sets a record may name
    dead: str
    deaths: str
    orphanings: Callable[[str], str] = keys.orphanings
    quarantine: Callable[[str], str] = keys.quarantine
    partition: shards.Partition | None = None  # the sharded layout's partition of these keys


def file_records(
    via: tuple[redis.Redis, Scripts, SettingsFields, Locks], target: Target, unanswered: Unanswered
) -> int:
    """File the records at the head of `target`'s unsettled list (up to 100) into their sets."""
    client, scripts, settings, locks = via
    filed = 0
    for record in client.lrange(target.unsettled, 0, 99):
        entry = codec.loads_dict(record)
        valid = (
            entry is not None
            and entry.get("set") in target.sets
            and isinstance(entry.get("score"), int | float)
            and isinstance(entry.get("payload"), dict)
        )
        if not valid or entry is None:
            quarantine_head(client, settings, target.unsettled, str(record), "unsettled", target.quarantine)
            continue
        payload: dict[str, Any] = entry["payload"]
        try:
            text = codec.dumps(payload)
        except codec.EncodeError:
            # Not one we handed over (those are encoded safely): set aside like any unusable record.
            quarantine_head(client, settings, target.unsettled, str(record), "unsettled", target.quarantine)
            continue
        dead = entry["set"] == target.dead or (
            bool(keys.SIDEKIQ) and entry["set"] == sidekiq_payload.discarded_key()
        )
        notice_keys, notice_args = death_notice(settings, death.cause_of(payload), text, dead, target.deaths)
        filing_keys = [
            target.unsettled,
            entry["set"],
            target.orphanings(str(payload.get("jid") or "")),
            *notice_keys,
        ]
        filing_args = [record, entry["score"], text, *notice_args]
        try:
            if dead and target.partition is not None and ("bid" in payload or "bcb" in payload):
                # The sharded layout: the member's death goes to its partition's outbox with the filing.
                from cogworker.worker.settling.batch_shard_acks import end_dead

                done = end_dead(
                    client, settings, "file_unsettled", target.partition, filing_keys, filing_args, payload
                )
            else:
                # A batch member's count goes with it in the one-slot layout (batch_settle.py).
                done = run_filing(
                    (client, scripts, settings),
                    "file_unsettled",
                    filing_keys,
                    filing_args,
                    payload if dead and target.dead == keys.DEAD else {},
                )
        except Exception as exc:
            if dead and is_unavailable(exc):
                unanswered.append((entry["set"], text, payload))
            raise
        wrong = key_guard.script_wrong_type(done)
        if wrong is not None:
            # The head stays where it is (the records behind it wait their turn) until the guard
            # has moved the key aside.
            log.error("unsettled_filing_stopped_by_wrong_type_key", key=wrong)
            key_guard.request(client, wrong)
            break
        if done == 1:
            filed += 1
        if done in (1, 2) and dead:
            # 2: filed by an earlier call whose reply was lost (or by another process, which released
            # them too): the locks are released here all the same, not left to their TTL.
            locks.release_terminal(payload)
    return filed


def _settle_unanswered(client: redis.Redis, locks: Locks, unanswered: Unanswered) -> None:
    """Release the locks of the unanswered dead filings found filed. One not filed is still at the
    head of `unsettled` (the script writes nothing else first), where this poll files it; one that
    can't be checked yet (Redis still away) waits for the next poll."""
    while unanswered:
        set_key, text, payload = unanswered[0]
        if client.zscore(set_key, text) is not None:
            locks.release_terminal(payload)
        unanswered.pop(0)


def run_filing(
    via: tuple[redis.Redis, Scripts, SettingsFields],
    name: str,
    keys_: list[str],
    args: list[Any],
    dead: dict[str, Any],
) -> Any:
    """Run filing script `name`; `dead` is the payload filed in dead (else empty). A batch member's
    death is counted in its batch by the same script (worker/settling/batch_settle.py, loaded only
    for one)."""
    client, scripts, settings = via
    if dead and sidekiq_payload.batch_member(dead):
        from cogworker.worker.settling.batch_settle import run_filed

        return run_filed(client, settings, name, keys_, args, dead)
    return scripts.run(name, keys_, args, client=client)


def death_notice(
    settings: SettingsFields, cause: str, text: str, dead: bool, deaths_key: str = ""
) -> tuple[list[str], list[Any]]:
    """The extra keys and arguments a filing script takes to push a death notice: none unless the
    filing is in dead. `deaths_key`: the list it goes on (a partition's, in the sharded layout)."""
    if not dead:
        return [], []
    return [deaths_key or keys.DEATHS], [death.notice(cause, text), settings.death_notices_max]


def quarantine_head(
    client: redis.Redis,
    settings: SettingsFields,
    list_key: str,
    record: str,
    what: str,
    name: Callable[[str], str] = keys.quarantine,
) -> None:
    """Move one unusable record aside (its own key, with a TTL) and log it for a human. Written aside
    before it is taken off the list: MULTI keeps the commands before a failing one, so a removal
    first would lose the record if the write failed. `name`: the quarantine key's builder, in the
    list's own slot (a partition's in the sharded layout)."""
    target = name(f"{what}:{time.time():.6f}")
    pipe = client.pipeline(transaction=True)
    pipe.set(target, record, ex=int(settings.quarantine_ttl_s))
    pipe.lrem(list_key, 1, record)
    pipe.execute()
    log.error("record_quarantined", source=list_key, key=target, record=codec.escape(record[:200]))
