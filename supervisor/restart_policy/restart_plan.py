"""The restart plan: which slots still run code from before the restart, and which one is in flight.

Every child remembers the generation it was forked in; a restart opens a new generation, and is done
when every slot's current child is of that generation and ready. Phased (the default), slots are
replaced one at a time: a replacement is forked, and only when it reports ready is the old child told
to stop, so ready capacity never drops below N. Not phased, every old child is stopped at once and
its slot forked again as it exits (a short dip in capacity, traded for a faster restart).

A slot that already runs new code (respawned after the restart began) is skipped; so is a slot whose
child is gone and waiting for its respawn, which forks new code anyway. A slot with a spawn in flight
(a memory replacement, or a respawn asked of the old fork server) is waited for, then looked at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from supervisor.children.child import Phase
from supervisor.children.roster import Roster


@dataclass(slots=True)
class RestartPlan:
    generation: int
    phased: bool
    pending: list[int] = field(default_factory=list)  # slots not yet looked at (phased)
    in_flight: int | None = None  # the slot whose replacement we wait for (phased)

    def next_slot(self, roster: Roster, spawning: Callable[[int], bool]) -> int | None:
        """The next slot to replace now, or None (wait for a replacement in flight, or all done).
        `spawning(slot)`: a fork server has been asked for a child for that slot and not answered."""
        if self.in_flight is not None:
            return None
        while self.pending:
            slot = self.pending[0]
            if roster.replacement_for(slot) is not None or spawning(slot):
                return None  # a memory replacement or a spawn is in flight there: wait, look again
            current = roster.current(slot)
            self.pending.pop(0)
            if current is None or current.generation >= self.generation or current.stopping:
                continue
            self.in_flight = slot
            return slot
        return None

    def slot_done(self, slot: int) -> None:
        if self.in_flight == slot:
            self.in_flight = None

    def finished(self, roster: Roster) -> bool:
        """Phased: every slot was looked at and the last replacement is ready. Not phased: every
        slot's current child serves new code and is ready."""
        if self.phased:
            return not self.pending and self.in_flight is None
        for slot in range(roster.count):
            current = roster.current(slot)
            if current is None or current.generation < self.generation or current.phase is not Phase.READY:
                return False
        return True
