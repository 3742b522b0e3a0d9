"""`cogworker cancel JID`: cancel one job (ops/cancel.py says what each case does).

Exit code 0 when the job is stopped (taken off its queue or set, or its running worker told to
cancel it), 1 when there was nothing to stop (finished, or not found), 2 for a JID that can't be one.
"""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import exitcodes
from cogworker.cli.common import Context, Failure
from cogworker.ops import cancel as cancel_ops


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "cancel",
        parents=parents,
        help="cancel a job: a waiting one never runs, a running one is cancelled",
        description="Cancel the job JID. Queued, scheduled or retrying: taken off its queue or set (its "
        "unique claim released), it never runs. Running: its worker cancels it within about a second "
        "(an async job at once, a sync job at its next current_job().raise_if_cancelled()). Finished or "
        "unknown: says so (without status tracking the two look the same); the cancel is still kept "
        "for a day, so a worker fetching the job again after a crash does not run it.",
        epilog="exit codes: 0 stopped, 1 nothing to stop (finished or not found), 2 not a job id",
    )
    parser.add_argument("jid", metavar="JID", help="the job's id")
    parser.set_defaults(handler=cancel)


def cancel(ctx: Context) -> int:
    try:
        outcome = cancel_ops.cancel(ctx.client, ctx.scripts, ctx.args.jid)
    except (TypeError, ValueError) as exc:
        raise Failure(str(exc), exitcodes.USAGE) from None

    def lines(_: Any) -> list[str]:
        name = f" ({outcome.job}, queue {outcome.queue})" if outcome.job else ""
        found = [f"{outcome.jid}{name}: {outcome.detail}"]
        if outcome.processes:
            found.append("running in: " + ", ".join(outcome.processes))
        return found

    ctx.emit({**_plain(outcome), "stopped": outcome.stopped}, lines)
    return exitcodes.OK if outcome.stopped else exitcodes.FAILURE


def _plain(outcome: cancel_ops.CancelOutcome) -> dict[str, Any]:
    return {
        "jid": outcome.jid,
        "case": outcome.case,
        "detail": outcome.detail,
        "job": outcome.job,
        "queue": outcome.queue,
        "processes": list(outcome.processes),
        "searched_all": outcome.searched_all,
    }
