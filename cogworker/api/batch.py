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
from cogworker.api import batch_holds, batch_records, client, middleware
from cogworker.api.decorator import JobFunction, JobSetter
from cogworker.api.payload import new_jid

_log = structlog.get_logger("cogworker.batch")

KINDS = ("success", "complete", "death")
Callback = JobFunction[..., Any] | JobSetter[..., Any]


class BatchClosed(Exception):
    """The batch is complete (or expired): no member can be added to it any more.

    Raised when a job is pushed in a block of a batch that has completed (or whose records expired),
    or when a batch is opened inside one. Nothing was pushed to it: push the job outside the batch, or
    open a new batch for it.

    Attributes:
        bid: The batch's id.
    """

    def __init__(self, bid: str) -> None:
        super().__init__(f"batch {bid} is complete or gone: no job can join it")
        self.bid = bid


class Batch:
    """A batch of jobs run as one unit: what `cogworker.batch(...)` yields and `current_batch()` returns.

    Every member carries the batch's id, its parents and its callbacks' queues, so a worker can reach
    each level in one script.

    Attributes:
        bid: The batch's id (for `cogworker.batch_status`).
        up: The ids of the batches it is a member of, nearest first.
        queues: The queues of its callbacks and its parents'.
    """

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
        """Add members: every push in the block joins this batch.

        Usable from a member job (`cogworker.current_batch().jobs()`) or from any code while the batch
        is not complete. The block holds the batch open until it ends: nothing is decided meanwhile.
        Under a testing mode the block only runs.

        Yields:
            This batch.

        Raises:
            BatchClosed: The batch is complete or its records expired.
            WrongTypeKey: A batch key holds another type of value.
        """
        if not client.redis_in_use():  # a testing mode: nothing to track
            yield self
            return
        member = batch_holds.run_hold(self.bid)
        try:
            if member is None:  # not a run of a member of this batch: a lease
                hold: batch_holds.Hold | None = _take(
                    self, "hold", *batch_holds.new_lease(batch_records.lease_s())
                )
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
                batch_records.release(hold)

    def add(self, fn: Callback, *args: Any, **kwargs: Any) -> str | None:
        """Push one job as a member of this batch.

        Args:
            fn: The job, or `job.set(...)`.
            *args: The job's positional arguments.
            **kwargs: The job's keyword arguments.

        Returns:
            The job's jid, or None when a client middleware stopped the push.

        Raises:
            BatchClosed: The batch is complete or its records expired.
            TypeError: An argument is not JSON-native.
            PushOutcomeUnknown: As for `JobFunction.perform_async`.
        """
        with self.jobs():
            return fn.perform_async(*args, **kwargs)

    def status(self) -> Any:
        """Read the batch's state, as `cogworker.batch_status(self.bid)` does.

        Returns:
            A BatchStatus, or None when the batch's records expired.
        """
        from cogworker.api.batch_status import batch_status

        return batch_status(self.bid)


# The batch whose block is open in this context (pushes join it), and the batch of the member job
# running in this context (`current_batch()`).
_open: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("cogworker_open_batch", default=None)
_running: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("cogworker_member_of", default=None)


def current_batch() -> Batch | None:
    """Return the batch of the member job running now: `current_batch().add(...)` adds to it.

    Returns:
        The running job's batch, or None outside a member job.
    """
    return _running.get()


@contextmanager
def as_member(job: dict[str, Any], owner: str = "") -> Iterator[None]:
    """Around a member job's body (worker/running/processor.py): `current_batch()` is its batch, and a block
    on it holds it for this run (`owner`: the in-progress list the run is on)."""
    bid = str(job["bid"])
    up, queues = batch_records.strings(job.get("bup")), batch_records.strings(job.get("bq"))
    token = _running.set(Batch(bid, up, queues))
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
    """Open a batch: jobs pushed in the block are its members.

    Inside another batch's open block (its `with`, or `b.jobs()`), the new batch and its callbacks
    are members of that one. It is decided once the block has ended (even by an exception: its
    members were pushed) and every member has ended; each callback is then pushed once, given
    `(bid, *callback_args)`. Under a testing mode (no Redis) the block only runs.

    Args:
        description: Shown by `cogworker batch show`, the Web UI and `batch_status`.
        on_success: A job (or `job.set(...)`) pushed when every member succeeded.
        on_complete: A job pushed when every member has ended: succeeded, went to dead, or ended
            unrun (expired, cancelled).
        on_death: A job pushed at the first member that goes to dead.
        callback_args: Arguments given to each callback after the bid (a dict: keyword arguments).

    Yields:
        The new Batch.

    Raises:
        TypeError: `description` is not a str, or a callback is not a job.
        BatchClosed: Opened inside a batch that has completed.
        WrongTypeKey: A batch key holds another type of value.

    Example:
        ```python
        with cogworker.batch(description="import 42", on_success=publish) as b:
            for row in rows:
                import_row.perform_async(row)
        ```
    """
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
    client.settings()  # the layout (store/shards.py) known before the callbacks pick their partitions
    bid = new_jid()
    up = [parent.bid, *parent.up] if parent is not None else []
    fields: dict[str, str] = {
        "description": description,
        "parent": up[0] if up else "",
        "up": codec.dumps(up),
    }
    callbacks = {"success": on_success, "complete": on_complete, "death": on_death}
    own_queues = batch_records.add_callbacks(fields, callbacks, bid, callback_args, parent)
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
    new._hold = batch_records.held(new, hold_name, expiry)
    return new


def close(target: Batch) -> None:
    """Release the hold `create` took: completes the batch if nothing else holds it and nothing is
    pending. Closing it again changes nothing."""
    if target._hold is not None:
        batch_records.release(target._hold)


def create_batch(
    members: Iterable[tuple[Callback, Sequence[Any]]],
    description: str = "",
    **callbacks: Any,
) -> str:
    """Create a batch of the given members, with `batch()`'s callbacks. Usable anywhere, a job's body
    included.

    Args:
        members: (job, positional arguments) pairs, one per member.
        description: As for `batch()`.
        **callbacks: `on_success`, `on_complete`, `on_death` and `callback_args`, as for `batch()`.

    Returns:
        The batch's id.

    Raises:
        TypeError: A callback is not a job, or an argument is not JSON-native.
        BatchClosed: Created inside a batch that has completed.
    """
    with batch(description, **callbacks) as made:
        for fn, args in members:
            fn.perform_async(*args)
    return made.bid


def _run_open(
    target: Batch, mode: str, jids: Sequence[str] = (), args_override: list[Any] | None = None
) -> bool:
    """Run batch_open.lua on `target` (BatchClosed when it refuses anything but a new batch)."""
    args = args_override or [mode, repr(time.time()), target.bid, "", 0, "", "", *jids]
    created = batch_records.run_open(target.bid, target.up, args)
    if not created and mode != "new":
        raise BatchClosed(target.bid)
    return created


def _take(target: Batch, mode: str, name: str, value: str) -> batch_holds.Hold:
    """Hold `target` (raises BatchClosed when it is complete or gone)."""
    args: list[Any] = [mode, repr(time.time()), target.bid, "", 0, name, value]
    _run_open(target, mode, args_override=args)
    return batch_records.held(target, name, value)


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
        batch_records.leave(target.bid, jids)
        raise

    def undo(unwritten: list[dict[str, Any]]) -> None:
        # These jobs are known not to be written: they leave the batch. Those whose write may have
        # happened (a lost reply) stay.
        batch_records.leave(target.bid, [str(job["jid"]) for job in unwritten])

    return undo


middleware.add_before_write_hook(_register)
