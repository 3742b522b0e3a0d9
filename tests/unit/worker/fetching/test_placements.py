"""Which partition each fetched copy came from (worker/fetching/placements.py)."""

from __future__ import annotations

from cogworker.store.shards import Partition
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.placements import Placements


def test_copies_of_one_payload_are_placed_oldest_first() -> None:
    placements = Placements()
    a, b = Partition("q", 0), Partition("q", 1)
    placements.add([Work("q", "x", partition=a), Work("q", "y", partition=b), Work("q", "x", partition=b)])
    assert placements.assign(["x", "x", "y", "x"]) == [a, b, b, None]  # nothing taken
    assert placements.peek("x") == a
    assert placements.take("x") == a
    assert placements.take("x") == b
    assert placements.take("x") is None
    assert len(placements) == 1


def test_a_work_without_a_partition_is_not_placed() -> None:
    placements = Placements()
    placements.add([Work("q", "x")])  # the one-slot layout's
    assert placements.peek("x") is None and len(placements) == 0
