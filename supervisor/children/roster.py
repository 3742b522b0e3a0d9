"""The roster: every live child, and which one is each slot's current child.

A slot has at most one current child. During a phased restart (or a memory restart) a slot briefly has
a second, a replacement, which becomes current when it reports ready; the old one is then retired
(asked to stop) and, no longer current, its exit respawns nothing. Ready capacity counts only current,
ready, unretired children, so promoting a replacement and retiring the old child keeps it at N.
"""

from __future__ import annotations

from collections.abc import Iterator

from supervisor.children.child import Child, Phase


class Roster:
    def __init__(self, count: int) -> None:
        self.count = count
        self._children: dict[int, Child] = {}
        self._current: dict[int, int] = {}  # slot -> pid

    def __iter__(self) -> Iterator[Child]:
        return iter(list(self._children.values()))

    def __len__(self) -> int:
        return len(self._children)

    def add(self, child: Child, *, current: bool) -> None:
        self._children[child.pid] = child
        if current:
            self._current[child.slot] = child.pid

    def get(self, pid: int) -> Child | None:
        return self._children.get(pid)

    def pop(self, pid: int) -> tuple[Child | None, bool]:
        """Remove a child that exited; returns it and whether it was its slot's current child."""
        child = self._children.pop(pid, None)
        if child is None:
            return None, False
        was_current = self._current.get(child.slot) == pid
        if was_current:
            del self._current[child.slot]
        return child, was_current

    def current(self, slot: int) -> Child | None:
        pid = self._current.get(slot)
        return self._children.get(pid) if pid is not None else None

    def is_current(self, child: Child) -> bool:
        return self._current.get(child.slot) == child.pid

    def replacement_for(self, slot: int) -> Child | None:
        for child in self._children.values():
            if child.slot == slot and child.replaces is not None and not child.abandoned:
                return child
        return None

    def promote(self, replacement: Child) -> Child | None:
        """Make `replacement` its slot's current child; returns the child it replaces, if still there."""
        old = self.current(replacement.slot)
        replacement.replaces = None
        replacement.ready_deadline = None
        self._current[replacement.slot] = replacement.pid
        return old if old is not replacement else None

    def vacant_slots(self) -> list[int]:
        return [slot for slot in range(self.count) if slot not in self._current]

    def currents(self) -> list[Child]:
        return [c for slot in range(self.count) if (c := self.current(slot)) is not None]

    @property
    def ready(self) -> int:
        """Ready capacity: current children fetching jobs and not on their way out."""
        return sum(1 for c in self.currents() if c.phase is Phase.READY and c.retire_reason is None)
