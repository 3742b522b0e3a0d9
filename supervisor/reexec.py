"""Re-exec in place, for restarts with COGWORKER_PRELOAD=true.

With preload the app lives in the supervisor's memory, and a forked child runs what the supervisor
imported, not what is on disk now. So a restart first replaces the supervisor's own image with
`python -m supervisor.main` (same PID: systemd's MAINPID and the children's parent stay the same),
which imports the app afresh, adopts the running children, and then replaces them, phased.

The hand-over travels in one environment variable (JSON): each child's pid, slot, identity, pipe fd
(FD_CLOEXEC cleared so it survives execve) and what the old image knew about it. The handled signals
are blocked across execve: the mask survives it, so a TERM sent mid-exec waits, pending, until the new
image has its handlers, instead of killing the supervisor by its default action (and every child with
it, through PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import orjson

from supervisor import signals
from supervisor.child import Child, Phase
from supervisor.protocol import LineBuffer
from supervisor.roster import Roster

HANDOVER_VARIABLE = "COGWORKER_SWARM_HANDOVER"
HANDOVER_VERSION = 1


@dataclass(slots=True)
class AdoptedChild:
    pid: int
    slot: int
    identity: str
    fd: int
    started_at: float  # CLOCK_MONOTONIC is system-wide, so these stay valid across execve
    last_heard: float
    phase: str
    current: bool  # its slot's current child (else a replacement in flight, or retired)
    term_sent_at: float | None = None
    stop_deadline: float | None = None
    retire_reason: str | None = None
    quiet_requested: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    pending: str = ""  # an unfinished line read from its pipe (latin-1, so any bytes survive)


@dataclass(slots=True)
class Handover:
    children: list[AdoptedChild]
    quiet_slots: list[int] = field(default_factory=list)
    pending_requeues: list[str] = field(default_factory=list)

    def encode(self) -> str:
        return orjson.dumps({"version": HANDOVER_VERSION, **asdict(self)}).decode()

    @classmethod
    def decode(cls, text: str) -> Handover:
        data = orjson.loads(text)
        if not isinstance(data, dict) or data.get("version") != HANDOVER_VERSION:
            raise ValueError(f"unsupported hand-over (want version {HANDOVER_VERSION})")
        return cls(
            children=[AdoptedChild(**c) for c in data["children"]],
            quiet_slots=[int(s) for s in data.get("quiet_slots", [])],
            pending_requeues=[str(i) for i in data.get("pending_requeues", [])],
        )


def handover_of(roster: Roster, quiet_slots: set[int], pending_requeues: set[str]) -> Handover:
    """What the next image needs to adopt every child whose pipe is still open."""
    children = []
    for child in roster:
        if child.fd < 0:
            continue  # exited already; its reaping is left to the next image's waitpid
        children.append(
            AdoptedChild(
                pid=child.pid,
                slot=child.slot,
                identity=child.identity,
                fd=child.fd,
                started_at=child.started_at,
                last_heard=child.last_heard,
                phase=child.phase.value,
                current=roster.is_current(child),
                term_sent_at=child.term_sent_at,
                stop_deadline=child.stop_deadline,
                retire_reason=child.retire_reason,
                quiet_requested=child.quiet_requested,
                status=child.status,
                pending=child.lines.pending.decode("latin-1"),
            )
        )
    return Handover(children, sorted(quiet_slots), sorted(pending_requeues))


def adopted(a: AdoptedChild, now: float) -> Child:
    """The handle for a child the previous image forked; heard from `now` (the exec took a while)."""
    return Child(
        a.pid,
        a.slot,
        a.identity,
        a.fd,
        started_at=a.started_at,
        last_heard=now,
        purpose="adopted",
        phase=Phase(a.phase),
        lines=LineBuffer(a.pending.encode("latin-1")),
        status=a.status,
        term_sent_at=a.term_sent_at,
        stop_deadline=a.stop_deadline,
        retire_reason=a.retire_reason,
        quiet_requested=a.quiet_requested,
    )


def take_handover(environ: dict[str, str] | os._Environ[str]) -> Handover | None:
    """The hand-over from the image that exec'd us, if any. Removed from the environment at once, so
    no child inherits it. Raises ValueError when it can't be read."""
    text = environ.pop(HANDOVER_VARIABLE, None)
    if text is None:
        return None
    handover = Handover.decode(text)
    for child in handover.children:
        # Inheritable only for the execve; children forked from now on must not hold each other's.
        with contextlib.suppress(OSError):
            os.set_inheritable(child.fd, False)
    return handover


def exec_self(handover: Handover, argv: list[str]) -> NoReturn:
    """Replace this process's image with a fresh supervisor. Returns only by raising OSError (the
    caller logs a failed restart and goes on with the old image and its children)."""
    fds = [c.fd for c in handover.children]
    env = dict(os.environ)
    env[HANDOVER_VARIABLE] = handover.encode()
    mask = signals.block()
    try:
        for fd in fds:
            os.set_inheritable(fd, True)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "supervisor.main", *argv], env)
    except OSError:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.set_inheritable(fd, False)
        signals.restore(mask)
        raise
