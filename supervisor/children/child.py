"""A child handle: what the supervisor knows about one forked worker, and how it ended.

Everything here is bookkeeping (no system calls), so the state rules are unit-tested directly: what a
pipe message does to a child, when a child counts as silent, and what an exit status means.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from typing import Any

from cogworker import exitcodes
from supervisor.wire.child_lines import LineBuffer, Message


class Phase(enum.Enum):
    FORKED = "forked"  # nothing heard yet: still importing the app; default signal dispositions
    BOOTING = "booting"  # `booted`: run_worker's signal handlers are installed, Redis may be down
    READY = "ready"  # `ready`: fetching jobs
    STOPPING = "stopping"  # `stopping` heard, or TERM sent: draining


@dataclass(eq=False)
class Child:
    pid: int
    slot: int
    identity: str
    fd: int  # read end of its state pipe, or -1 once closed
    started_at: float  # monotonic
    last_heard: float  # monotonic; fork time until the first line arrives
    generation: int = 0  # the restart generation it was forked in (restarts replace older ones)
    purpose: str = "start"  # why it was forked: start, respawn, restart, memory, stuck
    phase: Phase = Phase.FORKED
    lines: LineBuffer = field(default_factory=LineBuffer)
    status: dict[str, Any] = field(default_factory=dict)  # latest `status` fields (metrics read it)
    boot_error: str | None = None
    exit_code: int | None = None  # from a `stopped` line
    term_sent_at: float | None = None
    stop_deadline: float | None = None  # SIGKILL when still alive then
    kill_reason: str | None = None  # hung / straggler: we SIGKILLed it
    retire_reason: str | None = None  # restart / memory: asked to stop because it is being replaced
    respawn_on_exit: bool = False  # a restart in place (non-phased): fork its slot again at once
    replaces: int | None = None  # a replacement in flight for this pid
    ready_deadline: float | None = None  # a replacement must be ready by then
    abandoned: bool = False  # a replacement given up on (already logged as a failed restart)
    quiet_requested: bool = False  # forked quiet, or sent USR1
    stuck_jobs: int = 0  # `stuck` lines: jobs stuck past their time limit (it is replaced)
    last_stuck: dict[str, Any] = field(default_factory=dict)  # the last one's jid, job, queue

    @property
    def handles_signals(self) -> bool:
        """run_worker installs its handlers before `booted`; before that USR1, TSTP and TTIN would
        kill or stop the child (their default actions), so only TERM may be sent."""
        return self.phase is not Phase.FORKED

    @property
    def stopping(self) -> bool:
        return self.phase is Phase.STOPPING or self.term_sent_at is not None

    @property
    def quiet(self) -> bool:
        return bool(self.status.get("quiet", False))

    def uptime(self, now: float) -> float:
        return now - self.started_at

    def silent_for(self, now: float) -> float:
        return now - self.last_heard

    def apply(self, message: Message, now: float) -> Phase:
        """Record one message; returns the phase before it (the caller acts on transitions)."""
        before = self.phase
        self.last_heard = now
        event, fields = message.event, message.fields
        if event == "booted" and self.phase is Phase.FORKED:
            self.phase = Phase.BOOTING
        elif event == "ready" and self.phase in (Phase.FORKED, Phase.BOOTING):
            self.phase = Phase.READY
        elif event == "status":
            if self.phase is Phase.FORKED:
                self.phase = Phase.BOOTING  # status while waiting for Redis comes after `booted`
            self.status = fields
        elif event == "stopping":
            self.phase = Phase.STOPPING
        elif event == "stopped":
            code = fields.get("code")
            self.exit_code = code if isinstance(code, int) else None
        elif event == "stuck":
            self.stuck_jobs += 1
            self.last_stuck = fields
        elif event == "boot_error":
            self.boot_error = str(fields.get("error") or "unknown boot error")
        return before

    def describe(self) -> dict[str, Any]:
        """The fields every log line about this child carries."""
        return {"child_pid": self.pid, "slot": self.slot, "child_identity": self.identity}


@dataclass(frozen=True, slots=True)
class ExitOutcome:
    code: int  # os.waitstatus_to_exitcode: negative for "killed by signal -code"
    reason: str  # stop, restart, memory, stuck, exit, crash, signal, hung, straggler, boot_error
    clean: bool  # stopped the way it was asked to: nothing to requeue, nothing to report
    boot_error: bool

    @property
    def signal_name(self) -> str | None:
        if self.code >= 0:
            return None
        try:
            return signal.Signals(-self.code).name
        except ValueError:
            return f"signal {-self.code}"

    @property
    def jobs_stranded(self) -> bool:
        """Whatever was on its in-progress list is stranded there: the swarm has it requeued at
        once, rather than leaving it to heartbeat orphan recovery minutes later."""
        return not self.clean


def classify_exit(child: Child, code: int) -> ExitOutcome:
    if child.kill_reason is not None:
        return ExitOutcome(code, child.kill_reason, clean=False, boot_error=False)
    if code == exitcodes.BOOT_ERROR or (code != 0 and child.boot_error is not None):
        return ExitOutcome(code, "boot_error", clean=False, boot_error=True)
    asked = child.term_sent_at is not None
    # A child TERMed before run_worker installed its handlers dies of the default action. It had not
    # fetched anything yet (fetching starts after `booted`), so that is a clean stop too.
    if code == 0 or (asked and code == -signal.SIGTERM):
        reason = child.retire_reason or ("stop" if asked else "exit")
        return ExitOutcome(code, reason, clean=True, boot_error=False)
    return ExitOutcome(code, "signal" if code < 0 else "crash", clean=False, boot_error=False)
