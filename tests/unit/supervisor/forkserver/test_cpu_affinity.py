"""Which CPU a slot gets with COGWORKER_CPU_AFFINITY=spread or auto, and when auto pins nothing (the
pinning itself, and auto's probe: the swarm e2e test)."""

from __future__ import annotations

import os

from supervisor.forkserver.cpu_affinity import cpu_for_slot, pin_worker


def test_slots_take_the_allowed_cpus_in_order_and_wrap_round() -> None:
    allowed = {5, 1, 3}
    assert [cpu_for_slot(slot, allowed) for slot in range(5)] == [1, 3, 5, 1, 3]


def test_none_and_auto_without_a_worker_per_cpu_pin_nothing() -> None:
    before = os.sched_getaffinity(0)
    assert pin_worker("none", 0, len(before)) is None
    assert pin_worker("auto", 0, len(before) + 1) is None
    assert pin_worker("auto", 0, max(len(before) - 1, 1) if len(before) > 1 else 2) is None
    assert os.sched_getaffinity(0) == before
