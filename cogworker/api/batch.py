"""Batches: a set of jobs run as one unit, with callbacks when it is done (like Sidekiq Pro's).

    with cogworker.batch(description="import 42", on_complete=report, on_success=publish) as b:
        for row in rows:
            import_row.perform_async(row)          # every push in the block is a member
        cogworker.push_bulk(index_row, [(r,) for r in rows])

A member is registered in Redis (its jid in the batch's pending set) before it is pushed, by a hook
run just before the write (api/middleware.py `before_write`), and carries its batch in its payload
(`bid`; with nested batches `bup`, the parents; `bq`, the callbacks' queues). A worker acknowledges
a member through batch_ack.lua and files it in dead through the batch variant of settle.lua, which
record its end in the same atomic step (store/batch_scripts.py): the count is per jid, so a member
that runs twice counts once. The `with` block holds the batch: nothing is decided before it closes.
A hold outlives no process: a member run's is released by whatever ends the run, any other block's
is a lease its process renews (api/batch_holds.py).

Callbacks are ordinary jobs, pushed by the script that decides: `on_complete` when every member
succeeded or went to dead (or ended unrun: expired, cancelled), `on_success` when every member
succeeded, `on_death` at the first member to go to dead. Each gets `(bid, *callback_args)` (or
`(bid, **callback_args)` for a dict). A batch created inside another's block is one member of it;
its callbacks become members of the parent too, so a parent completes after its children and their
callbacks.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
import structlog

from cogworker import codec
from cogworker.api import batch_holds, client, middleware
from cogworker.api.decorator import JobFunction, JobSetter
from cogworker.api.payload import new_jid
from cogworker.store import batch_scripts, key_guard, keys

_log = structlog.get_logger("cogworker.batch")

KINDS = ("success", "complete", "death")
Callback = JobFunction | JobSetter


class BatchClosed(Exception):
    """The batch is complete (or expired): no member can be added to it any more."""

    def __init__(self, bid: str) -> None:
        super().__init__(f"batch {bid} is complete or gone: no job can join it")
        self.bid = bid


class Batch:
    """A batch: `bid`, its parents (`up`, nearest first) and its callbacks' queues (`queues`, its own
    and its parents'), which every member carries so a worker can reach each level in one script."""

    __slots__ = ("_hold", "bid", "queues", "up")

    def __init__(self, bid: str, up: Sequence[str] = (), queues: Sequence[str] = ()) -> None:
        self.bid = bid
        self.up = list(up)
        self.queues = list(queues)
        self._hold: batch_holds.Hold | None = None  # the hold `create` took, which `close` releases

    def __repr__(self) -> str:
        return f"<batch {self.bid}>"

    @contextmanager
    def jobs(self) -> Iterator[Batch]:
        """Add members: every push in the block joins this batch (from a member job, or any code while
        the batch is not complete). The block holds the batch open until it ends."""
        if not client.redis_in_use():  # a testing mode: nothing to track
            yield self
            return
        member = batch_holds.run_hold(self.bid)
        try:
            if member is None:  # not a run of a member of this batch: a lease
                hold: batch_holds.Hold | None = _take(self, "hold", *batch_holds.new_lease(_lease_s()))
            elif member[1]:  # the run's outermost block on its own batch
                hold = _take(self, "hold", f"run:{member[0].jid}", member[0].owner)
            else:
                hold = None  # the run's outer block holds the batch already
        except BaseException:
            if member is not None:  # refused (BatchClosed) or failed: this block holds nothing
                batch_holds.leave_run(member[0])
            raise
        token = _open.set(self)
        try:
            yield self
        finally:
            _open.reset(token)
            if member is not None:
                batch_holds.leave_run(member[0])
            if hold is not None:
                _release(hold)

    def add(self, fn: Callback, *args: Any, **kwargs: Any) -> str | None:
        """Push one job as a member of this batch; returns its jid."""
        with self.jobs():
            return fn.perform_async(*args, **kwargs)

    def status(self) -> Any:
        from cogworker.api.batch_status import batch_status

        return batch_status(self.bid)


# The batch whose block is open in this context (pushes join it), and the batch of the member job
# running in this context (`current_batch()`).
_open: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("cogworker_open_batch", default=None)
_running: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("cogworker_member_of", default=None)


