"""Which partition each fetched copy came from (worker/fetching/placements.py), and which payloads the
sharded layout files in dead unrun (worker/settling/unsharded.py)."""

from __future__ import annotations

from cogworker import codec
from cogworker.store.shards import Partition
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.placements import Placements
from cogworker.worker.settling import unsharded


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


def test_only_chain_steps_with_a_group_to_come_are_refused() -> None:
    plain = codec.dumps({"class": "m.f", "jid": "j1", "args": ["chain"], "queue": "q"})
    assert unsharded.refusal(plain) is None  # the word in an argument is not the field
    assert unsharded.refusal('not json with "chain"') is None  # an unreadable payload is the processor's
    for field in ("bid", "bcb"):  # batches run in the sharded layout (store/batch_ends.py)
        assert unsharded.refusal(codec.dumps({"class": "m.f", "jid": "j3", "queue": "q", field: "b"})) is None
    grouped = {"id": "x", "next": [{"group": []}]}
    for field, feature, value in (("chain", "chain groups", grouped),):
        filing = unsharded.refusal(codec.dumps({"class": "m.f", "jid": "j2", "queue": "q", field: value}))
        assert filing is not None and filing.dead
        assert filing.payload["error_class"] == "cogworker.NotShardedYet"
        assert feature in filing.payload["error_message"] and filing.payload[field] == value
    # A chain of plain steps runs in the sharded layout (worker/settling/chain_sharded.py).
    plain_step = {"id": "x", "next": [{"class": "m.g", "queue": "q", "jid": "j3"}]}
    assert (
        unsharded.refusal(codec.dumps({"class": "m.f", "jid": "j2", "queue": "q", "chain": plain_step}))
        is None
    )
