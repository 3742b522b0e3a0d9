"""In-memory testing modes for users' own tests (no Redis needed).

- fake: every push is recorded per job instead of sent; `my_job.jobs` shows them, `perform_one`,
  `drain` and `drain_all` run them (and whatever they push in turn), `clear` forgets them.
- inline: a push runs the job right away, in the calling thread, through the real server middleware
  chain; its exception propagates to the caller.

An `async def` job is run to completion either way (`asyncio.run`), inside the middleware chain. From
inside a running event loop (an async test), the caller's thread can't wait for its own loop, so the
job runs on a helper thread with a loop of its own while the caller waits
(api/async_jobs.py, `run_to_completion`). A sync job that returns an awaitable fails with TypeError.

A job that keeps its result (`result_ttl`, api/results.py) has it kept in memory, and
`cogworker.result(jid)` answers from there while a mode is on: its value, or JobFailed for a job that
raised (every failure is final here, nothing is retried). Leaving the mode forgets them.

    with cogworker.testing.fake():
        send_email.perform_async(1, "hi")
        assert len(send_email.jobs) == 1
        send_email.drain()
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any, Literal

from cogworker import codec
from cogworker.api import client, current_job, features, results
from cogworker.api.async_jobs import check_result, run_to_completion
from cogworker.api.middleware import run_server_chain
from cogworker.api.payload import error_fields
from cogworker.api.registry import RegisteredJob, resolve

Mode = Literal["fake", "inline"]

mode: Mode | None = None
_recorded: dict[str, list[dict[str, Any]]] = {}


class EmptyQueueError(Exception):
    """`perform_one` was asked to run a job, but no push of it is recorded (fake mode).

    In a test this usually means the code under test didn't push the job: check `job.jobs` first.
    """


def set_mode(new: Mode | None) -> None:
    """Turn a testing mode on for this process, or off. Prefer `fake()` and `inline()`, which
    restore the previous mode and forget what was recorded.

    Args:
        new: "fake", "inline", or None to push to Redis again.

    Raises:
        ValueError: `new` is not a mode.
    """
    global mode
    if new not in (None, "fake", "inline"):
        raise ValueError(f"testing mode must be 'fake', 'inline' or None, not {new!r}")
    mode = new
    # The mode's step replaces the write to Redis at the end of every push.
    client.install_push_step(record if new is not None else None)


@contextlib.contextmanager
def fake() -> Iterator[None]:
    """Record pushes instead of sending them, for the block.

    `job.jobs` shows a job's recorded pushes; `job.perform_one()`, `job.drain()` and `drain_all()`
    run them here. On leaving, the recorded pushes and results are forgotten and the previous mode
    is back.

    Yields:
        Nothing.

    Example:
        ```python
        with cogworker.testing.fake():
            send_email.perform_async(1, "hi")
            assert len(send_email.jobs) == 1
            send_email.drain()
        ```
    """
    previous = mode
    set_mode("fake")
    try:
        yield
    finally:
        set_mode(previous)
        clear_all()
        results.forget_all()


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Run each job as it is pushed, in the calling thread, for the block.

    The job runs through the server middleware chain; its exception propagates to the push's
    caller. On leaving, kept results are forgotten and the previous mode is back.

    Yields:
        Nothing.

    Example:
        ```python
        with cogworker.testing.inline():
            send_email.perform_async(1, "hi")  # has run when this returns
        ```
    """
    previous = mode
    set_mode("inline")
    try:
        yield
    finally:
        set_mode(previous)
        results.forget_all()


def record(job: dict[str, Any]) -> str:
    """Record (fake mode) or run (inline mode) one push: the testing modes' last step of a push.

    Args:
        job: The payload, after the client middleware.

    Returns:
        The job's jid.
    """
    # A round trip through JSON, as Redis would give it to a worker.
    job = codec.loads(codec.dumps(job))
    if mode == "inline":
        perform(job)
    else:
        _recorded.setdefault(job["class"], []).append(job)
    return str(job["jid"])


