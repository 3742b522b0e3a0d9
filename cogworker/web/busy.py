"""`/busy`: every live process and every job running now, with the remote commands (quiet, stop,
resume) per process and for all of them ("Pause intake" / "Resume intake").

Commands go through `ops.processes.tell`, as `cogworker quiet|stop|resume` send them: onto the
process's command list, read on its next heartbeat. So the flash says the process was told, not
that it has acted; the page shows the state the process itself reports on its next beat.

"Pause intake" (every process) and "Stop" (one) take the confirmation page first (actions.py's
`confirm=`): one stray click could quiet a whole fleet (issue 37). The question counts the processes
it reaches, read when it is asked; the flash then says how many were told.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

import redis
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import OpsError
from cogworker.ops import processes as process_ops
from cogworker.web.actions import Confirm, Endpoint, Operation, action, field
from cogworker.web.render import page
from cogworker.web.state import WebState, state_of

# What the buttons say -> the remote command; the page-wide buttons tell every live process.
COMMANDS = {"Quiet": "quiet", "Stop": "stop", "Resume": "resume"}
INTAKE = {"quiet": "Pause intake", "resume": "Resume intake"}
NEXT_BEAT = "each acts on its next heartbeat"
# The live processes as read just before a confirmation question is asked (None: Redis couldn't
# say). actions.py hands a question only the form, so the endpoints below read them first.
_LIVE: ContextVar[list[process_ops.ProcessInfo] | None] = ContextVar("cogworker_busy_live", default=None)


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


def _one_question(form: FormData) -> str:
    command, identity = form.get("command"), str(form.get("identity") or "")
    found = [p for p in _LIVE.get() or [] if p.identity == identity]
    who = _described(found[0]) if found else identity
    if command == "stop":
        running = f", running {_counted_jobs(len(found[0].running))} now" if found else ""
        return (
            f"Stop 1 process: {who}{running}? It takes no more jobs, lets its running jobs finish "
            "within its shutdown timeout and exits."
        )
    return f"Tell 1 process, {who}, to {command}?"


def _all_question(form: FormData) -> str:
    live = _LIVE.get()
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


def _asking_first(operation: Operation, question: Confirm, asked: set[str]) -> Endpoint:
    """`operation` as an endpoint that asks `question` first for the commands in `asked` (the
    live processes read for it), and runs at once for the others (quiet or resume one process)."""
    plain = action("/busy")(operation)
    confirmed = action("/busy", confirm=question)(operation)

    async def endpoint(request: Request) -> Response:
        form = await request.form()  # cached on the request: action() reads the same one
        if form.get("command") not in asked:
            return await plain(request)
        if form.get("confirm") == "yes" or state_of(request).read_only(request):
            return await confirmed(request)  # acts, or refuses in read-only mode
        try:
            live = await run_in_threadpool(process_ops.processes, state_of(request).client)
        except redis.RedisError:
            live = None
        token = _LIVE.set(live)
        try:
            return await confirmed(request)
        finally:
            _LIVE.reset(token)

    endpoint.__name__, endpoint.__doc__ = operation.__name__.lstrip("_"), operation.__doc__
    return endpoint


def _tell(request: Request, state: WebState, form: FormData) -> str:
    """One process: quiet, stop or resume."""
    command, identity = _command(form), field(form, "identity")
    [told] = process_ops.tell(state.client, command, [identity])
    where = f"{told.hostname} pid {told.pid}" if told.pid is not None else told.hostname
    return f"Told 1 process ({told.identity}, {where}) to {command}; it acts on its next heartbeat."


def _tell_all(request: Request, state: WebState, form: FormData) -> str:
    """Every live process: "Pause intake" (quiet) or "Resume intake" (resume)."""
    command = _command(form)
    if command not in INTAKE:
        raise OpsError("only quiet (Pause intake) or resume (Resume intake) go to every process")
    told = process_ops.tell(state.client, command, None)
    if not told:
        return f"{INTAKE[command]}: no live process to tell."
    return f"{INTAKE[command]}: told {_counted(len(told))} to {command}; {NEXT_BEAT}."


tell = _asking_first(_tell, _one_question, {"stop"})
tell_all = _asking_first(_tell_all, _all_question, {"quiet"})


ROUTES: list[BaseRoute] = [
    Route("/busy", busy, name="busy"),
    Route("/busy/tell", tell, methods=["POST"]),
    Route("/busy/tell-all", tell_all, methods=["POST"]),
]
