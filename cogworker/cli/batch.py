"""`cogworker batch show BID` and `cogworker batch list`: what a batch's records say (api/batch.py,
api/batch_status.py), the same data as `cogworker.batch_status(bid)` and the Web UI's batch page.
`cogworker batch release BID` releases every hold the batch has (api/batch_holds.py): the repair for
a batch held by a block whose process is gone.

Exit code 0 when the batch was found, 1 when its records are gone (expired) or never were."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import exitcodes
from cogworker.api import batch_holds
from cogworker.api import batch_status as status_api
from cogworker.cli.common import Context, short, table, timestamp


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "batch",
        help="show a batch (members pending, failures, callbacks), or list recent batches",
        description="Batches (cogworker.batch): `show BID` prints one batch's counts, times, failed "
        "members with their errors and its callbacks' state; `list` the newest batches.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    show_parser = actions.add_parser(
        "show",
        parents=parents,
        help="one batch: counts, times, failures and callbacks",
        description="One batch: total, pending, done, failed and dead members, when it was created and "
        "completed, the failed members (jid and error, the first 1,000) and each callback's state.",
        epilog="exit codes: 0 found, 1 not found (expired, or never created)",
    )
    show_parser.add_argument("bid", metavar="BID", help="the batch's id")
    show_parser.set_defaults(handler=show)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="the newest batches with their state",
        description="The newest batches (created within COGWORKER_BATCH_TTL_S), newest first.",
    )
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    listing.set_defaults(handler=list_batches)
    releasing = actions.add_parser(
        "release",
        parents=parents,
        help="release every hold on a batch (a block whose process is gone still holds it)",
        description="Release every hold on a batch: the blocks that push to it (`with cogworker.batch()`, "
        "`current_batch().jobs()`). A hold outlives no process on its own (a member's run releases its "
        "hold when it ends, any other block's lease lapses after COGWORKER_BATCH_HOLD_LEASE_S); this is for "
        "a hold that still stands, such as one left by an older version. The batch then completes if no "
        "member is pending. Running it again releases nothing.",
        epilog="exit codes: 0 found, 1 not found (expired, or never created)",
    )
    releasing.add_argument("bid", metavar="BID", help="the batch's id")
    releasing.set_defaults(handler=release)


def show(ctx: Context) -> int:
    found = status_api.batch_status(ctx.args.bid, ctx.client)
    if found is None:
        ctx.emit({"bid": ctx.args.bid, "found": False}, lambda _: [f"batch {ctx.args.bid}: not found"])
        return exitcodes.FAILURE

    def lines(_: Any) -> list[str]:
        assert found is not None
        out = [
            f"batch {found.bid}: {found.state}"
            + (f" ({_clean(found.description)})" if found.description else ""),
            f"members: {found.total} total, {found.pending} pending, {found.done} done, "
            f"{found.failed} failed ({found.dead} dead)",
            f"created: {timestamp(found.created_at)}   completed: {timestamp(found.completed_at)}",
        ]
        if found.parent:
            out.append(f"parent: {found.parent}")
        if found.holds:
            out.append(f"open: {found.holds} block(s) still pushing to it (nothing decided until they close)")
        for name, value in found.held_by.items():
            out.append(f"  held by {_holder(name, value)}")
        if found.callbacks:
            rows = [[c.kind, c.job, c.queue, c.jid, c.state] for c in found.callbacks]
            out += ["", *table(["CALLBACK", "JOB", "QUEUE", "JID", "STATE"], rows)]
        if found.failures:
            out += [
                "",
                *table(
                    ["FAILED MEMBER", "ERROR"], [[m, _clean(short(e, 80))] for m, e in found.failures.items()]
                ),
            ]
        return out

    ctx.emit(found.as_dict(), lines)
    return exitcodes.OK


def list_batches(ctx: Context) -> int:
    found = [
        s
        for bid in status_api.recent(ctx.args.limit, ctx.client)
        if (s := status_api.batch_status(bid, ctx.client))
    ]

    def lines(_: Any) -> list[str]:
        if not found:
            return ["(no batches)"]
        rows = [[s.bid, s.state, f"{s.pending}/{s.total}", str(s.failed), timestamp(s.created_at),
                 _clean(short(s.description, 40))] for s in found]  # fmt: skip
        return table(["BID", "STATE", "PENDING", "FAILED", "CREATED", "DESCRIPTION"], rows)

    ctx.emit([s.as_dict() for s in found], lines)
    return exitcodes.OK


def release(ctx: Context) -> int:
    bid = ctx.args.bid
    released = batch_holds.release_all(ctx.client, bid, ctx.settings.batch_ttl_s)
    found = status_api.batch_status(bid, ctx.client) if released is not None else None
    if released is None or found is None:
        ctx.emit({"bid": bid, "found": False}, lambda _: [f"batch {bid}: not found"])
        return exitcodes.FAILURE
    done = f"released {released} hold(s)" if released else "no hold to release"
    ctx.emit(
        {"bid": bid, "found": True, "released": released, "state": found.state},
        lambda _: [f"batch {bid}: {done}; now {found.state}"],
    )
    return exitcodes.OK


def _holder(name: str, value: str) -> str:
    kind, _, rest = name.partition(":")
    if kind == "run":
        return f"the run of member {rest} (in progress on {_clean(value)})"
    try:
        return f"a block's lease {rest} (lapses at {timestamp(float(value))})"
    except ValueError:
        return _clean(name)


def _clean(text: str) -> str:
    """Control characters (a terminal escape in a description or an error) shown as escapes."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
