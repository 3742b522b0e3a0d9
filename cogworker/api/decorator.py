"""`@job`: a plain function becomes a job that can be pushed, scheduled and run by workers.

A `JobFunction[P, R]` keeps its function's parameters (`P`) and return type (`R`) for type
checkers: calling it returns `R` (a coroutine for an `async def` job), and its pushes take `P`'s
arguments. The options are keyword parameters with their types (api/job_options.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Never, overload

from cogworker import testing
from cogworker.api import client, features, typed_args
from cogworker.api.async_jobs import is_async
from cogworker.api.job_options import UNSET, ErrorClasses, LimitOption, RetryIn, Unique, given
from cogworker.api.payload import DEFAULT_QUEUE
from cogworker.api.pusher import JobSetter, P, Pusher, R
from cogworker.api.registry import RegisteredJob, register

__all__ = ["JobFunction", "JobSetter", "job", "push_bulk"]


class JobFunction(Pusher[P, R], RegisteredJob):
    """A function declared a job by `@job`: callable as before, and pushable to workers.

    Calling it runs the function here, as a plain call, and returns what the function returns.
    `perform_async`, `perform_in` and `perform_at` push it for a worker to run, and take the
    function's own arguments (a type checker holds them to its signature); `set` changes options
    for some pushes; `s` makes a chain step. In the fake testing mode (`cogworker.testing.fake`),
    `jobs`, `clear`, `perform_one` and `drain` show and run what was pushed.

    Attributes:
        name: The name workers find the job by (its module and qualified name, or `@job(name=...)`).
        func: The decorated function.
        options: The options `@job` was given.
        is_async: True for an `async def` function, which a worker awaits on its event loop.
    """

    func: Callable[P, R]

    def __init__(self, func: Callable[P, R], name: str, options: dict[str, Any]) -> None:
        self.func = func
        self.name = name
        self.job = self
        self.options = options
        self.is_async = is_async(func)
        functools.update_wrapper(self, func)
        self.typed = typed_args.plan_for(func, self)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name}>"

    @property
    def queue(self) -> str:
        """The queue the job is pushed to unless `.set(queue=...)` says otherwise."""
        return str(self.options.get("queue") or DEFAULT_QUEUE)

    # Fake testing mode (cogworker.testing): what was pushed, and running it.
    @property
    def jobs(self) -> list[dict[str, Any]]:
        """The payloads of this job pushed in the fake testing mode and not yet run, oldest first."""
        return testing.jobs_for(self.name)

    def clear(self) -> None:
        """Forget this job's pushes recorded in the fake testing mode, without running them."""
        testing.jobs_for(self.name).clear()

    def perform_one(self) -> None:
        """Run the oldest push of this job recorded in the fake testing mode, here.

        Raises:
            EmptyQueueError: No push of this job is recorded (cogworker.testing.EmptyQueueError).
        """
        testing.perform_one(self.name)

    def drain(self) -> None:
        """Run every push of this job recorded in the fake testing mode, here, including the ones
        those runs push, until none is left."""
        testing.drain(self.name)


# Both forms, `@job` and `@job(...)` (and `job(fn, ...)`), keep the function's types. The options are
# listed in each: a type checker reads a call against the overloads, never the implementation.
@overload
def job(
    func: Callable[P, R],
    *,
    name: str | None = None,
    queue: str = ...,
    retry: bool | int = ...,
    retry_on: ErrorClasses = ...,
    discard_on: ErrorClasses = ...,
    retry_in: RetryIn = ...,
    backtrace: bool | int = ...,
    unique: Unique | None = ...,
    unique_for: float = ...,
    status: bool = ...,
    expires_in: float | dt.timedelta = ...,
    result_ttl: float = ...,
    timeout_s: float = ...,
    limit: LimitOption = ...,
) -> JobFunction[P, R]: ...


