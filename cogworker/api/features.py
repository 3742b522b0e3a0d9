"""The built-in features (expiry, unique jobs, job status) plugged into the middleware chains, and the job
options every part of the job API declares.

The client knows none of them: each feature is a client middleware, a server middleware and an
abandon hook, installed here outermost on the first push or job run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cogworker.api import expiry, job_status, results, retry, retry_filters, time_limits, unique
from cogworker.api.middleware import add_abandon_hook, client_chain, server_chain
from cogworker.queue_names import QUEUE_NAME_RULE, is_queue_name


def _check_queue(value: Any) -> None:
    if value is not None and not is_queue_name(value):
        # The rule COGWORKER_QUEUES is parsed by: a job pushed here must be readable by some worker.
        raise TypeError(f"queue must be {QUEUE_NAME_RULE}, not {value!r}")


def _check_limit(value: Any) -> None:
    """`limit=` (api/limit_jobs.py), imported only when a job declares one: a worker whose jobs use
    no limiter never loads the limiter modules."""
    if value is not None:
        from cogworker.api import limit_jobs

        limit_jobs.check_limit(value)


# Every job option, with its check (None: taken as given); each module declares its own.
OPTIONS: dict[str, Callable[[Any], None] | None] = {
    "queue": _check_queue,
    **retry.OPTIONS,
    **retry_filters.OPTIONS,
    **unique.OPTIONS,
    **job_status.OPTIONS,
    **expiry.OPTIONS,
    **results.OPTIONS,
    **time_limits.OPTIONS,
    "limit": _check_limit,
}

_installed = False


def check_options(options: dict[str, Any]) -> None:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise TypeError(f"unknown job option(s): {', '.join(sorted(unknown))}")
    for name, value in options.items():
        check = OPTIONS[name]
        if check is not None:
            check(value)


def check_set_options(options: dict[str, Any]) -> None:
    """`.set(...)`: the options a push may change (not those only `@job` can declare)."""
    retry_filters.refuse_worker_side(options)
    check_options(options)


def install_builtin_middleware() -> None:
    """Put the built-in middleware (unique claims, job status) in the chains, outermost.

    Runs by itself before the first push or job (`ensure_installed`). Your own middleware runs
    inside them, whenever it was added: a unique job's duplicate never reaches it, and its "queued"
    status is written before it. Call this again after clearing the chains (tests do) to restore them.
    """
    global _installed
    client_chain.add_outermost(expiry.stamp, unique.claim, job_status.on_push)
    server_chain.add_outermost(job_status.on_run, unique.release_when_done)
    add_abandon_hook(unique.abandon)
    add_abandon_hook(job_status.abandon)
    _installed = True


def ensure_installed() -> None:
    """Install the built-in middleware once. Not at import: it would be a side effect of importing
    a module, and tests clear the chains and put them back with `install_builtin_middleware`."""
    if not _installed:
        install_builtin_middleware()