def current_batch() -> Batch | None:
    """The batch of the member job running now (None outside one): `current_batch().add(...)`."""
    return _running.get()


@contextmanager
def as_member(job: dict[str, Any], owner: str = "") -> Iterator[None]:
    """Around a member job's body (worker/running/processor.py): `current_batch()` is its batch, and a block
    on it holds it for this run (`owner`: the in-progress list the run is on)."""
    bid = str(job["bid"])
    token = _running.set(Batch(bid, _strings(job.get("bup")), _strings(job.get("bq"))))
    run_token = batch_holds.set_run(batch_holds.Run(str(job.get("jid") or ""), bid, owner))
    try:
        yield
    finally:
        batch_holds.reset_run(run_token)
        _running.reset(token)


@contextmanager
def batch(
    description: str = "",
    *,
    on_success: Callback | None = None,
    on_complete: Callback | None = None,
    on_death: Callback | None = None,
    callback_args: Sequence[Any] | dict[str, Any] = (),
) -> Iterator[Batch]:
    """Open a batch: jobs pushed in the block are its members. Inside another batch's open block (its
    `with`, or `b.jobs()`), the new batch is a member of that one. Under a testing mode (no Redis)
    the block only runs: nothing is tracked and no callback is pushed."""
    if not client.redis_in_use():
        yield Batch(new_jid())
        return
    new = create(description, on_success=on_success, on_complete=on_complete, on_death=on_death,
                 callback_args=callback_args, parent=_open.get())  # fmt: skip
    token = _open.set(new)
    try:
        yield new
    finally:
        # Closed even when the block raised: its members were pushed and will run; the batch
        # completes when they end.
        _open.reset(token)
        close(new)


def create(
    description: str = "",
    *,
    on_success: Callback | None = None,
    on_complete: Callback | None = None,
    on_death: Callback | None = None,
    callback_args: Sequence[Any] | dict[str, Any] = (),
    parent: Batch | None = None,
) -> Batch:
    """Create a batch held open (close it with `close`): the step under `batch()`, for code that
    builds batches itself (a chain's group step). Prefer `batch()`."""
    if not isinstance(description, str):
        raise TypeError(f"description must be a str, not {type(description).__name__}")
    bid = new_jid()
    up = [parent.bid, *parent.up] if parent is not None else []
    fields: dict[str, str] = {
        "description": description,
        "parent": up[0] if up else "",
        "up": codec.dumps(up),
    }
    own_queues: list[str] = []
    for kind, fn in (("success", on_success), ("complete", on_complete), ("death", on_death)):
        if fn is None:
            continue
        text, queue, jid = _callback(fn, kind, bid, callback_args, parent)
        fields |= {
            f"cb:{kind}": text,
            f"cbq:{kind}": queue,
            f"cbjid:{kind}": jid,
            f"cbstate:{kind}": "waiting",
        }
        own_queues.append(queue)
    queues = sorted({*own_queues, *(parent.queues if parent is not None else [])})
    fields["queues"] = codec.dumps(queues)
    new = Batch(bid, up, queues)
    settings = client.settings()
    hold_name, expiry = batch_holds.new_lease(settings.batch_hold_lease_s)
    args: list[Any] = ["new", repr(time.time()), bid, fields["parent"], time.time() - settings.batch_ttl_s,
                       hold_name, expiry]  # fmt: skip
    for name, value in fields.items():
        args += [name, value]
    if not _run_open(new, "new", args_override=args):
        raise BatchClosed(up[0])
    new._hold = _held(new, hold_name, expiry)
    return new


def close(target: Batch) -> None:
    """Release the hold `create` took: completes the batch if nothing else holds it and nothing is
    pending. Closing it again changes nothing."""
    if target._hold is not None:
        _release(target._hold)


def create_batch(
    members: Iterable[tuple[Callback, Sequence[Any]]],
    description: str = "",
    **callbacks: Any,
) -> str:
    """Create a batch of `members` ((job, args) pairs) with `batch()`'s callbacks; returns its bid.
    Usable anywhere, a job's body included."""
    with batch(description, **callbacks) as made:
        for fn, args in members:
            fn.perform_async(*args)
    return made.bid


