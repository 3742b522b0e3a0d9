"""Pushes that wait for the database transaction to commit (Celery's `delay_on_commit`, Sidekiq's
`transactional_push!`): a job that reads a row the request is writing must not run before the row
is committed, and must not run at all when the transaction rolls back.

The payload is built at once (arguments checked and converted, jid assigned and returned); it is sent
(client middleware, then Redis) from Django's `transaction.on_commit`, so nothing is pushed on rollback.
Outside an atomic block Django runs the callback at once: the push happens as usual. The middleware
(unique claims, statuses) runs at the commit, so a unique job's duplicate is found then, and the jid
returned earlier is then never run. A push that fails at the commit (Redis unreachable) is logged as
`push_on_commit_failed` with the whole payload, then raised to the code that committed: the rows are
committed by then, so the log line is what lets someone push the job again.
"""

from __future__ import annotations

from typing import Any

import structlog
from django.db import DEFAULT_DB_ALIAS, transaction

from cogworker import codec
from cogworker.api import client
from cogworker.api.decorator import JobFunction, JobSetter
from cogworker.api.pusher import P, R

_log = structlog.get_logger("cogworker.django")


def _send_logged(payload: dict[str, Any]) -> None:
    try:
        client.send_now(payload)
    except Exception as exc:
        _log.error(
            "push_on_commit_failed",
            jid=payload.get("jid"),
            job=payload.get("class"),
            error=f"{type(exc).__name__}: {exc}",
            payload=codec.dumps_lenient(payload)[0],
        )
        raise


def defer(payload: dict[str, Any], using: str | None = None) -> str:
    """Send `payload` when the transaction open on `using` (the default database) commits; now when
    none is open. Returns its jid."""
    transaction.on_commit(lambda: _send_logged(payload), using=using)
    return str(payload["jid"])


class OnCommit(JobSetter[P, R]):
    """`on_commit(job)`: perform_async, perform_in and perform_at push when the transaction commits;
    `set(...)` returns another OnCommit on the same database."""

    def __init__(self, fn: JobFunction[P, R] | JobSetter[P, R], using: str | None = None) -> None:
        super().__init__(fn.job, dict(fn.options))
        self.using = using

    def _with_options(self, options: dict[str, Any]) -> OnCommit[P, R]:
        return OnCommit(JobSetter(self.job, options), self.using)

    def send(self, payload: dict[str, Any]) -> str:
        """Send a payload when the transaction commits (now when none is open).

        Args:
            payload: A payload `build` made.

        Returns:
            The job's jid, at once. A unique job found a duplicate at the commit is never run.
        """
        return defer(payload, self.using)


def on_commit(fn: JobFunction[P, R] | JobSetter[P, R], using: str | None = None) -> OnCommit[P, R]:
    """Return a pusher whose pushes wait for the database transaction to commit.

    Pushed when the transaction on the database `using` commits; never when it rolls back. Outside
    an atomic block the push happens at once. The jid is returned at once.

    Args:
        fn: A job, or `job.set(...)`.
        using: The database alias. Default: the default database.

    Returns:
        An OnCommit with `perform_async`, `perform_in`, `perform_at` and `set`.

    Raises:
        TypeError: `fn` is not a job.

    Example:
        >>> on_commit(send_email).perform_async(42)  # doctest: +SKIP
    """
    if not isinstance(fn, JobFunction | JobSetter):
        raise TypeError(f"on_commit takes a job (or job.set(...)), not {type(fn).__name__}")
    return OnCommit(fn, using)


def perform_on_commit(fn: JobFunction[P, R] | JobSetter[P, R], *args: P.args, **kwargs: P.kwargs) -> str:
    """Push a job when the default database's transaction commits: `on_commit(fn).perform_async(...)`.

    Args:
        fn: A job, or `job.set(...)`.
        *args: The job's positional arguments.
        **kwargs: The job's keyword arguments.

    Returns:
        The job's jid, at once.

    Raises:
        TypeError: `fn` is not a job, or an argument is not JSON-native.
    """
    pusher = on_commit(fn)
    return pusher.send(pusher.build(args, kwargs))


def _transaction_aware(payload: dict[str, Any], send_now: client.SendNow) -> str | None:
    """The deferral `"TRANSACTION_AWARE": True` installs: inside an atomic block on the default
    database, a push waits for its commit; outside one it goes now."""
    if not transaction.get_connection(DEFAULT_DB_ALIAS).in_atomic_block:
        return send_now(payload)
    return defer(payload)


def use_transaction_aware(enabled: bool) -> None:
    """Every perform_async/in/at inside an atomic block waits for the commit (or stops doing so)."""
    client.install_deferral(_transaction_aware if enabled else None)
