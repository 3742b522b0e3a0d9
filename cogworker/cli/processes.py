"""`cogworker quiet|stop|resume` (remote commands to live processes) and `recover-orphans`."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker.cli.common import Context
from cogworker.ops import processes as process_ops
from cogworker.ops import ruby_processes

COMMAND_HELP = {
    "quiet": "stop fetching new jobs; running jobs finish (undo with resume)",
    "stop": "stop the process: drain running jobs for COGWORKER_TIMEOUT_S, then requeue what is left",
    "resume": "fetch jobs again after quiet",
}


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    for command, text in COMMAND_HELP.items():
        parser = sub.add_parser(
            command,
            parents=parents,
            help=f"tell processes to {command}",
            description=f"Tell one live process (--identity, as `status` lists it) or every live process "
            f"(--all) to {command}: {text}. The command is read on the process's next heartbeat."
            + (" A swarm child told to stop is replaced by its supervisor." if command == "stop" else "")
            + (
                " In the Sidekiq mode a Sidekiq process named with --identity gets Sidekiq's own signal "
                f"({ruby_processes.SIGNAL_OF[command]}); --all tells cogworker's processes only."
                if command in ruby_processes.SIGNAL_OF
                else ""
            ),
        )
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--identity", action="append", metavar="ID", help="a process (repeatable)")
        target.add_argument("--all", action="store_true", help="every live process")
        parser.set_defaults(handler=tell, command=command)

    recover = sub.add_parser(
        "recover-orphans",
        parents=parents,
        help="requeue the jobs of dead processes now",
        description="Run orphan recovery now, with the keyspace scan: the in-progress jobs of every "
        "process silent for longer than COGWORKER_ORPHAN_THRESHOLD_S go back to their queues (a job "
        "orphaned more than COGWORKER_MAX_ORPHANINGS times goes to dead). Live processes are never "
        "touched: the death check is atomic with the requeue.",
    )
    recover.set_defaults(handler=recover_orphans)


def tell(ctx: Context) -> int:
    command: str = ctx.args.command
    told = process_ops.tell(ctx.client, command, None if ctx.args.all else ctx.args.identity)
    data = {
        "command": command,
        "told": [_told(p, command) for p in told],
    }

    def lines(_: Any) -> list[str]:
        if not told:
            return [f"no live process to tell to {command}"]
        return [
            f"told {p.identity} ({p.hostname} pid {p.pid}{', ' + p.tag if p.tag else ''}) to {command}"
            + (f" (Sidekiq's {ruby_processes.SIGNAL_OF[command]})" if p.is_ruby else "")
            for p in told
        ]

    ctx.emit(data, lines)
    return 0


def _told(p: process_ops.ProcessInfo, command: str) -> dict[str, Any]:
    found: dict[str, Any] = {"identity": p.identity, "hostname": p.hostname, "pid": p.pid, "tag": p.tag}
    if p.is_ruby:  # the Sidekiq mode: a Sidekiq process, told with Sidekiq's own signal
        found.update(language=p.language, signal=ruby_processes.SIGNAL_OF[command])
    return found


def recover_orphans(ctx: Context) -> int:
    moved = process_ops.recover_orphans(ctx.client, ctx.settings)
    ctx.emit({"requeued": moved}, lambda _: [f"{moved} orphaned job(s) requeued"])
    return 0
