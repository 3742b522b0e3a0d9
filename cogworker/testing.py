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
    """perform_one was asked to run a job, but none is recorded for it."""


def set_mode(new: Mode | None) -> None:
    global mode
    if new not in (None, "fake", "inline"):
        raise ValueError(f"testing mode must be 'fake', 'inline' or None, not {new!r}")
    mode = new
    # The mode's step replaces the write to Redis at the end of every push.
    client.install_push_step(record if new is not None else None)


@contextlib.contextmanager
def fake() -> Iterator[None]:
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
    previous = mode
    set_mode("inline")
    try:
        yield
    finally:
        set_mode(previous)
        results.forget_all()


def record(job: dict[str, Any]) -> str:
    """The push step of the client chain in a testing mode."""
    # A round trip through JSON, as Redis would give it to a worker.
    job = codec.loads(codec.dumps(job))
    if mode == "inline":
        perform(job)
    else:
        _recorded.setdefault(job["class"], []).append(job)
    return str(job["jid"])


def jobs_for(name: str) -> list[dict[str, Any]]:
    return _recorded.setdefault(name, [])


def all_jobs() -> dict[str, list[dict[str, Any]]]:
    return {name: list(jobs) for name, jobs in _recorded.items() if jobs}


def clear_all() -> None:
    _recorded.clear()


def take_recorded(jid: str) -> dict[str, Any] | None:
    """Remove the recorded job with this jid (`cogworker.cancel` in fake mode); None if none is."""
    for jobs in _recorded.values():
        for index, job in enumerate(jobs):
            if job.get("jid") == jid:
                return jobs.pop(index)
    return None


def perform(job: dict[str, Any]) -> None:
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
    jobs = jobs_for(name)
    if not jobs:
        raise EmptyQueueError(f"no {name} jobs recorded")
    perform(jobs.pop(0))


def drain(name: str) -> None:
    while jobs_for(name):
        perform_one(name)


def drain_all() -> None:
    while True:
        pending = next((name for name, jobs in _recorded.items() if jobs), None)
        if pending is None:
            return
        drain(pending)
