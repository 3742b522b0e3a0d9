"""`cogworker deploy-mark LABEL [--at TIME] [--by NAME]`: put a deploy marker on the Metrics page's
charts (api/deploy_marks.py), from a deploy script or by hand.

Exit code 0 when the marker is written (or was there already), 1 when Redis can't be reached, 2 for
a bad label or time.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from cogworker import exitcodes
from cogworker.api import deploy_marks
from cogworker.cli.common import Context, Failure


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "deploy-mark",
        parents=parents,
        help="mark a deploy on the Metrics page's charts",
        description="Add a deploy marker, shown on the Web UI's Metrics charts at its time. Run it "
        "from a deploy script once the new version is out. Writing the same marker (label, time, "
        "author) again adds nothing; markers older than 30 days are trimmed.",
        epilog="exit codes: 0 written, 1 Redis unreachable, 2 a bad label or time",
    )
    parser.add_argument(
        "label", metavar="LABEL", help='what was deployed, e.g. "v1.2" (at most 200 characters)'
    )
    parser.add_argument(
        "--at",
        metavar="TIME",
        help="when: seconds since the epoch, or ISO-8601 (2026-12-03T14:05:00+01:00; without a zone, "
        "UTC); default now",
    )
    parser.add_argument("--by", metavar="NAME", help="who deployed; default the user running the command")
    parser.set_defaults(handler=deploy_mark)


def parse_time(text: str) -> float:
    """Epoch seconds from `--at`: a number, or an ISO-8601 time (UTC when it names no zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--at {text!r}: give seconds since the epoch or an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def deploy_mark(ctx: Context) -> int:
    try:
        at = parse_time(ctx.args.at) if ctx.args.at is not None else None
        mark = deploy_marks.write(ctx.client, ctx.args.label, at=at, by=ctx.args.by)
    except ValueError as exc:
        raise Failure(str(exc), exitcodes.USAGE) from None

    def lines(_: Any) -> list[str]:
        when = dt.datetime.fromtimestamp(mark["at"], dt.UTC).isoformat(timespec="seconds")
        by = f" by {mark['by']}" if mark["by"] else ""
        return [f"deploy marker {mark['label']!r} at {when}{by}"]

    ctx.emit(mark, lines)
    return exitcodes.OK
