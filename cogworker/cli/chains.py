"""`cogworker chain show CID`: a chain's state and each step's (ops/chains.py).

Exit code 0 when the chain is known, 1 when it is unknown or its record expired.
"""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import exitcodes
from cogworker.cli.common import Context, Failure, table, timestamp
from cogworker.ops import chains as chain_ops


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "chain",
        help="show a chain's state and its steps",
        description="Chains (cogworker.chain): each step runs after the previous one succeeded.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        parents=parents,
        help="the chain's state (running, complete, dead, stopped) and each step's",
        description="The chain CID: its state, and for each step its job, queue, jid and state (done, "
        "queued, running, retrying, dead, cancelled, expired, or pending: not pushed yet). A step "
        "that went to dead stopped the chain: its error is shown. A group's jid is its batch's id "
        "(cogworker batch show BID).",
        epilog="exit codes: 0 shown, 1 unknown chain (or its record expired)",
    )
    show.add_argument("cid", metavar="CID", help="the chain's id (Chain.id)")
    show.set_defaults(handler=show_chain)


def show_chain(ctx: Context) -> int:
    found = chain_ops.chain_status(ctx.client, ctx.args.cid)
    if found is None:
        raise Failure(f"no chain {ctx.args.cid} (unknown, or its record expired)", exitcodes.FAILURE)

    def lines(data: dict[str, Any]) -> list[str]:
        head = [
            f"chain {data['id']}: {data['state']}, {data['done']} of {data['total']} steps done",
            f"created {timestamp(data['created_at'])}"
            + (f", completed {timestamp(data['completed_at'])}" if data["completed_at"] else ""),
        ]
        if data["error"]:
            head.append(f"error: {data['error'].get('error_class')}: {data['error'].get('error_message')}")
        rows = [
            [s["index"], _job(s), s["queue"], s["jid"], s["state"], timestamp(s["done_at"])]
            for s in data["steps"]
        ]
        return head + table(["step", "job", "queue", "jid", "state", "done at"], rows)

    ctx.emit(found, lines)
    return exitcodes.OK


def _job(step: dict[str, Any]) -> str:
    """A step's job; a group's members and, while it runs, how many have ended."""
    if "members" not in step:
        return str(step["class"])
    counts = step.get("batch")
    ended = f", {counts['done']} ended" if counts else ""
    return f"group of {len(step['members'])}{ended}"