@overload
def job(
    func: None = None,
    *,
    name: str | None = None,
    queue: str = ...,
    retry: bool | int = ...,
    retry_on: ErrorClasses = ...,
    discard_on: ErrorClasses = ...,
    retry_in: RetryIn = ...,
    backtrace: bool | int = ...,
    unique: Unique | None = ...,
    unique_for: float = ...,
    status: bool = ...,
    expires_in: float | dt.timedelta = ...,
    result_ttl: float = ...,
    timeout_s: float = ...,
    limit: LimitOption = ...,
) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    queue: str = UNSET,
    retry: bool | int = UNSET,
    retry_on: ErrorClasses = UNSET,
    discard_on: ErrorClasses = UNSET,
    retry_in: RetryIn = UNSET,
    backtrace: bool | int = UNSET,
    unique: Unique | None = UNSET,
    unique_for: float = UNSET,
    status: bool = UNSET,
    expires_in: float | dt.timedelta = UNSET,
    result_ttl: float = UNSET,
    timeout_s: float = UNSET,
    limit: LimitOption = UNSET,
    **refused: Never,
) -> JobFunction[P, R] | Callable[[Callable[P, R]], JobFunction[P, R]]:
    """Declare a function a job that workers run: `@job` or `@job(queue="mailers", retry=5)`.

    The function stays callable as before; the JobFunction it becomes can also be pushed
    (`perform_async`, `perform_in`, `perform_at`). Workers find it by name, so it must be importable:
    defined at module level, in a module the workers import (COGWORKER_REQUIRE). An `async def`
    function is a job too: a worker awaits it on its event loop (COGWORKER_ASYNC_CONCURRENCY).
    Parameters annotated with pydantic models, datetimes, UUIDs or decimals are converted to JSON at
    push and rebuilt before the call.

    Args:
        func: The function, when used as `@job` without parentheses.
        name: The name workers find the job by. Default: the function's module and qualified name.
        **refused: No other keyword is accepted. A type checker flags one; at run time it is a
            TypeError that names it.

    Keyword Args:
        queue (str): The queue the job is pushed to. Default: "default".
        retry (bool | int): How many times a failing job is retried before it goes to the dead
            set: True for 25, False for none, or a number. Default: True.
        retry_on (type[BaseException] | tuple[type[BaseException], ...]): Only these errors are
            retried; any other sends the job to dead at once. `@job` only. Default: unset (all are).
        discard_on (type[BaseException] | tuple[type[BaseException], ...]): These errors send the
            job to dead at once; wins over `retry_on`. `@job` only. Default: unset.
        retry_in (Callable[[int, BaseException], float | None]): `fn(count, exc)` returns the delay
            in seconds before retry `count + 1` (None: the default backoff). `@job` only.
            Default: unset (Sidekiq's backoff, count**4 + 15 s plus jitter).
        backtrace (bool | int): Sidekiq's option (true, or how many lines to keep), kept in the
            payload for Sidekiq; cogworker stores a failure's capped chain either way.
            Default: unset.
        unique (str | None): "until_executed": a push of the same job, arguments and queue returns
            None while an earlier copy is pending. Default: None (not unique).
        unique_for (float): How long a unique claim lasts at most, in seconds from when the job is
            due. Default: COGWORKER_UNIQUE_TTL_S (an hour).
        status (bool): True records the job's status (`cogworker.status(jid)`), False opts it out
            of COGWORKER_STATUS_ALL. Default: unset (COGWORKER_STATUS_ALL decides).
        expires_in (float | timedelta): A job not started within this many seconds of its push (or
            of its scheduled time) is not run. Default: unset (never expires).
        result_ttl (float): How long the return value is kept for `cogworker.result(jid)`, in
            seconds; 0 keeps none. Default: COGWORKER_RESULT_TTL_S (none kept).
        timeout_s (float): The time limit of one run, in seconds; past it the run fails with
            JobTimeout. Default: COGWORKER_JOB_TIMEOUT_S (no limit).
        limit (Limiter | Callable[..., Limiter]): A limiter the run must pass (`cogworker.limiter`),
            or a function of the job's arguments returning one; a full limiter puts the job back in
            the schedule set. `@job` only. Default: unset.

    Returns:
        The JobFunction, or (called with options only) a decorator that makes one.

    Raises:
        TypeError: An option is unknown or its value is not valid, or the function can't be
            imported by name (defined inside a function, or in a script run as `__main__`) and no
            `name=` is given.

    Example:
        ```python
        @cogworker.job(queue="mailers", retry=5, unique="until_executed")
        def send_welcome(user_id: int) -> None: ...

        send_welcome.perform_async(42)
        ```
    """
    options = given(
        queue=queue,
        retry=retry,
        retry_on=retry_on,
        discard_on=discard_on,
        retry_in=retry_in,
        backtrace=backtrace,
        unique=unique,
        unique_for=unique_for,
        status=status,
        expires_in=expires_in,
        result_ttl=result_ttl,
        timeout_s=timeout_s,
        limit=limit,
    )
    features.check_options({**options, **refused})

    def wrap(f: Callable[P, R]) -> JobFunction[P, R]:
        job_name = name or f"{_importable_module(f)}.{f.__qualname__}"
        if "<locals>" in job_name and name is None:
            raise TypeError(
                f"{job_name}: a job must be importable by name; define it at module level or pass name="
            )
        fn = JobFunction(f, job_name, options)
        register(fn)
        return fn

    return wrap(func) if func is not None else wrap


