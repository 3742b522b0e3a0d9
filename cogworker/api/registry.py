"""The jobs this process knows, by name, and `resolve`: the job a payload names, imported safely."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cogworker.api.typed_args import PlanLater, TypedArgs


class JobNotFound(Exception):
    """A payload names a job this process doesn't have, or may not import.

    A worker raises it, before anything is imported, for a job whose module is not under
    COGWORKER_REQUIRE, can't be imported, or has no `@job` of that name; the job fails with it and
    follows its retry policy. Add the job's module to COGWORKER_REQUIRE (or fix its import error),
    then retry the job from the retry or dead set.
    """


# Its public name: the error class a dead job records, whatever module defines it.
JobNotFound.__module__ = "cogworker"

NOT_REGISTERED = "not a registered job; add its module to COGWORKER_REQUIRE"


class RegisteredJob:
    """What a name resolves to: the function a worker calls and the options it was declared with.
    `@job` makes one (cogworker.api.decorator.JobFunction)."""

    name: str
    func: Callable[..., Any]
    options: dict[str, Any]
    # An `async def` job: a worker awaits it on its event loop (api/async_jobs.py).
    is_async: bool = False
    # Parameters annotated with models, datetimes, UUIDs... (api/typed_args.py): their arguments are
    # rebuilt before the call. None for a job with none, so a plain job costs one attribute read.
    typed: TypedArgs | PlanLater | None = None


_registry: dict[str, RegisteredJob] = {}
# cogworker's own job modules, importable whatever COGWORKER_REQUIRE says: the jobs a chain's group
# pushes as its batch's callbacks (api/group_jobs.py) run on any worker.
BUILT_IN = frozenset({"cogworker.api.group_jobs"})
_async_names: set[str] = set()


def register(job: RegisteredJob) -> None:
    _registry[job.name] = job
    if job.is_async:
        _async_names.add(job.name)
    else:
        _async_names.discard(job.name)


def has_async(allowed: Iterable[str]) -> bool:
    """Some `async def` job this process may run (its module is one of `allowed`, COGWORKER_REQUIRE,
    or under one) is registered: a worker then sorts the jobs it fetches by kind."""
    return bool(_async_names) and any(
        under_modules(name.rpartition(".")[0], allowed) for name in _async_names
    )


def resolve(name: str, *, allowed: Iterable[str]) -> RegisteredJob:
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
    if not under_modules(module_name, allowed) and module_name not in BUILT_IN:
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
    if isinstance(target, RegisteredJob):
        return target
    found = _registry.get(name)
    if found is not None:
        return found
    raise JobNotFound(f"{name!r} is not a @job function (found {type(target).__name__})")


def under_modules(module_name: str, allowed: Iterable[str]) -> bool:
    """`module_name` is a dotted name, and one of `allowed` or a submodule of one."""
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        return False
    return any(module_name == root or module_name.startswith(f"{root}.") for root in allowed)


def is_registered(name: str) -> bool:
    return name in _registry


def registered(name: str) -> RegisteredJob | None:
    """The job registered under `name`, imported already (never imports: for code that only reads
    a resolved job's options, such as filing its failure)."""
    return _registry.get(name)


def app_job_names() -> list[str]:
    """The names of the jobs registered so far, sorted, cogworker's own (BUILT_IN) left out: what a
    worker logs at boot, and warns about when there are none."""
    return sorted(
        name for name, job in _registry.items() if getattr(job.func, "__module__", None) not in BUILT_IN
    )
