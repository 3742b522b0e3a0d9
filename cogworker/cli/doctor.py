"""`cogworker doctor`: one OK/WARN/FAIL line per check; exit 1 when any check FAILs."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import exitcodes
from cogworker.cli.common import Context
from cogworker.ops import doctor as doctor_ops


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "doctor",
        parents=parents,
        help="check Redis and cogworker's keys (exit 1 on any FAIL)",
        description="Checks, each with an OK, WARN or FAIL line: Redis version (6.2+ for reliable fetch); "
        "maxmemory-policy (must be noeviction); persistence (RDB/AOF); clock skew between this host and "
        "Redis; keys of the wrong type; live processes; queues no live process reads; in-progress jobs "
        "of dead processes; quarantined records; the unsettled backlog. Changes nothing. Exit 1 when "
        "any check FAILs.",
    )
    parser.set_defaults(handler=doctor)


def doctor(ctx: Context) -> int:
    results = doctor_ops.run_checks(ctx.client, ctx.settings)
    failed = doctor_ops.failed(results)

    def lines(_: Any) -> list[str]:
        out = []
        for check in results:
            out.append(f"{check.level:<4}  {check.name}: {check.message}")
            out += [f"        {detail}" for detail in check.details]
        worst = "FAIL" if failed else "WARN" if any(c.level == "WARN" for c in results) else "OK"
        return [*out, "", f"doctor: {worst}"]

    ctx.emit({"ok": not failed, "checks": results}, lines)
    return exitcodes.FAILURE if failed else exitcodes.OK
