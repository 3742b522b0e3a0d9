"""`@job`: a plain function becomes a job that can be pushed, scheduled and run by workers."""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, overload

from cogworker.names import QUEUE_NAME_RULE, is_queue_name

DEFAULT_QUEUE = "default"
DEFAULT_RETRIES = 25

_registry: dict[str, JobFunction] = {}

_OPTION_NAMES = frozenset({"queue", "retry", "unique", "unique_for", "status", "backtrace"})


class JobNotFound(Exception):
    """A payload names a job this process doesn't have, or may not import."""


def _seconds_from_now(when: dt.datetime | float | int) -> float:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise TypeError("perform_at needs an aware datetime (with tzinfo) or an epoch number")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"perform_at takes a datetime or epoch seconds, not {type(when).__name__}")
    return float(when)


def _check_options(options: dict[str, Any]) -> None:
    unknown = set(options) - _OPTION_NAMES
    if unknown:
        raise TypeError(f"unknown job option(s): {', '.join(sorted(unknown))}")
    queue = options.get("queue")
    if queue is not None and not is_queue_name(queue):
        # The rule COGWORKER_QUEUES is parsed by: a job pushed here must be readable by some worker.
        raise TypeError(f"queue must be {QUEUE_NAME_RULE}, not {queue!r}")
    retry = options.get("retry")
    if retry is not None and not isinstance(retry, bool) and (not isinstance(retry, int) or retry < 0):
        raise TypeError(f"retry must be True, False or a number of retries >= 0, not {retry!r}")
    unique = options.get("unique")
    if unique not in (None, "until_executed"):
        raise TypeError(f"unique must be 'until_executed' or None, not {unique!r}")
    unique_for = options.get("unique_for")
    if unique_for is not None and (
        isinstance(unique_for, bool) or not isinstance(unique_for, int | float) or unique_for <= 0
    ):
        raise TypeError(f"unique_for must be a number of seconds above 0, not {unique_for!r}")


class _Pusher:
    """The perform_* methods, shared by a job and by `job.set(...)`."""

    job: JobFunction
    options: dict[str, Any]

    def _push(self, args: Sequence[Any], kwargs: dict[str, Any], at: float | None) -> str | None:
        from cogworker.api import client

        return client.push(self.job, args, kwargs, at=at, options=self.options)

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


class JobSetter(_Pusher):
    def __init__(self, job: JobFunction, options: dict[str, Any]) -> None:
        self.job = job
        self.options = options

    def set(self, **options: Any) -> JobSetter:
        _check_options(options)
        return JobSetter(self.job, {**self.options, **options})


class JobFunction(_Pusher):
    def __init__(self, func: Callable[..., Any], name: str, options: dict[str, Any]) -> None:
        self.func = func
        self.name = name
        self.job = self
        self.options = options
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name}>"

    @property
    def queue(self) -> str:
        return str(self.options.get("queue") or DEFAULT_QUEUE)

    def set(self, **options: Any) -> JobSetter:
        _check_options(options)
        return JobSetter(self, {**self.options, **options})

    # Fake testing mode (cogworker.testing): what was pushed, and running it.
    @property
    def jobs(self) -> list[dict[str, Any]]:
        from cogworker import testing

        return testing.jobs_for(self.name)

    def clear(self) -> None:
        from cogworker import testing

        testing.jobs_for(self.name).clear()

    def perform_one(self) -> None:
        from cogworker import testing

        testing.perform_one(self.name)

    def drain(self) -> None:
        from cogworker import testing

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
    """Decorate a function as a job: `@job` or `@job(queue="mailers", retry=5)`."""
    _check_options(options)

    def wrap(f: Callable[..., Any]) -> JobFunction:
        job_name = name or f"{_importable_module(f)}.{f.__qualname__}"
        if "<locals>" in job_name and name is None:
            raise TypeError(
                f"{job_name}: a job must be importable by name; define it at module level or pass name="
            )
        fn = JobFunction(f, job_name, options)
        _registry[job_name] = fn
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


def resolve(name: str, *, allowed: Iterable[str]) -> JobFunction:
    """The job registered under `name`, importing its module first if that module is one of
    `allowed` (COGWORKER_REQUIRE) or a submodule of one.

    A payload is data anyone who can write to Redis controls. Importing whatever module it names
    would run that module's top-level code in the worker (`this.x` printed the Zen of Python), so any
    other name is JobNotFound, raised before anything is imported.
    """
    found = _registry.get(name)
    if found is not None:
        return found
    module_name, _, attr = name.rpartition(".")
    if not under_modules(module_name, allowed):
        raise JobNotFound(f"{name!r} is {NOT_REGISTERED}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise JobNotFound(
            f"can't import {module_name!r} for job {name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    # Looked up in each object's own namespace, not with getattr: a name from a payload must not
    # reach a module's __getattr__ (lazy loaders import on attribute access) or run a property.
    target: Any = module
    for part in attr.split("."):
        try:
            target = vars(target).get(part)
        except TypeError:  # no namespace to look into
            target = None
    if isinstance(target, JobFunction):
        return target
    found = _registry.get(name)
    if found is not None:
        return found
    raise JobNotFound(f"{name!r} is not a @job function (found {type(target).__name__})")


NOT_REGISTERED = "not a registered job; add its module to COGWORKER_REQUIRE"


def under_modules(module_name: str, allowed: Iterable[str]) -> bool:
    """`module_name` is a dotted name, and one of `allowed` or a submodule of one."""
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        return False
    return any(module_name == root or module_name.startswith(f"{root}.") for root in allowed)


def is_registered(name: str) -> bool:
    return name in _registry


def registered() -> Iterable[JobFunction]:
    return list(_registry.values())
