"""Which CPU a slot gets with COGWORKER_CPU_AFFINITY=spread (the pinning itself: the swarm e2e test)."""

from __future__ import annotations

from supervisor.forkserver.cpu_affinity import cpu_for_slot, pin_worker


def test_slots_take_the_allowed_cpus_in_order_and_wrap_round() -> None:
    allowed = {5, 1, 3}
    assert [cpu_for_slot(slot, allowed) for slot in range(5)] == [1, 3, 5, 1, 3]


def test_none_pins_nothing() -> None:
    assert pin_worker("none", 0) is None
