"""Pushing a job: the `perform_*`, `set` and `s` methods a job and `job.set(...)` share.

`@job` (api/decorator.py) declares a job; this module is what a push of one does before the client
(api/client.py) takes over: options applied, arguments checked and converted, the due time worked out.

A pusher is generic over its job function's parameters (`P`) and return type (`R`), so a type
checker holds `perform_async(...)` and the others to the function's own signature.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Never, ParamSpec, Protocol, TypeVar

from cogworker.api import client, due_time, features
from cogworker.api.job_options import UNSET, Unique, given
from cogworker.api.typed_args import PlanLater, TypedArgs

if TYPE_CHECKING:
    from cogworker.api.aio_push import AsyncPusher
    from cogworker.api.chain import Signature

# The job function's parameters and return type.
P = ParamSpec("P")
R = TypeVar("R")


class PushedJob(Protocol):
    """What a push needs of its job (a JobFunction), named here so this module needn't import the
    decorator's, which imports this one."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def typed(self) -> TypedArgs | PlanLater | None: ...


class Pusher(Generic[P, R]):
    """The perform_* methods, shared by a job and by `job.set(...)`."""

    job: PushedJob
    options: dict[str, Any]

    def _push(self, args: Sequence[Any], kwargs: dict[str, Any], at: float | None) -> str | None:
        return self.send(self.build(args, kwargs, at))

    def build(self, args: Sequence[Any], kwargs: dict[str, Any], at: float | None = None) -> dict[str, Any]:
        """Build the payload a push would write, without sending it.

        The arguments are checked and converted as a push does and a jid is assigned, so the payload
        can be sent later with `send` (after a database transaction commits, for instance).

        Args:
            args: The job's positional arguments.
            kwargs: The job's keyword arguments.
            at: When the job is due, in epoch seconds; None (or a time already past): now.

        Returns:
            The payload as a dict; its `"jid"` is the job's id.

        Raises:
            TypeError: An argument is not JSON-native (or does not fit its typed parameter).
        """
        features.ensure_installed()
        queue = str(self.options.get("queue") or self.job.queue)
        typed = self.job.typed
        if typed is not None:
            args, kwargs = typed.dump(args, kwargs)
        return client.build_job(self.job.name, args, kwargs, queue=queue, options=self.options, at=at)

    def send(self, payload: dict[str, Any]) -> str | None:
        """Push a payload `build` made, through the client middleware.

        Overridden by pushers that send later (after a database transaction commits:
        cogworker/contrib/django/transaction.py). Sending the same payload again within two minutes
        (after a PushOutcomeUnknown) writes no second copy of the job.

        Args:
            payload: A payload returned by `build`.

        Returns:
            The job's jid, or None when a client middleware stopped the push (a unique job's duplicate).

        Raises:
            PushOutcomeUnknown: Redis gave no answer and whether the job was written can't be known.
            NotReplicated: The job was written, but fewer replicas than COGWORKER_REDIS_MIN_REPLICAS
                confirmed it.
            WrongTypeKey: A key the push writes holds another type of value; nothing was written.
            redis.RedisError: Redis failed and the job is known not to be written: push it again.
        """
        return client.send(payload)

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run as soon as a worker takes it.

        The arguments are checked now (JSON-native, or converted through the job's typed
        parameters), so a bad one raises here rather than in a worker.

        Args:
            *args: The job's positional arguments, as its function takes them (a type checker
                holds them to its signature).
            **kwargs: The job's keyword arguments.

        Returns:
            The job's jid, or None when a client middleware stopped the push (a unique job's duplicate).

        Raises:
            TypeError: An argument is not JSON-native (or does not fit its typed parameter).
            PushOutcomeUnknown: Redis gave no answer and whether the job was written can't be known;
                it may be queued, so pushing it again may run it twice.
            NotReplicated: The job was written, but fewer replicas than COGWORKER_REDIS_MIN_REPLICAS
                confirmed it.
            WrongTypeKey: A key the push writes holds another type of value; nothing was written.
            redis.RedisError: Redis failed and the job is known not to be written: push it again.

        Example:
            >>> jid = send_welcome.perform_async(42, locale="fr")  # doctest: +SKIP
        """
        return self._push(args, kwargs, None)

    def perform_in(self, seconds: float | dt.timedelta, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run after a delay (it waits in the schedule set until then).

        `seconds` is positional-only, so a job may have a parameter of that name.

        Args:
            seconds: The delay, in seconds or as a timedelta; 0 or less pushes it at once.
            *args: The job's positional arguments.
            **kwargs: The job's keyword arguments.

        Returns:
            The job's jid, or None when a client middleware stopped the push.

        Raises:
            TypeError: `seconds` is neither a number nor a timedelta, or an argument is not JSON-native.
            PushOutcomeUnknown: As for `perform_async`.
            NotReplicated: As for `perform_async`.
            WrongTypeKey: As for `perform_async`.

        Example:
            >>> send_reminder.perform_in(dt.timedelta(hours=1), 42)  # doctest: +SKIP
        """
        return self._push(args, kwargs, due_time.in_epoch_s(seconds))

    def perform_at(self, when: dt.datetime | float, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run at a given time (it waits in the schedule set until then).

        `when` is positional-only, so a job may have a parameter of that name.

        Args:
            when: An aware datetime (with tzinfo) or epoch seconds; a time already past pushes it at once.
            *args: The job's positional arguments.
            **kwargs: The job's keyword arguments.

        Returns:
            The job's jid, or None when a client middleware stopped the push.

        Raises:
            TypeError: `when` is a naive datetime or not a time, or an argument is not JSON-native.
            PushOutcomeUnknown: As for `perform_async`.
            NotReplicated: As for `perform_async`.
            WrongTypeKey: As for `perform_async`.
        """
        return self._push(args, kwargs, due_time.at_epoch_s(when))

    def set(
        self,
        *,
        queue: str = UNSET,
        retry: bool | int = UNSET,
        backtrace: bool | int = UNSET,
        unique: Unique | None = UNSET,
        unique_for: float = UNSET,
        status: bool = UNSET,
        expires_in: float | dt.timedelta = UNSET,
        result_ttl: float = UNSET,
        timeout_s: float = UNSET,
        **refused: Never,
    ) -> JobSetter[P, R]:
        """Return this job with some options changed for the pushes made through the result.

        The job itself is left as declared. Every option of `@job` is accepted except the ones that
        are code (`retry_on`, `discard_on`, `retry_in`, `limit`): a worker reads those from the
        `@job` declaration, as they can't travel in the job's payload. Only the options given here
        change; None is a value (`unique=None` turns uniqueness off for these pushes).

        Args:
            **refused: No other keyword is accepted. A type checker flags one; at run time it is a
                TypeError that names it (and says why, for an option only `@job` takes).

        Keyword Args:
            queue (str): The queue the job is pushed to. Default: "default".
            retry (bool | int): How many times a failing job is retried before it goes to the dead
                set: True for 25, False for none, or a number. Default: True.
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

        Returns:
            A pusher with `perform_async`, `perform_in`, `perform_at`, `s` and `set`, as the job has.

        Raises:
            TypeError: An option is unknown, only `@job` takes it, or its value is not valid.

        Example:
            >>> send_welcome.set(queue="urgent", retry=3).perform_async(42)  # doctest: +SKIP
        """
        options = given(
            queue=queue,
            retry=retry,
            backtrace=backtrace,
            unique=unique,
            unique_for=unique_for,
            status=status,
            expires_in=expires_in,
            result_ttl=result_ttl,
            timeout_s=timeout_s,
        )
        features.check_set_options({**options, **refused})
        return self._with_options({**self.options, **options})

    def _with_options(self, options: dict[str, Any]) -> JobSetter[P, R]:
        """The pusher `set` returns; one that sends differently (OnCommit) returns its own kind."""
        return JobSetter(self.job, options)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """Return this job with these arguments, not pushed: a step of `cogworker.chain(...)`.

        The arguments are checked and converted now, as a push would. They are not typed against
        the job's parameters: in a chain with `pass_results=True` the step is given the previous
        step's result as its first argument, so `.s(...)` holds only the arguments after it.

        Args:
            *args: The job's positional arguments.
            **kwargs: The job's keyword arguments.

        Returns:
            A Signature for `cogworker.chain` or `cogworker.group`.

        Raises:
            TypeError: An argument is not JSON-native (or does not fit its typed parameter).

        Example:
            >>> cogworker.chain(fetch.s(url), parse.s(), store.s())  # doctest: +SKIP
        """
        from cogworker.api.chain import signature

        typed = self.job.typed
        if typed is not None:  # converted now, as a push would (api/typed_args.py)
            converted, kwargs = typed.dump(args, kwargs)
            args = tuple(converted)
        return signature(
            self.job.name, self.job.queue, self.options, tuple(args), kwargs, typed=typed is not None
        )

    @property
    def aio(self) -> AsyncPusher[P, R]:
        """The awaitable pushes: `await job.aio.perform_async(...)`, `perform_in`, `perform_at`.

        They push as the sync methods do (middleware, unique jobs, statuses, batches, replicas),
        on the running event loop's `redis.asyncio` client, so an `async def` endpoint doesn't
        block its loop on Redis.

        Returns:
            An AsyncPusher for this job, or for this `job.set(...)`.

        Example:
            >>> jid = await send_welcome.aio.perform_async(42)  # doctest: +SKIP
        """
        from cogworker.api.aio_push import AsyncPusher

        return AsyncPusher[P, R](self)


class JobSetter(Pusher[P, R]):
    """A job with options changed for its pushes: what `job.set(...)` returns."""

    def __init__(self, job: PushedJob, options: dict[str, Any]) -> None:
        self.job = job
        self.options = options
