"""Job failures to Sentry (`pip install 'cogworker-redis[sentry]'`; docs/integrations/sentry.md).

    sentry_sdk.init(dsn=..., integrations=[CogworkerIntegration()])

in the app module the workers import adds a server middleware that runs each job in its own
isolation scope (one job's breadcrumbs and tags never reach another's event) and reports a failure
with the job's class, jid, queue, arguments, retry count and whether it will be retried.

By default only a failure that will not be retried is reported (the job goes to dead): a job that
fails twice and then succeeds is not an error anyone must act on. `report_every_attempt=True`
reports each failed attempt. A cancelled job (cogworker.cancel) is no failure.

Arguments are named from the job's signature where they bind, so a positional `password` is
scrubbed like a keyword one: every value under a name in `denylist` (case-insensitive, at any
depth, and in the job's stack frames' local variables) becomes "[Filtered]"; cogworker's own frames
are sent without their local variables (they hold the raw payload).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import sentry_sdk
import structlog
from sentry_sdk.integrations import Integration
from sentry_sdk.scrubber import DEFAULT_DENYLIST
from sentry_sdk.utils import event_from_exception

from cogworker.api import retry
from cogworker.api.current_job import JobCancelled
from cogworker.api.middleware import ServerNext, server_chain
from cogworker.api.registry import registered

FILTERED = "[Filtered]"

log = structlog.get_logger("cogworker.sentry")

__all__ = ["DEFAULT_DENYLIST", "CogworkerIntegration"]


class CogworkerIntegration(Integration):
    """Sentry's integration for cogworker: `sentry_sdk.init(..., integrations=[CogworkerIntegration()])`.

    Put it in the app module the workers import. Each job runs in its own isolation scope, and a
    failure that will not be retried (or, with `report_every_attempt`, every failed attempt) is
    reported with the job's class, jid, queue, arguments and retry count.

    Args:
        denylist: Argument names whose values are never sent (case-insensitive, at any depth).
            Default: Sentry's DEFAULT_DENYLIST; extend it with `[*DEFAULT_DENYLIST, "card_number"]`.
        report_every_attempt: Report each failed attempt, not only a failure that goes to dead.

    Raises:
        TypeError: `denylist` is a string rather than a list of names.
    """

    identifier = "cogworker"

    def __init__(self, *, denylist: Iterable[str] | None = None, report_every_attempt: bool = False) -> None:
        """`denylist`: argument names whose values are never sent (Sentry's DEFAULT_DENYLIST unless
        given; extend it with `[*DEFAULT_DENYLIST, "card_number"]`)."""
        if isinstance(denylist, str):  # would be read as its letters, and scrub nothing useful
            raise TypeError(f"denylist must be a list of names, not the string {denylist!r}")
        self.denylist = frozenset(
            name.lower() for name in (DEFAULT_DENYLIST if denylist is None else denylist)
        )
        self.report_every_attempt = report_every_attempt

    @staticmethod
    def setup_once() -> None:
        """Add the reporting server middleware (called by sentry_sdk.init, once per process)."""
        server_chain.add(report_failures)


def report_failures(job: dict[str, Any], call_next: ServerNext) -> None:
    """Server middleware: the job in an isolation scope, its failure reported."""
    integration = sentry_sdk.get_client().get_integration(CogworkerIntegration)
    if integration is None:  # sentry_sdk.init was not given the integration (or was closed)
        call_next()
        return
    with sentry_sdk.isolation_scope() as scope:
        name = str(job.get("class"))
        scope.set_transaction_name(name)
        scope.set_tag("cogworker.queue", str(job.get("queue")))
        scope.set_tag("cogworker.job", name)
        try:
            call_next()
        except JobCancelled:
            raise
        except BaseException as exc:
            found = registered(name)
            again = retry.will_retry(job, exc, found.options if found else None)
            if not again or integration.report_every_attempt:
                try:
                    _report(integration, scope, job, exc, again)
                except Exception as failure:  # the job's own error is what gets filed, never this
                    log.warning("sentry_report_failed", error=f"{type(failure).__name__}: {failure}"[:300])
            raise


def _report(
    integration: CogworkerIntegration,
    scope: sentry_sdk.Scope,
    job: dict[str, Any],
    exc: BaseException,
    again: bool,
) -> None:
    client = sentry_sdk.get_client()
    event, hint = event_from_exception(
        exc, client_options=client.options, mechanism={"type": "cogworker", "handled": False}
    )
    denylist = integration.denylist
    scope.set_tag("cogworker.will_retry", "yes" if again else "no")
    scope.set_context(
        "cogworker",
        {
            "job": str(job.get("class")),
            "jid": str(job.get("jid") or ""),
            "queue": str(job.get("queue")),
            "retry_count": job.get("retry_count"),
            "will_retry": again,
            "arguments": scrub(named_arguments(job), denylist),
        },
    )
    for value in event.get("exception", {}).get("values", []):
        for frame in (value.get("stacktrace") or {}).get("frames", []):
            if str(frame.get("module") or "").partition(".")[0] == "cogworker":
                # cogworker's own frames hold the whole payload (`job`, `work.raw`, `args`): its
                # arguments there have no names to scrub by, so none of those locals is sent.
                frame.pop("vars", None)
            elif isinstance(frame.get("vars"), dict):
                frame["vars"] = scrub(frame["vars"], denylist)
    sentry_sdk.capture_event(event, hint=hint)


def named_arguments(job: dict[str, Any]) -> dict[str, Any]:
    """The job's arguments by parameter name where they bind to its signature; otherwise (a job
    that can't be imported, arguments that don't fit) as they are, under `args` and `kwargs`."""
    args = job.get("args", [])
    kwargs = job.get("kwargs", {})
    found = registered(str(job.get("class")))
    if found is not None and isinstance(args, list) and isinstance(kwargs, dict):
        try:
            bound = inspect.signature(found.func).bind(*args, **kwargs)
        except (TypeError, ValueError):
            pass
        else:
            return dict(bound.arguments)
    return {"args": args, "kwargs": kwargs}


def scrub(value: Any, denylist: frozenset[str]) -> Any:
    """`value` with every value under a denylisted name (at any depth) replaced by FILTERED."""
    if isinstance(value, dict):
        return {
            key: FILTERED if isinstance(key, str) and key.lower() in denylist else scrub(item, denylist)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [scrub(item, denylist) for item in value]
    return value
