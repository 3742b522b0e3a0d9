"""The view of the swarm the hooks are given: its state, and the one line that sums it up."""

from __future__ import annotations

from supervisor.integrations.hooks import SwarmView


def test_view_names_the_state_and_sums_up_in_one_line() -> None:
    view = SwarmView(4, 4, 3, 5, 40, 120, 2, 1, False, False, False, None)
    assert view.state == "degraded"
    assert view.summary() == "degraded: 3/4 ready, 5/40 busy, 120 processed, 2 failed, redis down in 1"


def test_the_view_counts_replacements_for_stuck_jobs_only_when_there_are_some() -> None:
    view = SwarmView(2, 2, 2, 0, 20, 5, 1, 0, False, False, False, None, stuck_replaced=1)
    assert (
        view.summary()
        == "running: 2/2 ready, 0/20 busy, 5 processed, 1 failed, redis up, 1 replaced for stuck jobs"
    )
