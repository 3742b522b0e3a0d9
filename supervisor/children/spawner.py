"""What the swarm asks of whatever forks its children, and what it is told back.

In production that is the ForkServerKeeper (forkserver_client/keeper.py), which asks a fork server process;
tests run the Swarm with a fake one (tests/unit/supervisor/test_swarm_inprocess.py). The
supervisor's loop never waits on another process: every request here returns at once, and the
answer comes later, through the SpawnerOwner callbacks, when the loop sees it arrive.
"""

from __future__ import annotations

import selectors
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from supervisor.children.child import Child
from supervisor.forkserver_client.handle import ForkServerHandle


@dataclass(eq=False)
class SpawnRequest:
    """A worker asked of a fork server and not answered yet."""

    slot: int
    purpose: str  # start, respawn, restart, memory
    nonce: str  # chosen here: with the pid, the worker's identity (and its in-progress list)
    quiet: bool
    generation: int  # the restart generation it is forked in
    replaces: Child | None  # the child it is to replace; None: it takes the slot
    server: ForkServerHandle
    read_fd: int  # the read end of its state pipe
    sent_at: float


class SpawnerOwner(Protocol):
    """What the swarm does with the spawner's news (swarm.py implements it)."""

    def forkserver_ready(self, *, restarted: bool) -> None: ...

    def spawned(self, request: SpawnRequest, pid: int) -> None: ...

    def spawn_failed(self, request: SpawnRequest, error: str, *, server_lost: bool) -> None: ...

    def restart_failed(self, reason: str) -> None: ...

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        """A dead child's list is back on its queues, `seconds` after the swarm asked for it."""


# An action taken at exit, and the condition the loop waits for (up to a deadline) after it.
ExitStep = tuple[Callable[[], None], Callable[[], bool]]


class Spawner(Protocol):
    @property
    def ready(self) -> bool:
        """A spawn may be asked now."""

    @property
    def restart_loading(self) -> bool:
        """A restart's new code is being loaded; its children come once it is."""

    @property
    def awaiting_spawns(self) -> bool:
        """Spawns were asked and not answered yet: their workers may still come."""

    @property
    def current_pid(self) -> int | None:
        """The fork server taking requests now, for the log."""

    def spawn(
        self, slot: int, purpose: str, *, quiet: bool, generation: int, replaces: Child | None = None
    ) -> SpawnRequest:
        """Ask for a worker for `slot`; the owner hears the answer. Raises OSError."""

    def spawning(self, slot: int) -> SpawnRequest | None:
        """The spawn asked for `slot` and not answered yet."""

    def requeue_jobs_of(self, identity: str) -> None:
        """A child died holding `identity`'s in-progress list: have it requeued, before any spawn
        asked after this call."""

    def load_new_code(self) -> None:
        """A restart: load the code on disk now; forkserver_ready(restarted=True) says when. Raises
        OSError."""

    def begin_stop(self) -> None:
        """The swarm is stopping: no more spawns, only the requeues still owed."""

    def reaped(self, pid: int, code: int) -> bool:
        """The swarm reaped `pid`: True when it was one of the spawner's own processes."""

    def on_readable(self, source: object) -> None:
        """Something the spawner registered with the loop's selector is readable."""

    def tick(self) -> None:
        """Every loop turn: retries and deadlines."""

    def next_due_in(self) -> float | None:
        """Seconds until tick() has something to do, or None."""

    def exit_steps(self) -> list[ExitStep]:
        """At exit, once no child is left: what to do, in order, and what to wait for after each."""

    def close(self) -> set[str]:
        """Let go of everything; returns the identities whose jobs could not be requeued."""


# (the loop's selector, the swarm, its clock) -> the spawner the swarm uses
MakeSpawner = Callable[[selectors.BaseSelector, SpawnerOwner, Callable[[], float]], Spawner]