def _importable_module(f: Callable[..., Any]) -> str:
    """The name workers import `f`'s module by. Run as `python -m pkg.mod`, a module is `__main__`
    here but `pkg.mod` to everyone else; run as a script, it has no importable name at all."""
    module = f.__module__
    if module != "__main__":
        return module
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)
    raise TypeError(
        f"{f.__qualname__} is defined in a script run as __main__, which workers can't import: "
        "move it to a module (and list that in COGWORKER_REQUIRE) or pass name="
    )


def push_bulk(
    fn: JobFunction[..., Any] | JobSetter[..., Any],
    arg_lists: Iterable[Sequence[Any]],
    *,
    at: float | None = None,
    queue: str | None = None,
) -> list[str | None]:
    """Push one job per argument tuple; one round trip per batch of up to 1,000 jobs.

    Every argument is checked before anything is written, so a bad one pushes nothing. The
    argument tuples are not typed against the job's parameters (a type checker can't hold a
    sequence of tuples to a signature); each is checked at run time as a push's are.

    Args:
        fn: A job, or `job.set(...)`, whose options then apply to every job pushed.
        arg_lists: One sequence of positional arguments per job.
        at: When the jobs are due, in epoch seconds. Default: now.
        queue: The queue for every job. Default: the job's (or `set`'s) queue.

    Returns:
        The jids in order, None where a client middleware stopped that job.

    Raises:
        TypeError: `fn` is not a job, or an argument is not JSON-native; nothing was pushed.
        PushOutcomeUnknown: A batch got no answer and whether it was written can't be known; earlier
            batches are written, later ones are not.
        NotReplicated: Too few replicas confirmed a batch (COGWORKER_REDIS_MIN_REPLICAS); it and
            every earlier batch are written, later ones are not.
        WrongTypeKey: A key the push writes holds another type of value.

    Example:
        >>> cogworker.push_bulk(send_welcome, [(1,), (2,), (3,)])  # doctest: +SKIP
    """
    bulk = BulkPush.of(fn, arg_lists, queue)
    return client.push_bulk(bulk.name, bulk.arg_lists, queue=bulk.queue, options=bulk.options, at=at)


@dataclass(frozen=True)
class BulkPush:
    """What a bulk push of one job sends, checked and converted before anything is written (the sync
    `push_bulk` above and the awaitable one, cogworker/aio.py, share it)."""

    name: str
    arg_lists: list[Sequence[Any]]
    queue: str
    options: dict[str, Any]

    @classmethod
    def of(
        cls,
        fn: JobFunction[..., Any] | JobSetter[..., Any],
        arg_lists: Iterable[Sequence[Any]],
        queue: str | None,
    ) -> BulkPush:
        if not isinstance(fn, JobFunction | JobSetter):
            raise TypeError(f"push_bulk takes a job (or job.set(...)), not {type(fn).__name__}")
        features.ensure_installed()
        options = fn.set(queue=queue).options if queue is not None else dict(fn.options)
        typed = fn.job.typed
        # A one-shot iterable is read once, here: every tuple is converted before the first is sent.
        listed: list[Sequence[Any]] = [tuple(args) for args in arg_lists]
        if typed is not None:
            listed = [typed.dump(args, {})[0] for args in listed]
        return cls(fn.job.name, listed, str(options.get("queue") or fn.job.queue), options)