def _callback(
    fn: Callback, kind: str, bid: str, callback_args: Sequence[Any] | dict[str, Any], parent: Batch | None
) -> tuple[str, str, str]:
    """The callback's payload as stored (a JSON object without its closing brace: the script adds the
    push time), its queue and its jid."""
    if not isinstance(fn, JobFunction | JobSetter):
        raise TypeError(f"on_{kind} takes a job (or job.set(...)), not {type(fn).__name__}")
    if isinstance(callback_args, dict):
        args, kwargs = [bid], dict(callback_args)
    else:
        args, kwargs = [bid, *callback_args], {}
    options = dict(fn.options)
    queue = str(options.get("queue") or fn.job.queue)
    job = client.build_job(fn.job.name, args, kwargs, queue=queue, options=options, at=None)
    job["bcb"] = [bid, kind]
    if parent is not None:
        job["bid"] = parent.bid
        if parent.up:
            job["bup"] = parent.up
        if parent.queues:
            job["bq"] = parent.queues
    job.pop("enqueued_at", None)
    text = codec.dumps(job)
    return text[: text.rindex("}")], queue, str(job["jid"])


def _run_open(
    target: Batch, mode: str, jids: Sequence[str] = (), args_override: list[Any] | None = None
) -> bool:
    parent = target.up[0] if target.up else None
    script_keys = [
        keys.batch(target.bid),
        keys.batch_pending(target.bid),
        keys.BATCHES,
        keys.batch(parent) if parent else keys.batch(target.bid),
        keys.batch_pending(parent) if parent else keys.batch_pending(target.bid),
        keys.BATCH_LEASES,
    ]
    args = args_override or [mode, repr(time.time()), target.bid, "", 0, "", "", *jids]
    conn = client.connection()
    reply = batch_scripts.run(conn, "batch_open", script_keys, args)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)
    if not reply and mode != "new":
        raise BatchClosed(target.bid)
    return bool(reply)


def _take(target: Batch, mode: str, name: str, value: str) -> batch_holds.Hold:
    """Hold `target` (raises BatchClosed when it is complete or gone)."""
    args: list[Any] = [mode, repr(time.time()), target.bid, "", 0, name, value]
    _run_open(target, mode, args_override=args)
    return _held(target, name, value)


def _held(target: Batch, name: str, value: str) -> batch_holds.Hold:
    hold = batch_holds.Hold(target.bid, list(target.up), list(target.queues), name, value)
    if hold.is_lease:
        batch_holds.keep_renewed(hold, client.connection(), _lease_s())
    return hold


def _release(hold: batch_holds.Hold) -> None:
    batch_holds.release(client.connection(), hold, client.settings().batch_ttl_s)


def _lease_s() -> float:
    return client.settings().batch_hold_lease_s


def _register(jobs: list[dict[str, Any]]) -> Any:
    """Before-write hook: jobs pushed while a batch's block is open join it, registered first."""
    target = _open.get()
    if target is None:
        return None
    for job in jobs:
        job["bid"] = target.bid
        if target.up:
            job["bup"] = target.up
        if target.queues:
            job["bq"] = target.queues
    jids = [str(job["jid"]) for job in jobs]
    try:
        _run_open(target, "add", jids)
    except (redis.ConnectionError, redis.TimeoutError):
        # The reply was lost, maybe after they were registered; none of them will be written.
        _leave(target, jids)
        raise

    def undo(unwritten: list[dict[str, Any]]) -> None:
        # These jobs are known not to be written: they leave the batch. Those whose write may have
        # happened (a lost reply) stay.
        _leave(target, [str(job["jid"]) for job in unwritten])

    return undo


def _leave(target: Batch, jids: list[str]) -> None:
    """Members that will never be written leave the batch, counted by what was registered (the
    block still holds the batch, so nothing is decided meanwhile). Best-effort: a failure is logged,
    and the batch then waits for members that never run."""
    try:
        conn = client.connection()
        removed = int(conn.srem(keys.batch_pending(target.bid), *jids))
        if removed:
            conn.hincrby(keys.batch(target.bid), "total", -removed)
    except redis.RedisError as exc:
        _log.error(
            "batch_members_not_removed", bid=target.bid, jids=jids[:10], error=f"{type(exc).__name__}: {exc}"
        )


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


middleware.add_before_write_hook(_register)
