"""The fork server processes the keeper talks to (keeper.py), from start to reaping.

- `current` takes the requests; `loading` is a restart's new one, still importing the code;
  `retired` ones finish the answers they owe, then exit (or were killed), until they are reaped.
- The handshake: a started fork server is listened to at once, and is used from its `ready`. A
  restart's new one then becomes current and the one it replaces retires.
- Starting again: with no current one (it died, or was killed as hung) a new one is started, at
  once after a hang (noticing it took long enough), else after RETRY_FIRST_S, the delay doubling
  while they keep dying before they are ready.

What a lost fork server owed (its spawns, its requeues) is the keeper's business; so is deciding
whether a new one is wanted at all.
"""

from __future__ import annotations

import contextlib
import selectors
from collections.abc import Callable

import structlog

from supervisor.forkserver_client.handle import ForkServerHandle, Launch

log = structlog.get_logger("cogworker.swarm")

RETRY_FIRST_S = 1.0  # a fork server that died is started again after this, doubling while it dies
RETRY_MAX_S = 60.0


class ForkServers:
    def __init__(
        self,
        first: ForkServerHandle,
        selector: selectors.BaseSelector,
        *,
        clock: Callable[[], float],
        launch: Launch,
    ) -> None:
        self.current: ForkServerHandle | None = first
        self.loading: ForkServerHandle | None = None
        self.retired: list[ForkServerHandle] = []  # told to exit (or killed), not reaped yet
        self._selector = selector
        self._clock = clock
        self._launch = launch
        self._generation = first.generation
        self._start_at: float | None = None  # when to start a new one (the current one is gone)
        self._start_delay = RETRY_FIRST_S
        self._listen(first)

    @property
    def ready(self) -> bool:
        """The current fork server takes spawn requests now."""
        return self.current is not None and self.current.ready

    def alive(self) -> list[ForkServerHandle]:
        """Every fork server process not reaped yet."""
        found = [self.current, self.loading, *self.retired]
        return [s for s in found if s is not None and s.pid > 0]

    def find(self, pid: int) -> ForkServerHandle | None:
        return next((s for s in self.alive() if s.pid == pid), None)

    def coming(self) -> bool:
        """A fork server is on its way: the current one alive and not retiring, or a start scheduled."""
        current = self.current
        alive = current is not None and current.pid > 0 and not current.retiring
        return alive or self._start_at is not None

    def next_due_in(self) -> float | None:
        return None if self._start_at is None else max(0.0, self._start_at - self._clock())

    # Starting, and the handshake -------------------------------------------------------------
    def start(self) -> ForkServerHandle:
        """Launch one and listen to it. Raises OSError."""
        self._generation += 1
        server = self._launch(self._generation, self._clock())
        self._listen(server)
        log.info("forkserver_started", forkserver_pid=server.pid, generation=server.generation)
        return server

    def load_new_code(self) -> None:
        """A restart: start a fork server that imports the code on disk now. Raises OSError."""
        self.loading = self.start()
        log.info(
            "restart_loading",
            forkserver_pid=self.loading.pid,
            note="a new fork server imports the code on disk now",
        )

    def took_over(self, server: ForkServerHandle) -> bool:
        """`server`, not retiring, said `ready`. Returns whether it is a restart's: it is current now,
        and the one it replaces retires."""
        log.info("forkserver_ready", forkserver_pid=server.pid, generation=server.generation)
        self._start_delay = RETRY_FIRST_S
        if server is not self.loading:
            return False
        old, self.current, self.loading = self.current, server, None
        if old is not None:
            self._retire(old)
        return True

    # Losing one, and starting again ----------------------------------------------------------
    def killed(self, server: ForkServerHandle) -> bool:
        """`server` was SIGKILLed as hung: it is kept as retired until reaped. Returns whether it was
        a restart's, still loading."""
        if server not in self.retired:
            self.retired.append(server)
        return self._forget(server)

    def exited(self, server: ForkServerHandle) -> bool:
        """`server`, not retiring, was reaped. Returns whether it was a restart's, still loading."""
        return self._forget(server)

    def _forget(self, server: ForkServerHandle) -> bool:
        if server is self.loading:
            self.loading = None
            return True
        if server is self.current:
            self.current = None
        return False

    def start_again(self, *, at_once: bool) -> None:
        """No current fork server and none loading: have one started, at once or after the delay."""
        if self.current is not None or self.loading is not None:
            return
        if at_once:
            self._start_at = self._clock()
            return
        delay = self._start_delay
        self._start_delay = min(delay * 2, RETRY_MAX_S)
        self._start_at = self._clock() + delay
        log.info("forkserver_start_scheduled", in_s=delay)

    def start_due(self, *, wanted: bool) -> None:
        """Start the fork server scheduled, if it is due and still `wanted`."""
        at = self._start_at
        if at is None or self._clock() < at or not wanted:
            return
        self._start_at = None
        if self.current is not None or self.loading is not None:
            return  # a restart's new fork server, loading, takes over
        try:
            self.current = self.start()
        except OSError as exc:
            self._start_at = self._clock() + self._start_delay
            log.error("forkserver_start_failed", error=str(exc))

    # Retiring, reaping and exit --------------------------------------------------------------
    def _retire(self, server: ForkServerHandle) -> None:
        server.retire()
        if server.pid > 0:
            self.retired.append(server)
        else:
            self.unlisten(server)

    def retire_all(self) -> None:
        """At exit: every fork server exits once it has answered what it owes."""
        for server in self.alive():
            server.retire()

    def kill_all(self) -> None:
        """At exit, for those that did not exit when told to."""
        for server in self.alive():
            if server.killed:
                continue  # killed as hung already: only waiting to be reaped
            log.warning("forkserver_killed", forkserver_pid=server.pid, note="it did not exit when told to")
            server.kill()

    def drop(self, server: ForkServerHandle) -> None:
        """Reaped: stop listening, and forget it (its pid becomes 0)."""
        self.unlisten(server)
        server.pid = 0
        if server in self.retired:
            self.retired.remove(server)

    def _listen(self, server: ForkServerHandle) -> None:
        self._selector.register(server.fileno(), selectors.EVENT_READ, server)

    def unlisten(self, server: ForkServerHandle) -> None:
        if server.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(server.fileno())
            server.close()
