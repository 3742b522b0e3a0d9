"""Orphan recovery's reading of a requeued job in the Sidekiq mode: a Sidekiq Pro `bid` names no batch
of cogworker's, so requeue.lua is given no batch or member keys for it; cogworker's own bids still are."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cogworker import codec
from cogworker.store import job_keys, keys

PRO_BID = "kQz2-Vb_9XmA1w"
OWN_BID = "0123456789abcdef01234567"


@pytest.fixture
def mode() -> Iterator[None]:
    keys.use_prefix("cw:", "", "6")
    yield
    keys.use_prefix(keys.DEFAULT_PREFIX)


def raw(bid: str) -> str:
    return codec.dumps({"class": "HardJob", "jid": "j" + bid[:3], "queue": "default", "args": [], "bid": bid})


def test_a_foreign_bid_declares_no_batch_in_the_mode(mode: None) -> None:
    assert job_keys.member_batch(raw(PRO_BID)) is None
    assert job_keys.member_batch(raw(OWN_BID)) == OWN_BID
    declared = job_keys.Declared()
    declared.add_jobs([raw(PRO_BID), raw(OWN_BID)], "default")
    assert declared.bids == {OWN_BID}
    assert [member["bid"] for member in declared.members.values()] == [OWN_BID]


def test_every_bid_declares_its_batch_with_the_mode_off() -> None:
    assert job_keys.member_batch(raw(PRO_BID)) == PRO_BID
    declared = job_keys.Declared()
    declared.add_jobs([raw(PRO_BID)], "default")
    assert declared.bids == {PRO_BID} and len(declared.members) == 1
