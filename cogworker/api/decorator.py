"""`@job`: a plain function becomes a job that can be pushed, scheduled and run by workers."""

from __future__ import annotations

import datetime as dt
import functools
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, overload

from cogworker import testing
from cogworker.api import client, features, typed_args
from cogworker.api.async_jobs import is_async
from cogworker.api.payload import DEFAULT_QUEUE
from cogworker.api.registry import RegisteredJob, register

if TYPE_CHECKING:
    from cogworker.api.chain import Signature


def _seconds_from_now(when: dt.datetime | float | int) -> float:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise TypeError("perform_at needs an aware datetime (with tzinfo) or an epoch number")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"perform_at takes a datetime or epoch seconds, not {type(when).__name__}")
    return float(when)


class _Pusher:
    """The perform_* methods, shared by a job and by `job.set(...)`."""

    job: JobFunction
    options: dict[str, Any]

    def _push(self, args: Sequence[Any], kwargs: dict[str, Any], at: float | None) -> str | None:
        return self.send(self.build(args, kwargs, at))

    def build(self, args: Sequence[Any], kwargs: dict[str, Any], at: float | None = None) -> dict[str, Any]:
        """The payload a push would write (arguments checked and converted, jid assigned), unsent."""
        features.ensure_installed()
        queue = str(self.options.get("queue") or self.job.queue)
        typed = self.job.typed
        if typed is not None:
            args, kwargs = typed.dump(args, kwargs)
        return client.build_job(self.job.name, args, kwargs, queue=queue, options=self.options, at=at)

    def send(self, payload: dict[str, Any]) -> str | None:
        """Push a payload `build` made. Overridden by pushers that send later (after a database
        transaction commits: cogworker/contrib/django/transaction.py)."""
        return client.send(payload)

    def perform_async(self, *args: Any, **kwargs: Any) -> str | None:
        return self._push(args, kwargs, None)

    def perform_in(self, seconds: float | dt.timedelta, *args: Any, **kwargs: Any) -> str | None:
        if isinstance(seconds, dt.timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"perform_in takes seconds or a timedelta, not {type(seconds).__name__}")
        return self._push(args, kwargs, time.time() + float(seconds))

    def perform_at(self, when: dt.datetime | float, *args: Any, **kwargs: Any) -> str | None:
        return self._push(args, kwargs, _seconds_from_now(when))

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This job with these arguments, not pushed: a step of `cogworker.chain(...)`."""
        from cogworker.api.chain import signature

        typed = self.job.typed
        if typed is not None:  # converted now, as a push would (api/typed_args.py)
            converted, kwargs = typed.dump(args, kwargs)
            args = tuple(converted)
        return signature(
            self.job.name, self.job.queue, self.options, tuple(args), kwargs, typed=typed is not None
        )


class JobSetter(_Pusher):
    def __init__(self, job: JobFunction, options: dict[str, Any]) -> None:
        self.job = job
        self.options = options

    def set(self, **options: Any) -> JobSetter:
        features.check_set_options(options)
        return JobSetter(self.job, {**self.options, **options})


class JobFunction(_Pusher, RegisteredJob):
    def __init__(self, func: Callable[..., Any], name: str, options: dict[str, Any]) -> None:
        self.func = func
        self.name = name
        self.job = self
        self.options = options
        self.is_async = is_async(func)
        functools.update_wrapper(self, func)
        self.typed = typed_args.plan_for(func, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name}>"

    @property
    def queue(self) -> str:
        return str(self.options.get("queue") or DEFAULT_QUEUE)

    def set(self, **options: Any) -> JobSetter:
        features.check_set_options(options)
        return JobSetter(self, {**self.options, **options})

    # Fake testing mode (cogworker.testing): what was pushed, and running it.
    @property
    def jobs(self) -> list[dict[str, Any]]:
        return testing.jobs_for(self.name)

    def clear(self) -> None:
        testing.jobs_for(self.name).clear()

    def perform_one(self) -> None:
        testing.perform_one(self.name)

    def drain(self) -> None:
        testing.drain(self.name)


@overload
def job(func: Callable[..., Any], *, name: str | None = None, **options: Any) -> JobFunction: ...


@overload
def job(
    func: None = None, *, name: str | None = None, **options: Any
) -> Callable[[Callable[..., Any]], JobFunction]: ...


def job(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    **options: Any,
) -> JobFunction | Callable[[Callable[..., Any]], JobFunction]:
    """Decorate a function as a job: `@job` or `@job(queue="mailers", retry=5)`. An `async def`
    function is a job too: a worker awaits it on its event loop (`COGWORKER_ASYNC_CONCURRENCY`)."""
    features.check_options(options)

    def wrap(f: Callable[..., Any]) -> JobFunction:
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
    fn: JobFunction | JobSetter,
    arg_lists: Iterable[Sequence[Any]],
    *,
    at: float | None = None,
    queue: str | None = None,
) -> list[str | None]:
    """Push one job per argument tuple; one round trip per batch of up to 1,000 jobs.

    Every argument is checked before anything is written, so a bad one pushes nothing. Returns
    the jids in order (None where a client middleware stopped that job). `fn` may be a job or
    `job.set(...)`, whose options then apply to every job of the batch.
    """
    if not isinstance(fn, JobFunction | JobSetter):
        raise TypeError(f"push_bulk takes a job (or job.set(...)), not {type(fn).__name__}")
    features.ensure_installed()
    options = fn.set(queue=queue).options if queue is not None else dict(fn.options)
    queue_name = str(options.get("queue") or fn.job.queue)
    typed = fn.job.typed
    if typed is not None:
        arg_lists = [typed.dump(args, {})[0] for args in arg_lists]
    return client.push_bulk(fn.job.name, arg_lists, queue=queue_name, options=options, at=at)
