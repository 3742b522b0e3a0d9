"""At shutdown, what a stopping process still has to settle once its jobs are done: the finished
jobs' acknowledgements, and the filings it could not make (Redis was failing), handed to Redis for
any other process's poller to file from cogworker:unsettled (filing.py). Both come before the
requeue of the process's own list, and each is tried again until the stop deadline while Redis
doesn't answer: what is not settled by then is on that list, and runs again.

`handover.lua` pushes the record and takes the job off the in-progress list in one step, and leaves a
mark (`handed-over:<digest>`, an hour) in the same step. A handover whose reply is lost is sent
again: the mark makes the second call say that the first one happened (a list without the job could
also mean it was requeued elsewhere), so what is logged is what Redis holds. Nothing is undone on the
client, and nothing needs to be: whichever of the two calls runs first does the handover, and the
requeue only moves what is still on the list, so a job is either handed over or requeued, never both.
An acknowledgement sent again is as safe: the fetch script counts only the entries it takes off.

In the sharded layout a job is handed over in its partition's slot (shard_route.py): the record goes on
that partition's `unsettled` list, naming the partition's set, and the mark is `shards.handed_over`,
so the push and the removal from the partition's in-progress list stay one step.

An acknowledgement can only be recorded in Redis, where the recovering process looks: a Redis that
stays unreachable until the deadline leaves nothing better than saying which jobs will run again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Protocol

import redis
import structlog

from cogworker import codec
from cogworker.api.retry import Filing, encoded
from cogworker.store import key_guard, keys, shards
from cogworker.store.connection import is_unavailable, never_sent
from cogworker.store.locks import Locks
from cogworker.store.scripts import Scripts
from cogworker.worker.fetching.fetch import Fetcher, digest, on_list
from cogworker.worker.settling.shard_route import ShardRoute, set_of, unsettled

log = structlog.get_logger("cogworker.settle")

# How long a handover's mark lives: far past any retry of it, which ends with the stopping process.
MARK_TTL_S = 3600
# Between two tries of a handover or an acknowledgement Redis did not answer.
RETRY_PAUSE_S = 0.2

# What became of one handover.
HANDED = "handed"  # on cogworker:unsettled (confirmed by its reply, or by its mark)
REQUEUED = "requeued"  # no longer on our list: orphan recovery requeued it, another process runs it
FILED = "filed"  # no longer on our list: filed by a settle whose reply was lost (its entry is there)
KEPT = "kept"  # Redis answered that it wrote nothing (a wrong-type key, an error): it runs again
UNREACHED = "unreached"  # no try reached Redis by the deadline: known not handed over, it runs again
UNKNOWN = "unknown"  # no reply by the deadline, and a try may have run: one or the other, not both


class Acks(Protocol):
    """The settler's acknowledgements (settle.py), as the final flush takes them."""

    @property
    def pending_acks(self) -> int: ...

    def take_acks(self) -> list[tuple[str, str]]: ...

    def return_acks(self, acks: list[tuple[str, str]]) -> None: ...


def flush_acks(fetcher: Fetcher, acks: Acks, deadline: float) -> int:
    """Send the finished jobs' acknowledgements still held, tried again until `deadline` (monotonic)
    while Redis doesn't answer; at least once. Returns how many are still unsent: their jobs stay on
    the in-progress list, and the requeue that follows (or orphan recovery) runs them again."""
    tried = may_have_run = False
    wait = threading.Event()  # never set: an interruptible pause between tries
    while acks.pending_acks:
        taken = acks.take_acks()
        try:
            kept = fetcher.fetch(0, taken).unsent_acks
        except Exception as exc:
            acks.return_acks(taken)
            if not tried:
                log.warning("final_acks_unanswered", count=len(taken), error=f"{type(exc).__name__}: {exc}")
            tried, may_have_run = True, may_have_run or not never_sent(exc)
        else:
            if not kept:
                continue
            # Sharded: the partitions that answered have theirs; the others' are tried again.
            acks.return_acks(kept)
            tried = may_have_run = True
        left = deadline - time.monotonic()
        if left <= 0:
            break
        wait.wait(min(RETRY_PAUSE_S, left))
    unsent = acks.pending_acks
    if unsent:
        log.error(
            "acks_unsent_jobs_left_in_progress",
            count=unsent,
            note="finished jobs whose acknowledgement Redis did not take by the stop deadline stay on "
            "the in-progress list and will run again"
            + (" (unless a try Redis did not answer reached it)" if may_have_run else ""),
        )
    return unsent


def handover_record(filing: Filing, text: str, set_key: str = "") -> str:
    """The JSON of {set, score, payload}, around the payload's text as already encoded (encoding it
    again could only fail, where the filing's own encoding was made safe). `set_key`: the set named
    when not the filing's own (a partition's)."""
    named = set_key or filing.set_key
    return f'{{"set":{codec.dumps(named)},"score":{codec.dumps(filing.score)},"payload":{text}}}'


