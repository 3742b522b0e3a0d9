"""Pushing jobs that Ruby's Sidekiq runs: by class name, with positional arguments only.

`push_named("HardWorker", [1, 2], queue="ruby")` writes a payload naming a Ruby class, and
`ruby_job("HardWorker", queue="ruby")` is a handle to push it again and again as a job is pushed
(`perform_async`, `perform_in`, `perform_at`, `set`, `aio`). Neither imports nor registers any Python
function: the class lives in the Ruby app, and the job is for the Sidekiq processes reading `queue`.

Ruby calls `perform(*args)`: a keyword argument has nowhere to go (an ArgumentError in Ruby), so the
handle refuses one at push with a TypeError naming the class. The name must be a Ruby constant path
(`HardWorker`, `Billing::InvoiceJob`): Sidekiq looks the class up with `constantize`, which fails on a
dotted Python name. The queue has no default, because a queue belongs to one language (a Python
worker that took the job would find no such job and file it as failing with JobNotFound).

The payload is a job's as any push writes it: through the client middleware, with `class`, `jid`,
`args`, `queue`, `retry`, `created_at` (and no `kwargs` key, as Sidekiq's payloads have none). None
of cogworker's own options (unique, status, expiry, results) ride in it: Ruby would not honour them.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from typing import Any, Never

from cogworker.api import client, due_time, features, payload

__all__ = ["RubyJob", "check_ruby_name", "is_ruby_name", "push_named", "push_named_async", "ruby_job"]

# A Ruby constant path as Sidekiq's `constantize` resolves it: `::`-separated constant names, each
# an ASCII capital letter and then letters, digits or underscores.
_RUBY_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*(?:::[A-Z][A-Za-z0-9_]*)*")


def is_ruby_name(name: str) -> bool:
    """`name` is a Ruby constant path (`HardWorker`, `Foo::BarJob`)."""
    return _RUBY_NAME.fullmatch(name) is not None


def check_ruby_name(name: object) -> str:
    """The name, or TypeError saying what a Ruby class name looks like."""
    if not isinstance(name, str) or not is_ruby_name(name):
        raise TypeError(
            f"{name!r} is not a Ruby class name: give the constant Sidekiq runs, such as HardWorker "
            "or Billing::InvoiceJob (a Python job is pushed with its own perform_async)"
        )
    return name


def build_named(
    name: str,
    args: Sequence[Any],
    *,
    queue: str,
    retry: bool | int = True,
    at: float | None = None,
) -> dict[str, Any]:
    """The payload of a push for Ruby class `name`; TypeError for a bad name, queue, retry or argument."""
    check_ruby_name(name)
    if isinstance(args, str | bytes | dict) or not isinstance(args, Sequence):
        raise TypeError(f"{name}: args must be a list of positional arguments, not {type(args).__name__}")
    features.check_options({"queue": queue, "retry": retry})
    extra: dict[str, Any] = {}
    if at is not None and at > time.time():
        extra["at"] = at  # the schedule set's score; the stored entry leaves it out (payload.py)
    if client.settings().status_all:
        # COGWORKER_STATUS_ALL would write a "queued" status nothing ever moves on: Ruby keeps none.
        extra["status"] = False
    features.ensure_installed()
    return payload.build(name, list(args), {}, queue=queue, retry=retry, extra=extra)


def _due(name: str, run_in: float | dt.timedelta | None, at: dt.datetime | float | None) -> float | None:
    if run_in is not None and at is not None:
        raise TypeError(f"{name}: give run_in or at, not both")
    if run_in is not None:
        return due_time.in_epoch_s(run_in)
    return due_time.at_epoch_s(at) if at is not None else None


def push_named(
    name: str,
    args: Sequence[Any] = (),
    *,
    queue: str,
    retry: bool | int = True,
    run_in: float | dt.timedelta | None = None,
    at: dt.datetime | float | None = None,
) -> str | None:
    """Push a job for a Ruby class that has no Python job, by its name: Sidekiq runs it.

    Works with the Sidekiq mode on or off (a payload naming the class either way); Sidekiq reads it
    when the queue's key is one it reads: the mode's shared keys, or a Sidekiq 6 namespace equal to
    COGWORKER_KEY_PREFIX.

    Args:
        name: The Ruby class, as Sidekiq's `constantize` finds it: `HardWorker`, `Billing::InvoiceJob`.
        args: The positional arguments of its `perform`; JSON-native values only.
        queue: The queue Sidekiq reads it from (no default: a queue belongs to one language).
        retry: Sidekiq's retry option: True (Sidekiq's default, 25), False (discarded on failure),
            or a number of retries.
        run_in: Run it after this many seconds (or this timedelta) instead of now.
        at: Run it at this time (an aware datetime or epoch seconds) instead of now.

    Returns:
        The job's jid, or None when a client middleware stopped the push.

    Raises:
        TypeError: The name is not a Ruby constant path, an argument is not JSON-native, the queue
            or retry is not valid, or both `run_in` and `at` are given.
        PushOutcomeUnknown, NotReplicated, WrongTypeKey, redis.RedisError: As for `perform_async`.

    Example:
        >>> cogworker.push_named("HardWorker", [1, 2], queue="ruby")  # doctest: +SKIP
    """
    job = build_named(name, args, queue=queue, retry=retry, at=_due(name, run_in, at))
    return client.send(job)


async def push_named_async(
    name: str,
    args: Sequence[Any] = (),
    *,
    queue: str,
    retry: bool | int = True,
    run_in: float | dt.timedelta | None = None,
    at: dt.datetime | float | None = None,
) -> str | None:
    """`push_named`, awaitable (`cogworker.aio.push_named`): the event loop never waits on Redis.

    Args:
        name: The Ruby class, as Sidekiq's `constantize` finds it.
        args: The positional arguments of its `perform`; JSON-native values only.
        queue: The queue Sidekiq reads it from.
        retry: Sidekiq's retry option: True (25), False (discarded on failure) or a number.
        run_in: Run it after this many seconds (or this timedelta) instead of now.
        at: Run it at this time (an aware datetime or epoch seconds) instead of now.

    Returns:
        The job's jid, or None when a client middleware stopped the push.

    Raises:
        TypeError: As for `push_named`.
    """
    job = build_named(name, args, queue=queue, retry=retry, at=_due(name, run_in, at))
    from cogworker.api import aio_client  # redis.asyncio only for code that awaits a push

    return await aio_client.send(job)


class RubyJob:
    """A Ruby class pushed like a job: what `ruby_job(...)` returns.

    It is no Python job: calling it, chaining it or running it here is not possible, and nothing is
    registered for workers. `perform_*` take positional arguments only.

    Attributes:
        name: The Ruby class name.
        queue: The queue its pushes go to.
        retry: Sidekiq's retry option its pushes carry.
    """

    def __init__(self, name: str, *, queue: str, retry: bool | int = True) -> None:
        check_ruby_name(name)
        features.check_options({"queue": queue, "retry": retry})
        self.name = name
        self.queue = queue
        self.retry = retry

    def __repr__(self) -> str:
        return f"<ruby job {self.name} queue={self.queue}>"

    def build(self, args: Sequence[Any], kwargs: dict[str, Any], at: float | None = None) -> dict[str, Any]:
        """The payload a push would write, not sent (see `job.build`).

        Args:
            args: The positional arguments of the class's `perform`.
            kwargs: Must be empty: Ruby takes positional arguments only.
            at: When it is due, in epoch seconds; None: now.

        Returns:
            The payload; its `"jid"` is the job's id.

        Raises:
            TypeError: A keyword argument, or an argument that is not JSON-native.
        """
        if kwargs:
            raise TypeError(
                f"{self.name} runs in Ruby, which takes positional arguments only: "
                f"pass {', '.join(sorted(kwargs))} by position (Sidekiq calls perform(*args))"
            )
        return build_named(self.name, args, queue=self.queue, retry=self.retry, at=at)

    def perform_async(self, *args: Any, **kwargs: Never) -> str | None:
        """Push it to run as soon as a Sidekiq process takes it.

        Args:
            *args: The positional arguments of the class's `perform`.
            **kwargs: None may be given: Ruby takes positional arguments only.

        Returns:
            The job's jid, or None when a client middleware stopped the push.

        Raises:
            TypeError: A keyword argument (Ruby takes positional ones only), or an argument that
                is not JSON-native.
        """
        return client.send(self.build(args, kwargs))

    def perform_in(self, seconds: float | dt.timedelta, /, *args: Any, **kwargs: Never) -> str | None:
        """Push it to run after a delay (it waits in the schedule set until then).

        Args:
            seconds: The delay, in seconds or as a timedelta.
            *args: The positional arguments of the class's `perform`.
            **kwargs: None may be given: Ruby takes positional arguments only.

        Returns:
            The job's jid, or None when a client middleware stopped the push.

        Raises:
            TypeError: As for `perform_async`, or `seconds` is not a delay.
        """
        return client.send(self.build(args, kwargs, due_time.in_epoch_s(seconds)))

    def perform_at(self, when: dt.datetime | float, /, *args: Any, **kwargs: Never) -> str | None:
        """Push it to run at a given time (it waits in the schedule set until then).

        Args:
            when: An aware datetime or epoch seconds.
            *args: The positional arguments of the class's `perform`.
            **kwargs: None may be given: Ruby takes positional arguments only.

        Returns:
            The job's jid, or None when a client middleware stopped the push.

        Raises:
            TypeError: As for `perform_async`, or `when` is a naive datetime or not a time.
        """
        return client.send(self.build(args, kwargs, due_time.at_epoch_s(when)))

    def set(self, *, queue: str | None = None, retry: bool | int | None = None) -> RubyJob:
        """This class with another queue or retry option for the pushes made through the result.

        Args:
            queue: The queue for those pushes. Default: this handle's.
            retry: Sidekiq's retry option for those pushes. Default: this handle's.

        Returns:
            A RubyJob; this one is left as it is.

        Raises:
            TypeError: The queue or retry is not valid.
        """
        return RubyJob(
            self.name,
            queue=self.queue if queue is None else queue,
            retry=self.retry if retry is None else retry,
        )

    @property
    def aio(self) -> AsyncRubyJob:
        """The awaitable pushes: `await handle.aio.perform_async(...)`."""
        return AsyncRubyJob(self)


class AsyncRubyJob:
    """A RubyJob's pushes as coroutines: what `ruby_job(...).aio` returns."""

    def __init__(self, job: RubyJob) -> None:
        from cogworker.api import aio_client  # redis.asyncio only for code that awaits a push

        self._job = job
        self._send = aio_client.send

    async def perform_async(self, *args: Any, **kwargs: Never) -> str | None:
        """`RubyJob.perform_async`, awaitable."""
        return await self._send(self._job.build(args, kwargs))

    async def perform_in(self, seconds: float | dt.timedelta, /, *args: Any, **kwargs: Never) -> str | None:
        """`RubyJob.perform_in`, awaitable."""
        return await self._send(self._job.build(args, kwargs, due_time.in_epoch_s(seconds)))

    async def perform_at(self, when: dt.datetime | float, /, *args: Any, **kwargs: Never) -> str | None:
        """`RubyJob.perform_at`, awaitable."""
        return await self._send(self._job.build(args, kwargs, due_time.at_epoch_s(when)))


def ruby_job(name: str, *, queue: str, retry: bool | int = True) -> RubyJob:
    """Declare a Ruby class that Python code pushes like a job (Sidekiq runs it).

    Nothing is imported or registered: a Python worker never runs it. Keyword arguments to its
    pushes raise TypeError, as Ruby's `perform(*args)` takes positional ones only.

    Args:
        name: The Ruby class, as Sidekiq's `constantize` finds it: `HardWorker`, `Billing::InvoiceJob`.
        queue: The queue Sidekiq reads it from (no default: a queue belongs to one language).
        retry: Sidekiq's retry option: True (25), False (discarded on failure) or a number.

    Returns:
        A RubyJob with `perform_async`, `perform_in`, `perform_at`, `set` and `aio`.

    Raises:
        TypeError: The name is not a Ruby constant path, or the queue or retry is not valid.

    Example:
        ```python
        hard_worker = cogworker.ruby_job("HardWorker", queue="ruby")
        hard_worker.perform_async(1, 2)
        ```
    """
    return RubyJob(name, queue=queue, retry=retry)
