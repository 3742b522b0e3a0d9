"""After a push failed: was it written? What the client may undo depends on the answer.

A push's reply can be lost after Redis ran it (the connection reset, or the reply came after
COGWORKER_REDIS_TIMEOUT_S). Giving back what the client chain took for the job (its unique claim,
its "queued" status, its batch membership) would then be wrong: the job is queued, and a retried
push would run it twice, a batch would complete before its member ran.

So a failure is sorted out before anything is undone:
- Redis answered with an error (a wrong-type key, a refused command): nothing was written.
- The connection failed: `push_check.lua` reads the markers the write leaves with its jobs
  (push_batch.lua) and fences the attempt off where it finds none, so a write still on its way can't
  land afterwards. Jobs found written stand: the push succeeded after all (a lost reply, nothing
  more). Jobs not written are undone.
- The check failed too (Redis still away): PushOutcomeUnknown is raised and nothing is undone. An
  interruption during the write (KeyboardInterrupt, a job's time limit) goes on as it is, marked
  (`may_be_queued`), and nothing is undone either. The claims then hold a duplicate back until
  their TTL, and a batch waits for a member that may never run (logged with its jid); never the
  other way round.

In the sharded layout a write went to one queue partition (api/push_shards.py), and its markers are in
that partition's slot: the check is asked on that partition's client, of those markers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import redis
import structlog

from cogworker.api.push_write import MARK_TTL_S
from cogworker.api.time_limits import JobTimeout
from cogworker.store import key_guard, keys, scripts, shards
from cogworker.store.connection import is_unavailable
from cogworker.store.replicas import NotReplicated

# A fence lives as long as the marker it stands for would have.
FENCE_TTL_MS = MARK_TTL_S * 1000
# Set on an interruption raised during a write (it goes on as it is): the job may be queued.
_UNKNOWN_MARK = "cogworker_push_outcome_unknown"

_log = structlog.get_logger("cogworker.client")


class PushOutcomeUnknown(redis.ConnectionError):
    """A push failed without an answer, and whether its jobs were written could not be found out.

    Raised by a push (`perform_async`, `push_bulk`, ...) when Redis stopped answering mid-write and
    stayed unreachable. The jobs may be queued: what the push took for them (unique claims, statuses,
    batch membership) is kept. To push again safely, send the same payload within two minutes
    (`job.build(...)` then `job.send(payload)`: a write finds the earlier one by its jid and makes
    no second copy). A new push of a unique job is refused as a duplicate while its claim holds; a
    new push of any other job may run it twice. A subclass of redis.ConnectionError, so code
    catching that still does.

    Attributes:
        jids: The jids of the jobs whose outcome is unknown.
    """

    def __init__(self, jids: Sequence[str], cause: BaseException) -> None:
        self.jids = tuple(jids)
        shown = ", ".join(self.jids[:5]) + (f" and {len(self.jids) - 5} more" if len(self.jids) > 5 else "")
        super().__init__(
            f"the push of job(s) {shown} got no answer ({type(cause).__name__}: {cause}) and Redis "
            "could not be asked whether it was written: the job(s) may be queued. Pushing the same "
            "payload again makes no second copy; a new push of the job may run it twice"
        )


def new_attempt() -> str:
    """A write attempt's token, held by the markers of the jobs it writes."""
    return os.urandom(8).hex()


def unwritten(
    conn: redis.Redis,
    jobs: Sequence[dict[str, Any]],
    attempt: str,
    failure: BaseException,
    partition: shards.Partition | None = None,
    home: redis.Redis | None = None,
) -> list[dict[str, Any]]:
    """The jobs of a failed write attempt known not to be written (the others stand); raises
    PushOutcomeUnknown, from `failure`, when that can't be known. With `partition` (the sharded
    layout), `conn` is the client of the partition the attempt wrote to and `home` the home slot's."""
    jids = to_ask(jobs, failure)
    if jids is None:
        return list(jobs)
    try:
        codes = _check(conn, jids, attempt, partition, home or conn)
    except Exception as exc:
        raise unknown(jids, failure, exc) from failure
    return sorted_out(jobs, codes, failure)


# The steps of `unwritten` around its one question to Redis, shared with the awaitable push's
# (api/aio_write.py), which asks the same question on a redis.asyncio client.


def to_ask(jobs: Sequence[dict[str, Any]], failure: BaseException) -> list[str] | None:
    """The jids to ask Redis about after `failure`; None when it wrote nothing (an error reply). An
    interruption is raised again at once, unasked and marked, so a time limit still ends the job and
    the chain's middleware keeps what it took."""
    if not _may_have_run(failure):
        return None
    jids = [str(job["jid"]) for job in jobs]
    if _interrupted(failure):
        _log.error("push_outcome_unknown", jids=jids[:10], count=len(jids), error=type(failure).__name__)
        setattr(failure, _UNKNOWN_MARK, True)
        raise failure
    return jids


def unknown(jids: list[str], failure: BaseException, asking: Exception) -> PushOutcomeUnknown:
    """The error for a write whose outcome Redis could not be asked about (`asking` failed)."""
    _log.error(
        "push_outcome_unknown", jids=jids[:10], count=len(jids), error=f"{type(asking).__name__}: {asking}"
    )
    return PushOutcomeUnknown(jids, failure)


def sorted_out(
    jobs: Sequence[dict[str, Any]], codes: Sequence[int], failure: BaseException
) -> list[dict[str, Any]]:
    """The jobs push_check.lua answered 0 for (not written); those written are logged and stand."""
    written = [str(job["jid"]) for job, code in zip(jobs, codes, strict=True) if code]
    if written:
        _log.warning("push_reply_lost_but_written", jids=written[:10], count=len(written), error=str(failure))
    return [job for job, code in zip(jobs, codes, strict=True) if not code]


def may_be_queued(exc: BaseException) -> bool:
    """Whether a push that raised `exc` may have queued its job: what the chain took for it stays."""
    return isinstance(exc, PushOutcomeUnknown | NotReplicated) or getattr(exc, _UNKNOWN_MARK, False) is True


def _may_have_run(failure: BaseException) -> bool:
    """False when Redis answered the write with an error: it wrote nothing (push_batch.lua checks
    every key before its first write). A ConnectionError or a timeout may come after it ran, and so
    may an interruption raised into the thread during the write."""
    if isinstance(failure, redis.ResponseError):
        return False
    return _interrupted(failure) or is_unavailable(failure)


def _interrupted(failure: BaseException) -> bool:
    """KeyboardInterrupt, SystemExit, or a job's time limit raised into its thread (api/time_limits.py)."""
    return not isinstance(failure, Exception) or isinstance(failure, JobTimeout)


def markers(jids: list[str], partition: shards.Partition | None) -> list[str]:
    """The `pushed:<jid>` markers a write left: the home's (the one-slot layout's), or the partition's."""
    if partition is None:
        return [keys.pushed(jid) for jid in jids]
    return [shards.pushed(partition, jid) for jid in jids]


def _check(
    conn: redis.Redis, jids: list[str], attempt: str, partition: shards.Partition | None, home: redis.Redis
) -> list[int]:
    reply = conn.register_script(scripts.source("push_check"))(
        keys=markers(jids, partition), args=[attempt, FENCE_TTL_MS], client=conn
    )
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(home, wrong)
    return [int(code) for code in reply]
