"""`on_death` hooks: code a worker runs, once, for every job that goes to the dead set.

A job goes to dead by many paths, and most are not in a process that runs user code: a failing job's
own worker, another process's orphan recovery (a poison pill), the poller (an unreadable set entry),
the supervisor, or an operator's `cogworker retries kill` / the Web UI. So no path calls a hook
itself. Every script that writes a job to dead also pushes a *death notice* (the dead entry with its
cause) onto `cogworker:deaths` in the same atomic step, capped at COGWORKER_DEATH_NOTICES_MAX so the
list stays bounded when no worker has hooks. Workers with hooks pop the notices
(worker/running/death_hooks.py) and call each hook here: a pop takes a notice from Redis for one
process only, so however many workers run, each death is handled once.

A hook gets `(job, death)`: the job as the dead set holds it (a dict, its own copy per hook) and a
`Death` saying why. A hook that raises is logged, with its name and the job's jid; the job stays in
dead and the other hooks still run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from cogworker import codec
from cogworker.api import backtrace

log = structlog.get_logger("cogworker.death")

# Why a job went to dead, as `Death.cause` says it.
FAILED = "failed"  # it raised and is not retried again: out of retries, retry=False, discard_on, retry_on
POISON_PILL = "poison_pill"  # its process died running it more than COGWORKER_MAX_ORPHANINGS times
UNREADABLE = "unreadable"  # the payload isn't a job (not JSON, no class or no queue)
KILLED = "killed"  # an operator moved it from retry or scheduled (cogworker retries kill, the Web UI)
CAUSES = (FAILED, POISON_PILL, UNREADABLE, KILLED)

UNREADABLE_CLASS = "cogworker.UnreadablePayload"


@dataclass(frozen=True, slots=True)
class Death:
    """Why a job went to dead: what an `on_death` hook gets with the job.

    Attributes:
        cause: "failed" (it raised and won't be retried), "poison_pill" (its process died running it
            too often), "unreadable" (its payload isn't a job) or "killed" (an operator moved it).
        error_class: The class of the error its dead entry records.
        error_message: The error's message.
        backtrace: The error's last traceback lines.
    """

    cause: str
    error_class: str
    error_message: str
    backtrace: tuple[str, ...] = ()


DeathHook = Callable[[dict[str, Any], Death], object]
HookT = TypeVar("HookT", bound=DeathHook)

_hooks: list[DeathHook] = []
_lock = threading.Lock()


def _renew_lock() -> None:
    # A preloading fork server forks workers while app threads run: one may hold this lock then
    # (docs/architecture.md, "Locks across a fork").
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock)


def on_death(fn: HookT) -> HookT:
    """Register a hook a worker calls, once, whenever a job goes to dead by any path.

    Workers run the hooks of the modules they import (COGWORKER_REQUIRE). A hook that raises is
    logged; the job stays in dead and the other hooks still run. Registering the same function
    again changes nothing.

    Args:
        fn: `fn(job, death)`: the job as the dead set holds it (a dict, its own copy) and a Death.

    Returns:
        `fn`, so it works as a decorator.

    Raises:
        TypeError: `fn` is not callable.

    Example:
        ```python
        @cogworker.on_death
        def alert(job: dict, death: cogworker.Death) -> None:
            pager.send(f"{job['class']} died: {death.error_message}")
        ```
    """
    if not callable(fn):
        raise TypeError(f"on_death takes a function fn(job, death), not {type(fn).__name__}")
    with _lock:
        if fn not in _hooks:
            _hooks.append(fn)
    return fn


def hooks() -> list[DeathHook]:
    with _lock:
        return list(_hooks)


def clear() -> None:
    """Forget every hook (tests)."""
    with _lock:
        _hooks.clear()


def cause_of(payload: dict[str, Any]) -> str:
    """The cause of a failed job's filing in dead: its own failure, unless it was never a job."""
    return UNREADABLE if payload.get("class") == UNREADABLE_CLASS else FAILED


def notice(cause: str, entry_text: str) -> str:
    """A death notice around the dead entry's JSON text as stored (already encoded: encoding it
    again could only fail where the filing's own encoding was made safe)."""
    return f'{{"cause":{codec.dumps(cause)},"job":{entry_text}}}'


def call_hooks(text: str, hooks_now: list[DeathHook] | None = None) -> int:
    """Call every hook for one notice; returns how many raised. Never raises itself."""
    found = codec.loads_dict(text)
    job = found.get("job") if found is not None else None
    if found is None or not isinstance(job, dict):
        log.error("death_notice_unreadable", notice=codec.escape(text[:200]))
        return 0
    death = Death(
        cause=str(found.get("cause") or FAILED),
        error_class=str(job.get("error_class") or ""),
        error_message=str(job.get("error_message") or ""),
        backtrace=tuple(backtrace.lines_of(job) or ()),
    )
    jid = str(job.get("jid") or "")
    failures = 0
    structlog.contextvars.bind_contextvars(jid=jid, job=job.get("class"))
    try:
        for hook in hooks() if hooks_now is None else hooks_now:
            # Each hook its own copy: one that changes the dict must not change what the next sees.
            own = codec.loads_dict(codec.dumps(job)) or {}
            try:
                hook(own, death)
            except BaseException as exc:
                # BaseException too: a hook's SystemExit must not end the thread that calls the rest.
                failures += 1
                log.error(
                    "death_hook_failed",
                    hook=hook_name(hook),
                    jid=jid,
                    cause=death.cause,
                    error=f"{type(exc).__name__}: {codec.escape(str(exc))[:500]}",
                    exc_info=exc,
                )
    finally:
        structlog.contextvars.unbind_contextvars("jid", "job")
    return failures


def hook_name(hook: Callable[..., object]) -> str:
    module = getattr(hook, "__module__", None) or "?"
    return f"{module}.{getattr(hook, '__qualname__', None) or repr(hook)}"
