"""`job.aio`: the awaitable twins of `perform_async`, `perform_in`, `perform_at` and `set`.

    jid = await send_welcome.aio.perform_async(42)
    await send_welcome.set(queue="urgent").aio.perform_in(60, 42)

The payload is built exactly as the sync push builds it (api/pusher.py: options, typed arguments
converted, the jid, the due time), then sent by api/aio_client.py on the running loop's
`redis.asyncio` client: the same middleware, unique claims, statuses, batches, replication WAIT and
lost-reply handling, without blocking the event loop.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from cogworker.api import aio_client, due_time

P = ParamSpec("P")
R = TypeVar("R")


class SyncPusher(Protocol):
    """What an AsyncPusher needs of the job or `job.set(...)` it pushes (api/pusher.py's Pusher,
    which imports this module for its `aio` property)."""

    def build(self, args: Any, kwargs: dict[str, Any], at: float | None = None) -> dict[str, Any]: ...


class AsyncPusher(Generic[P, R]):
    """A job's pushes as coroutines: what `job.aio` and `job.set(...).aio` return.

    Each method takes what its sync twin takes and raises what it raises; only the waiting for
    Redis is done by the event loop instead of the calling thread.
    """

    def __init__(self, pusher: SyncPusher) -> None:
        self._pusher = pusher

    async def send(self, payload: dict[str, Any]) -> str | None:
        """Push a payload `job.build(...)` made, through the client middleware.

        Sending the same payload again within two minutes (after a PushOutcomeUnknown) writes no
        second copy of the job.

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
        return await aio_client.send(payload)

    async def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run as soon as a worker takes it, without blocking the event loop.

        Args:
            *args: The job's positional arguments.
            **kwargs: The job's keyword arguments.

        Returns:
            The job's jid, or None when a client middleware stopped the push (a unique job's duplicate).

        Raises:
            TypeError: An argument is not JSON-native (or does not fit its typed parameter).
            PushOutcomeUnknown: Redis gave no answer and whether the job was written can't be known;
                it may be queued: send the same payload again (`build`, then `send`) to be safe.
            NotReplicated: Written, but too few replicas confirmed it (COGWORKER_REDIS_MIN_REPLICAS).
            WrongTypeKey: A key the push writes holds another type of value; nothing was written.
            redis.RedisError: Redis failed and the job is known not to be written: push it again.

        Example:
            >>> jid = await send_welcome.aio.perform_async(42, locale="fr")  # doctest: +SKIP
        """
        return await self.send(self._pusher.build(args, kwargs, None))

    async def perform_in(
        self, seconds: float | dt.timedelta, /, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """Push the job to run after a delay, without blocking the event loop.

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
        """
        return await self.send(self._pusher.build(args, kwargs, due_time.in_epoch_s(seconds)))

    async def perform_at(self, when: dt.datetime | float, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run at a given time, without blocking the event loop.

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
        return await self.send(self._pusher.build(args, kwargs, due_time.at_epoch_s(when)))

    def set(self, **options: Any) -> AsyncPusher[P, R]:
        """`job.set(...)`, awaitable: `job.aio.set(queue="urgent")` is `job.set(queue="urgent").aio`.

        Args:
            **options: The options `job.set` takes.

        Returns:
            An AsyncPusher pushing with those options.

        Raises:
            TypeError: An option is unknown, only `@job` takes it, or its value is not valid.
        """
        # `set` is the sync pusher's own, whatever its signature (its options are declared there).
        pusher: Any = self._pusher
        return AsyncPusher(pusher.set(**options))

    def build(self, args: Any, kwargs: dict[str, Any], at: float | None = None) -> dict[str, Any]:
        """The payload a push would write, not sent (see `job.build`); send it with `await send(...)`.

        Args:
            args: The job's positional arguments.
            kwargs: The job's keyword arguments.
            at: When the job is due, in epoch seconds; None: now.

        Returns:
            The payload; its `"jid"` is the job's id.
        """
        return self._pusher.build(args, kwargs, at)
