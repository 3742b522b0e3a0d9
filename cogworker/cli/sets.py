"""`cogworker retry|scheduled|dead ACTION`: the sorted sets, with the Web UI's actions.

list [--queue Q] [--job TEXT] [--error TEXT] [--limit N]
show JID                 the whole entry (payload, error, backtrace)
retry JID                enqueue it now (Sidekiq's "Retry Now" / "Add to Queue")
delete JID               remove it (asks first)
retry-all [filters]      enqueue every matching entry now (asks first)
delete-all [filters]     remove every matching entry (asks first)
kill JID... | --all      move retry/scheduled entries to dead (asks first)
"""

from __future__ import annotations

import argparse
from typing import Any

from cogworker.cli.common import Context, Failure, pretty_json, short, table, timestamp, yes_flag
from cogworker.ops import NotFound, set_actions
from cogworker.ops import sets as set_ops

SET_HELP = {
    "retry": "failed jobs waiting for their next try",
    "scheduled": "jobs pushed to run later",
    "dead": "jobs out of retries",
}
ACTIONS_HELP = """actions (Sidekiq Web UI's buttons):
  list        entries, soonest due first (dead: newest first); filter with --queue/--job/--error
  show JID    one entry in full: payload, error, backtrace
  retry JID   put it on its queue now ("Retry Now"; for scheduled: "Add to Queue", alias enqueue)
  delete JID  remove it (asks first; --yes to skip)
  retry-all   put every matching entry on its queue now (asks first)
  delete-all  remove every matching entry (asks first)
  kill JID... move entries to dead ("Kill"; retry and scheduled only; asks first); --all with the
              filters kills every matching entry

JID is the job's id; an entry with none (an unreadable payload) is named raw-<digest>, as `list`
shows it. An unreadable entry can be shown and deleted, not retried. Of two operators retrying the
same entry at once, exactly one succeeds (it is taken out and queued in one atomic step).
"""


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    for set_name, about in SET_HELP.items():
        parser = sub.add_parser(
            set_name,
            help=f"the {set_name} set: {about}",
            description=f"The {set_name} set: {about}.",
            epilog=ACTIONS_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(set_name=set_name)
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        enqueue_alias = ["enqueue"] if set_name == "scheduled" else []

        listing = actions.add_parser("list", parents=parents, help="list entries")
        _filters(listing)
        listing.add_argument("--limit", type=int, default=50, help="most entries shown (default 50)")
        listing.set_defaults(handler=list_entries)

        show = actions.add_parser("show", parents=parents, help="one entry in full")
        show.add_argument("ref", metavar="JID")
        show.set_defaults(handler=show_entry)

        retry = actions.add_parser("retry", aliases=enqueue_alias, parents=parents, help="enqueue it now")
        retry.add_argument("ref", metavar="JID")
        retry.set_defaults(handler=retry_entry)

        delete = actions.add_parser("delete", parents=parents, help="remove it (asks first)")
        delete.add_argument("ref", metavar="JID")
        yes_flag(delete)
        delete.set_defaults(handler=delete_entry)

        retry_all = actions.add_parser(
            "retry-all",
            aliases=[f"{a}-all" for a in enqueue_alias],
            parents=parents,
            help="enqueue every matching entry now (asks first)",
        )
        _filters(retry_all)
        yes_flag(retry_all)
        retry_all.set_defaults(handler=retry_all_entries)

        delete_all = actions.add_parser(
            "delete-all", parents=parents, help="remove every matching entry (asks first)"
        )
        _filters(delete_all)
        yes_flag(delete_all)
        delete_all.set_defaults(handler=delete_all_entries)

        if set_name in set_actions.KILLABLE:
            kill = actions.add_parser("kill", parents=parents, help="move entries to dead (asks first)")
            kill.add_argument("refs", metavar="JID", nargs="*")
            kill.add_argument("--all", action="store_true", help="every entry matching the filters")
            _filters(kill)
            yes_flag(kill)
            kill.set_defaults(handler=kill_entries)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", help="only entries for this queue")
    parser.add_argument("--job", help="only jobs whose name contains this text")
    parser.add_argument("--error", help="only entries whose error class or message contains this text")


def _filter(ctx: Context) -> set_ops.Filter:
    return set_ops.Filter(queue=ctx.args.queue, job=ctx.args.job, error=ctx.args.error)


def _when_label(set_name: str) -> str:
    return {"retry": "NEXT TRY", "scheduled": "DUE", "dead": "DIED"}[set_name]


def list_entries(ctx: Context) -> int:
    set_name = ctx.args.set_name
    if ctx.args.limit < 1:
        raise Failure("--limit must be 1 or more", 2)
    found = set_ops.entries(ctx.client, set_name, _filter(ctx), ctx.args.limit)
    total = set_ops.size(ctx.client, set_name)
    data = {"set": set_name, "size": total, "entries": [e.summary for e in found]}

    def lines(d: dict[str, Any]) -> list[str]:
        shown = f"{len(d['entries'])} shown" if d["entries"] else "nothing matches"
        out = [f"{set_name}: {d['size']} entr{'y' if d['size'] == 1 else 'ies'}, {shown}"]
        if not found:
            return out
        rows = []
        sharded = set_ops.sharded()
        for e in found:
            error = f"{e.error_class}: {e.error_message}" if e.error_class else "-"
            rows.append(
                [
                    e.ref,
                    e.job or "(unreadable)",
                    e.queue or "-",
                    *([str(e.partition)] if sharded else []),
                    timestamp(e.score),
                    "-" if e.retry_count is None else e.retry_count,
                    short(e.args, 30),
                    short(error, 50),
                ]
            )
        # The sharded layout's entries each lie in a queue partition (the one the actions run on).
        place = ["PARTITION"] if sharded else []
        headers = ["JID", "JOB", "QUEUE", *place, _when_label(set_name), "RETRIES", "ARGS", "ERROR"]
        return [*out, *table(headers, rows)]

    ctx.emit(data, lines)
    return 0


def show_entry(ctx: Context) -> int:
    entry = set_ops.get(ctx.client, ctx.args.set_name, ctx.args.ref)
    trace = entry.backtrace
    # The payload holds the backtrace encoded (Base64 of deflated JSON, as Sidekiq stores it): shown
    # here decoded, as lines.
    data = {**entry.summary, "backtrace": trace, "payload": entry.payload, "raw": entry.raw}

    def lines(_: Any) -> list[str]:
        out = [
            f"{entry.set} entry {entry.ref}",
            f"  job:      {entry.job or '(unreadable)'}",
            f"  queue:    {entry.queue or '-'}",
            f"  {_when_label(entry.set).lower() + ':':<9} {timestamp(entry.score)}",
        ]
        if entry.error_class:
            out.append(f"  error:    {entry.error_class}: {entry.error_message or ''}")
        if trace:
            out += ["  backtrace:", *("    " + line for line in trace)]
        if not entry.readable:
            out.append("  (can't be retried: unreadable payload, or no job class or queue)")
        body = entry.payload if entry.payload is not None else entry.raw
        text = pretty_json(body, sort_keys=True)
        return [*out, "  payload:", *("    " + line for line in text.splitlines())]

    ctx.emit(data, lines)
    return 0


def retry_entry(ctx: Context) -> int:
    entry = set_actions.retry_now(ctx.client, ctx.scripts, ctx.args.set_name, ctx.args.ref)
    data = {"set": entry.set, "ref": entry.ref, "job": entry.job, "queue": entry.queue, "retried": True}
    ctx.emit(data, lambda _: [f"{entry.ref} ({entry.job}) moved from {entry.set} to queue {entry.queue}"])
    return 0


def delete_entry(ctx: Context) -> int:
    set_name = ctx.args.set_name
    entry = set_ops.get(ctx.client, set_name, ctx.args.ref)
    ctx.confirm(f"Delete {entry.ref} ({entry.job or 'unreadable'}) from the {set_name} set?")
    entry = set_actions.delete(ctx.client, set_name, ctx.args.ref)
    data = {"set": set_name, "ref": entry.ref, "job": entry.job, "deleted": True}
    ctx.emit(data, lambda _: [f"{entry.ref} deleted from the {set_name} set"])
    return 0


def _matching(ctx: Context) -> str:
    match = _filter(ctx)
    if match.empty:
        return f"every entry ({set_ops.size(ctx.client, ctx.args.set_name)})"
    count = len(set_ops.entries(ctx.client, ctx.args.set_name, match))
    return f"the {count} matching entr{'y' if count == 1 else 'ies'}"


def retry_all_entries(ctx: Context) -> int:
    set_name = ctx.args.set_name
    ctx.confirm(f"Enqueue {_matching(ctx)} of the {set_name} set now?")
    result = set_actions.retry_all(ctx.client, ctx.scripts, set_name, _filter(ctx))
    data = {"set": set_name, "retried": result.done, "unreadable": result.unreadable, "gone": result.gone}

    data["wrong_type"] = list(result.wrong_type)

    def lines(_: Any) -> list[str]:
        out = [f"{result.done} job(s) moved from {set_name} to their queues"]
        if result.unreadable:
            out.append(f"{result.unreadable} unreadable entr(ies) left in place (see `show`, `delete`)")
        if result.gone:
            out.append(f"{result.gone} entr(ies) were taken by someone else meanwhile")
        return out + _wrong_type_lines(result)

    ctx.emit(data, lines)
    return 1 if result.wrong_type else 0


def _wrong_type_lines(result: set_actions.BulkResult) -> list[str]:
    if not result.wrong_type:
        return []
    return [
        f"stopped: {', '.join(result.wrong_type)} ha{'s' if len(result.wrong_type) == 1 else 've'} the "
        "wrong type; the rest were left in place. A running worker's key guard moves such keys aside "
        "within seconds (it has been asked to); with none running, run `cogworker doctor --fix`. "
        "Then run this again."
    ]


def kill_entries(ctx: Context) -> int:
    set_name, refs = ctx.args.set_name, list(dict.fromkeys(ctx.args.refs))
    if ctx.args.all == bool(refs):
        raise Failure("kill takes JIDs or --all (with optional filters), not both", 2)
    if refs and not _filter(ctx).empty:
        raise Failure("--queue/--job/--error go with --all", 2)
    if ctx.args.all:
        return _kill_all(ctx)
    found = [set_ops.get(ctx.client, set_name, ref) for ref in refs]
    named = ", ".join(f"{e.ref} ({e.job or 'unreadable'})" for e in found)
    ctx.confirm(f"Kill {named}: move from the {set_name} set to dead?")
    killed, gone = [], []
    for entry in found:
        try:
            killed.append(set_actions.kill(ctx.client, ctx.scripts, ctx.settings, set_name, entry.ref))
        except NotFound:
            gone.append(entry.ref)
    data = {"set": set_name, "killed": [e.ref for e in killed], "gone": gone}

    def lines(_: Any) -> list[str]:
        out = [f"{e.ref} ({e.job or 'unreadable'}) moved from {set_name} to dead" for e in killed]
        return out + [f"{ref}: taken by someone else meanwhile" for ref in gone]

    ctx.emit(data, lines)
    return 1 if gone else 0


def _kill_all(ctx: Context) -> int:
    set_name = ctx.args.set_name
    ctx.confirm(f"Kill {_matching(ctx)} of the {set_name} set (move them to dead)?")
    result = set_actions.kill_all(ctx.client, ctx.scripts, ctx.settings, set_name, _filter(ctx))
    data = {"set": set_name, "killed": result.done, "gone": result.gone}
    data["wrong_type"] = list(result.wrong_type)

    def lines(_: Any) -> list[str]:
        out = [f"{result.done} entr(ies) moved from {set_name} to dead"]
        if result.gone:
            out.append(f"{result.gone} entr(ies) were taken by someone else meanwhile")
        return out + _wrong_type_lines(result)

    ctx.emit(data, lines)
    return 1 if result.wrong_type else 0


def delete_all_entries(ctx: Context) -> int:
    set_name = ctx.args.set_name
    ctx.confirm(f"Delete {_matching(ctx)} of the {set_name} set?")
    result = set_actions.delete_all(ctx.client, set_name, _filter(ctx))
    data = {"set": set_name, "deleted": result.done, "gone": result.gone}
    ctx.emit(data, lambda _: [f"{result.done} entr(ies) deleted from the {set_name} set"])
    return 0
