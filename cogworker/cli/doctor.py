"""`cogworker doctor`: one OK/WARN/FAIL line per check; exit 1 when any check FAILs."""

from __future__ import annotations

import argparse
from typing import Any

import redis

from cogworker import exitcodes
from cogworker.cli.common import Context
from cogworker.ops import doctor as doctor_ops
from cogworker.store import key_guard


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "doctor",
        parents=parents,
        help="check Redis and cogworker's keys (exit 1 on any FAIL)",
        description="Checks, each with an OK, WARN or FAIL line: Redis version (6.2+ for reliable fetch); "
        "maxmemory-policy (must be noeviction); persistence (RDB/AOF); clock skew between this host and "
        "Redis; keys of the wrong type; live processes; queues no live process reads; in-progress jobs "
        "of dead processes; quarantined records; the unsettled backlog. On a Redis Cluster: every slot "
        "served and a replica per master; with COGWORKER_CLUSTER_SHARDING=queues also the home slot's "
        "master, each master's share of the queue partitions and partition counts above the configured "
        "ones (and the server checks on every master). Without --fix it changes nothing; "
        "--fix first moves keys of the wrong type aside. Exit 1 when any check FAILs.",
    )
    parser.add_argument(
        "--fix",
        action="store_true",
        help="first move keys of the wrong type aside (under cogworker:quarantine:*, with a TTL), as a "
        "worker's key guard does: for when no worker runs",
    )
    parser.set_defaults(handler=doctor)


def doctor(ctx: Context) -> int:
    fixed = _fix(ctx) if ctx.args.fix else []
    results = doctor_ops.run_checks(ctx.client, ctx.settings)
    failed = doctor_ops.failed(results)

    def lines(_: Any) -> list[str]:
        out = [f"FIXED wrong-type key moved to {target}" for target in fixed]
        for check in results:
            out.append(f"{check.level:<4}  {check.name}: {check.message}")
            out += [f"        {detail}" for detail in check.details]
        worst = "FAIL" if failed else "WARN" if any(c.level == "WARN" for c in results) else "OK"
        return [*out, "", f"doctor: {worst}"]

    ctx.emit({"ok": not failed, "fixed": fixed, "checks": results}, lines)
    return exitcodes.FAILURE if failed else exitcodes.OK


def _fix(ctx: Context) -> list[str]:
    """The key guard's pass, with the keys components asked about (key_guard.request)."""
    try:
        requested = key_guard.take_requests(ctx.client)
    except redis.ResponseError:
        requested = []  # the request set itself has the wrong type: this pass moves it
    return key_guard.check(ctx.client, ctx.settings, (), requested)
