"""Restart plans: which slot a restart replaces next, phased or all at once, and when it is done."""

from __future__ import annotations

from supervisor.children.child import Child
from supervisor.children.roster import Roster
from supervisor.restart_policy.restart_plan import RestartPlan
from supervisor.wire.child_lines import Message


def make(pid: int, slot: int, *, generation: int = 0) -> Child:
    return Child(pid, slot, f"h:{pid}:n", -1, started_at=0.0, last_heard=0.0, generation=generation)


def ready(child: Child) -> Child:
    child.apply(Message("booted"), 0)
    child.apply(Message("ready"), 0)
    return child


def nothing_spawning(slot: int) -> bool:
    return False


def test_phased_plan_replaces_one_old_slot_at_a_time() -> None:
    roster = Roster(3)
    for slot in range(3):
        roster.add(ready(make(10 + slot, slot)), current=True)
    plan = RestartPlan(generation=1, phased=True, pending=[0, 1, 2])
    assert plan.next_slot(roster, nothing_spawning) == 0
    assert plan.next_slot(roster, nothing_spawning) is None  # waiting for slot 0's replacement
    new0 = ready(make(20, 0, generation=1))
    roster.add(new0, current=False)
    roster.promote(new0)
    plan.slot_done(0)
    # Slot 1 crashed and was respawned after the restart began: it already runs new code.
    roster.pop(11)
    roster.add(ready(make(21, 1, generation=1)), current=True)
    assert plan.next_slot(roster, nothing_spawning) == 2
    assert not plan.finished(roster)
    plan.slot_done(2)
    assert plan.next_slot(roster, nothing_spawning) is None and plan.finished(roster)


def test_phased_plan_waits_for_a_memory_replacement_in_flight() -> None:
    roster = Roster(1)
    roster.add(ready(make(1, 0)), current=True)
    mem = make(2, 0)
    mem.replaces = 1
    roster.add(mem, current=False)
    plan = RestartPlan(generation=1, phased=True, pending=[0])
    assert plan.next_slot(roster, nothing_spawning) is None and plan.pending == [0]
    mem.abandoned = True
    assert plan.next_slot(roster, nothing_spawning) == 0


def test_phased_plan_waits_for_a_spawn_in_flight_then_replaces_what_it_forked() -> None:
    # A respawn asked of the old fork server just before the restart began: the slot is looked at
    # once the answer is in, and the child it brought (old code) is replaced like any other.
    roster = Roster(1)
    plan = RestartPlan(generation=1, phased=True, pending=[0])
    assert plan.next_slot(roster, lambda slot: slot == 0) is None and plan.pending == [0]
    roster.add(ready(make(1, 0, generation=0)), current=True)
    assert plan.next_slot(roster, nothing_spawning) == 0


def test_all_at_once_plan_finishes_when_every_slot_is_new_and_ready() -> None:
    roster = Roster(2)
    plan = RestartPlan(generation=1, phased=False)
    roster.add(ready(make(1, 0, generation=1)), current=True)
    assert not plan.finished(roster)
    late = make(2, 1, generation=1)
    roster.add(late, current=True)
    assert not plan.finished(roster)
    ready(late)
    assert plan.finished(roster)