def hand_over(
    via: tuple[redis.Redis, Scripts, Locks],
    pending: list[tuple[str, Filing, str]],
    deadline: float,
    route: ShardRoute | None = None,
) -> int:
    """Hand `pending` ((raw payload as fetched, filing, the in-progress list it is on: "" for none)
    triples) over, each tried again until
    `deadline` (monotonic) while Redis doesn't answer. Returns how many are not known to be handed
    over (kept, or their outcome unknown). A dead filing found already made has its locks released,
    as when it is filed."""
    client, scripts, locks = via
    outcomes: Counter[str] = Counter()
    unreachable = False
    for raw, filing, in_progress in pending:
        if unreachable:
            # Redis did not answer by the deadline: the rest are not sent (known not handed over),
            # rather than each waiting out its own timeout.
            outcomes[UNREACHED] += 1
            continue
        outcome = _hand_over_one((client, scripts, route), in_progress, raw, filing, deadline)
        outcomes[outcome] += 1
        if outcome == FILED and filing.dead:
            locks.release_terminal(filing.payload)
        unreachable = outcome in (UNREACHED, UNKNOWN)
    left = outcomes[KEPT] + outcomes[UNREACHED]
    if left:
        log.error(
            "unsettled_jobs_left_in_progress",
            count=left,
            note="not handed over (Redis refused or was unreachable): they stay on the in-progress "
            "list and will run again",
        )
    if outcomes[UNKNOWN]:
        log.error(
            "handover_outcome_unknown",
            count=outcomes[UNKNOWN],
            note="Redis did not answer by the stop deadline: each job is either on cogworker:unsettled "
            "(another process files it) or still on the in-progress list (it runs again), never both",
        )
    return left + outcomes[UNKNOWN]


def _hand_over_one(
    via: tuple[redis.Redis, Scripts, ShardRoute | None],
    in_progress: str,
    raw: str,
    filing: Filing,
    deadline: float,
) -> str:
    client, scripts, route = via
    filing, text = encoded(filing, raw)
    if route is None:
        set_key, target = filing.set_key, keys.UNSETTLED
        record = handover_record(filing, text)
        mark = keys.handed_over(digest(record))
    else:  # the job's partition: its unsettled list, set and mark, on its client
        partition = route.partition_of(in_progress, raw)
        client = route.client(partition)
        set_key, target = set_of(filing.set_key, partition), unsettled(partition)
        record = handover_record(filing, text, set_key)
        mark = shards.handed_over(partition, digest(record))
    listed, payload = on_list(in_progress, raw, target)
    jid = filing.payload.get("jid")
    script_keys = [target, listed, mark]
    tried = may_have_run = False
    wait = threading.Event()  # never set: an interruptible pause between tries
    while True:
        try:
            reply: Any = scripts.run("handover", script_keys, [record, payload, MARK_TTL_S], client=client)
        except Exception as exc:
            if not is_unavailable(exc):
                # Redis answered with an error: the script stopped before it wrote (it checks every
                # key first), so nothing was handed over.
                log.error("handover_failed", jid=jid, error=f"{type(exc).__name__}: {exc}")
                return KEPT
            if not tried:
                log.warning("handover_unanswered", jid=jid, error=f"{type(exc).__name__}: {exc}")
            tried, may_have_run = True, may_have_run or not never_sent(exc)
            left = deadline - time.monotonic()
            if left <= 0:
                return UNKNOWN if may_have_run else UNREACHED
            wait.wait(min(RETRY_PAUSE_S, left))
            continue
        wrong = key_guard.script_wrong_type(reply)
        if wrong is not None:
            log.error("handover_stopped_by_wrong_type_key", jid=jid, key=wrong)
            key_guard.request(client, wrong)
            return KEPT
        if reply == 0:
            return _off_the_list(client, set_key, text, jid)
        if reply == 2:
            log.info("handover_confirmed_after_lost_reply", jid=jid)
        return HANDED


def _off_the_list(client: redis.Redis, set_key: str, text: str, jid: Any) -> str:
    """The job is no longer on our list: requeued by orphan recovery, or filed by an earlier settle
    of ours whose reply was lost (then its entry is in its set: the filed text is that failure's own)."""
    try:
        found = client.zscore(set_key, text) is not None
    except redis.RedisError:
        found = False  # unknown: what the list says stands
    if found:
        log.info(
            "handover_not_needed_filed_before", jid=jid, note="a settle whose reply was lost had filed it"
        )
        return FILED
    log.info("handover_skipped_requeued_job", jid=jid, note="requeued while silent: run elsewhere")
    return REQUEUED
