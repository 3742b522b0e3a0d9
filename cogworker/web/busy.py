"""`/busy`: every live process and every job running now, with the remote commands (quiet, stop,
resume) per process and for all of them ("Pause intake" / "Resume intake").

Commands go through `ops.processes.tell`, as `cogworker quiet|stop|resume` send them: onto the
process's command list, read on its next heartbeat. So the flash says the process was told, not
that it has acted; the page shows the state the process itself reports on its next beat.

"Pause intake" (every process) and "Stop" (one) take the confirmation page first (actions.py's
`confirm=`): one stray click could quiet a whole fleet (issue 37). The question counts the processes
it reaches, read when it is asked; the flash then says how many were told. Quiet or resume of one
process, and Resume intake, act at once (their question is None).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import OpsError
from cogworker.ops import processes as process_ops
from cogworker.web.actions import action, field
from cogworker.web.render import page
from cogworker.web.state import WebState, state_of

# What the buttons say -> the remote command; the page-wide buttons tell every live process.
COMMANDS = {"Quiet": "quiet", "Stop": "stop", "Resume": "resume"}
INTAKE = {"quiet": "Pause intake", "resume": "Resume intake"}
NEXT_BEAT = "each acts on its next heartbeat"


@dataclass(frozen=True, slots=True)
class RunningRow:
    """One running job with the process running it (the `running` table is across processes)."""

    process: process_ops.ProcessInfo
    job: process_ops.RunningJob


def state_label(process: process_ops.ProcessInfo) -> str:
    # A stopping process reports quiet too (it fetches nothing more): stopping is the stronger word.
    if process.stopping:
        return "stopping"
    return "quiet" if process.quiet else "running"


def busy(request: Request) -> Response:
    live = process_ops.processes(state_of(request).client)
    running = sorted(
        (RunningRow(p, job) for p in live for job in p.running),
        key=lambda row: (row.job.run_at or 0.0, row.process.identity, row.job.thread),
    )
    return page(
        request,
        "busy.html",
        "Busy",
        processes=live,
        running=running,
        state_label=state_label,
        threads=sum(p.slots for p in live),
        busy_threads=sum(p.busy for p in live),
    )


def _command(form: FormData) -> str:
    command = field(form, "command")
    if command not in COMMANDS.values():
        raise OpsError(f"unknown command {command!r}: use one of {', '.join(COMMANDS.values())}")
    return command


def _counted(count: int) -> str:
    return f"{count} process{'' if count == 1 else 'es'}"


def _described(process: process_ops.ProcessInfo) -> str:
    where = f"{process.hostname} pid {process.pid}" if process.pid is not None else process.hostname
    return f"{process.identity} ({where})"


def _live(state: WebState) -> list[process_ops.ProcessInfo] | None:
    """The live processes a question counts (None: Redis couldn't say; the question says so)."""
    try:
        return process_ops.processes(state.client)
    except redis.RedisError:
        return None


def _one_question(state: WebState, form: FormData) -> str | None:
    command, identity = form.get("command"), str(form.get("identity") or "")
    if command != "stop":
        return None  # quiet or resume one process: nothing lost by a stray click
    found = [p for p in _live(state) or [] if p.identity == identity]
    who = _described(found[0]) if found else identity
    running = f", running {_counted_jobs(len(found[0].running))} now" if found else ""
    return (
        f"Stop 1 process: {who}{running}? It takes no more jobs, lets its running jobs finish "
        "within its shutdown timeout and exits."
    )


def _all_question(state: WebState, form: FormData) -> str | None:
    if form.get("command") != "quiet":
        return None  # Resume intake
    live = _live(state)
    if live is None:
        return "Pause intake on every live process? (Redis could not be read to count them.)"
    if not live:
        return "Pause intake? No process is live now, so none would be told."
    busy_now = sum(len(p.running) for p in live)
    return (
        f"Pause intake on all {_counted(len(live))}? None takes another job until resumed; "
        f"the {_counted_jobs(busy_now)} running now finish."
    )


def _counted_jobs(count: int) -> str:
    return f"{count} job{'' if count == 1 else 's'}"


@action("/busy", confirm=_one_question)
def tell(request: Request, state: WebState, form: FormData) -> str:
    """One process: quiet, stop or resume."""
    command, identity = _command(form), field(form, "identity")
    [told] = process_ops.tell(state.client, command, [identity])
    where = f"{told.hostname} pid {told.pid}" if told.pid is not None else told.hostname
    return f"Told 1 process ({told.identity}, {where}) to {command}; it acts on its next heartbeat."


@action("/busy", confirm=_all_question)
def tell_all(request: Request, state: WebState, form: FormData) -> str:
    """Every live process: "Pause intake" (quiet) or "Resume intake" (resume)."""
    command = _command(form)
    if command not in INTAKE:
        raise OpsError("only quiet (Pause intake) or resume (Resume intake) go to every process")
    told = process_ops.tell(state.client, command, None)
    if not told:
        return f"{INTAKE[command]}: no live process to tell."
    return f"{INTAKE[command]}: told {_counted(len(told))} to {command}; {NEXT_BEAT}."


ROUTES: list[BaseRoute] = [
    Route("/busy", busy, name="busy"),
    Route("/busy/tell", tell, methods=["POST"]),
    Route("/busy/tell-all", tell_all, methods=["POST"]),
]