def jobs_for(name: str) -> list[dict[str, Any]]:
    """Return the recorded pushes of one job, oldest first: what `job.jobs` shows.

    Args:
        name: The job's registered name.

    Returns:
        The list itself (changing it changes what is recorded).
    """
    return _recorded.setdefault(name, [])


def all_jobs() -> dict[str, list[dict[str, Any]]]:
    """Return every recorded push, by job name.

    Returns:
        Job name -> its recorded pushes (copies of the lists), oldest first; no empty ones.
    """
    return {name: list(jobs) for name, jobs in _recorded.items() if jobs}


def clear_all() -> None:
    """Forget every recorded push, without running it."""
    _recorded.clear()


def take_recorded(jid: str) -> dict[str, Any] | None:
    """Remove the recorded push with this jid: what `cogworker.cancel` does in fake mode.

    Args:
        jid: The job's id.

    Returns:
        The removed payload, or None if none has this jid.
    """
    for jobs in _recorded.values():
        for index, job in enumerate(jobs):
            if job.get("jid") == jid:
                return jobs.pop(index)
    return None


def perform(job: dict[str, Any]) -> None:
    """Run one payload here, through the server middleware chain, as a worker would.

    A job that keeps its result has it kept in memory for `cogworker.result`.

    Args:
        job: The payload, as recorded.

    Raises:
        JobNotFound: The payload names a job this process hasn't registered.
        InvalidArguments: An argument no longer fits its typed parameter.
        Exception: Whatever the job raised.
    """
    # Only jobs this process registered: it pushed them, so their modules are imported already.
    fn = resolve(job["class"], allowed=())
    args, kwargs = copy.deepcopy(job.get("args", [])), copy.deepcopy(job.get("kwargs", {}))
    if fn.typed is not None:
        args, kwargs = fn.typed.load(args, kwargs)
    features.ensure_installed()
    # `cogworker.current_job()` works in a job run here as in a worker (never cancelled, though).
    current, token = current_job.begin(str(job.get("jid") or ""), str(job.get("queue")), job["class"])
    kept: list[str] | None = [] if results.ttl_s(job) is not None else None
    try:
        run_server_chain(job, lambda: _call(fn, args, kwargs, kept))
    except BaseException as exc:
        if kept is not None:
            results.remember(str(job["jid"]), results.failure_record(error_fields(exc)))
        raise
    finally:
        current_job.end(current, token)
    if kept:
        results.remember(str(job["jid"]), kept[0])


def _call(fn: RegisteredJob, args: list[Any], kwargs: dict[str, Any], kept: list[str] | None) -> None:
    if fn.is_async:
        value = run_to_completion(fn.func(*args, **kwargs))
    else:
        value = fn.func(*args, **kwargs)
        check_result(fn.name, value)
    if kept is not None:
        kept.append(results.success_record(fn.name, value))


def perform_one(name: str) -> None:
    """Run the oldest recorded push of one job: what `job.perform_one()` does.

    Args:
        name: The job's registered name.

    Raises:
        EmptyQueueError: No push of this job is recorded.
        Exception: Whatever the job raised.
    """
    jobs = jobs_for(name)
    if not jobs:
        raise EmptyQueueError(f"no {name} jobs recorded")
    perform(jobs.pop(0))


def drain(name: str) -> None:
    """Run every recorded push of one job, including those its runs push: what `job.drain()` does.

    Args:
        name: The job's registered name.

    Raises:
        Exception: Whatever a job raised; the pushes after it stay recorded.
    """
    while jobs_for(name):
        perform_one(name)


def drain_all() -> None:
    """Run every recorded push of every job, including those the runs push, until none is left.

    Raises:
        Exception: Whatever a job raised; the pushes after it stay recorded.
    """
    while True:
        pending = next((name for name, jobs in _recorded.items() if jobs), None)
        if pending is None:
            return
        drain(pending)
