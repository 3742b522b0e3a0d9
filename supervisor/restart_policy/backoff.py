"""Respawn backoff: when may a slot whose child died be forked again?

No delay for the first crash after a healthy run (the child was up at least `healthy_uptime_s`), then
`base_delay_s` doubling up to `max_delay_s` while the slot keeps dying young. Without it a child that
crashes during boot (a bad deploy, a typo in the app, a broken dependency) made the supervisor fork and
reap in a tight loop forever, burning CPU and flooding the log.

The crash after a healthy run opens a streak of one and is respawned at once; the next young crash
waits `base_delay_s`. Counting the healthy-run crash as streak 0 instead would give a slot that starts
crash-looping after a good run two free respawns, one more than the rule above promises.

Pure bookkeeping with an injected clock, so tests can step through minutes of crashes instantly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Crash:
    slot: int
    uptime_s: float
    streak: int  # consecutive crashes of this slot, the healthy-run one included
    delay_s: float


class RespawnBackoff:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        healthy_uptime_s: float = 30.0,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
    ) -> None:
        self._clock = clock
        self.healthy_uptime_s = healthy_uptime_s
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._started_at: dict[int, float] = {}
        self._streak: dict[int, int] = {}
        self._due_at: dict[int, float] = {}

    def started(self, slot: int, at: float | None = None) -> None:
        """A child was forked for `slot` (at `at`, for children adopted after a re-exec)."""
        self._started_at[slot] = self._clock() if at is None else at
        self._due_at.pop(slot, None)

    def crashed(self, slot: int) -> Crash:
        """The slot's child died unexpectedly: record it and schedule the respawn."""
        now = self._clock()
        uptime = now - self._started_at.get(slot, now)
        streak = 1 if uptime >= self.healthy_uptime_s else self._streak.get(slot, 0) + 1
        self._streak[slot] = streak
        delay = self.delay_for(streak)
        self._due_at[slot] = now + delay
        return Crash(slot, uptime, streak, delay)

    def delay_for(self, streak: int) -> float:
        if streak <= 1:
            return 0.0
        return min(self.base_delay_s * float(2 ** (streak - 2)), self.max_delay_s)

    def schedule_now(self, slot: int) -> None:
        """A respawn that is no crash (a restart in place): due at once, streak untouched."""
        self._due_at[slot] = self._clock()

    def due(self) -> list[int]:
        """Slots whose respawn time has come, in slot order; each is returned once."""
        now = self._clock()
        slots = sorted(slot for slot, at in self._due_at.items() if at <= now)
        for slot in slots:
            del self._due_at[slot]
        return slots

    def waiting(self) -> dict[int, float]:
        """Slot -> seconds until its respawn, for every slot waiting for one."""
        now = self._clock()
        return {slot: max(0.0, at - now) for slot, at in self._due_at.items()}

    def next_due_in(self) -> float | None:
        waits = self.waiting().values()
        return min(waits) if waits else None

    def is_waiting(self, slot: int) -> bool:
        return slot in self._due_at

    def fork_failed(self, slot: int) -> float:
        """fork() itself failed (EAGAIN, ENOMEM): counts as a young crash, and never retries at once."""
        delay = max(self.crashed(slot).delay_s, self.base_delay_s)
        self._due_at[slot] = self._clock() + delay
        return delay

    def cancel_all(self) -> None:
        """Stopping: nothing is respawned any more."""
        self._due_at.clear()
