"""The lost-reply matrix for a periodic entry's run history and its pause: periodic.lua records each
slot it decides in `periodic:runs:<name>` with the slot's claim, so when its reply is lost after it
ran, or it never ran, a slot is still recorded at most once, and every slot that ran is recorded as
enqueued with its jid. A paused entry's script ("paused" mode) under the same faults records each
slot once as paused and enqueues nothing.

A worker behind the RESP proxy (tests/support/resp_proxy.py) runs an entry firing every second
(tests/apps/matrix_periodic.py, which counts each slot's runs straight in Redis).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cogworker.store import keys
from tests.support import matrix
from tests.support.matrix import MODES, Stack
from tests.support.redis_server import wait_until

ENTRY = "matrix_periodic.tick"
ENV = {**matrix.ENV, "COGWORKER_REQUIRE": "matrix_periodic", "COGWORKER_QUEUES": "periodic"}


def history(m: Stack) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in m.r.lrange(keys.periodic_runs(ENTRY), 0, -1)]


def faulted_slot(m: Stack, rule_id: int) -> int:
    """The slot a fault hit: the end of the claim key's name, the script's first key."""
    return int(next(f for f in m.proxy.faults if f.rule == rule_id).args[2].rsplit(b":", 1)[1])


def fresh(m: Stack) -> None:
    m.r.delete(
        keys.periodic_runs(ENTRY), keys.PERIODIC_PAUSED, "matrix:slot:none", *m.r.keys("matrix:slot:*")
    )


@pytest.mark.parametrize("mode", MODES)
def test_each_slot_is_recorded_once_and_every_run_as_enqueued(m: Stack, mode: str) -> None:
    fresh(m)
    rule = m.arm(mode, script="periodic", arg="enqueue")
    ticker = m.workers.start(m.proxy.url, **ENV, MATRIX_RECORD_URL=m.server.url)
    m.proxy.wait_fired(rule)
    faulted = faulted_slot(m, rule.id)
    wait_until(
        lambda: sum(1 for run in history(m) if run["slot"] > faulted) >= 2,
        timeout=20,
        message="two slots after",
    )
    assert ticker.stop() == 0
    wait_until(lambda: m.r.llen(keys.queue("periodic")) == 0, timeout=10, message="nothing left queued")
    runs = history(m)
    slots = [run["slot"] for run in runs]
    assert len(slots) == len(set(slots)), runs
    enqueued = {int(run["slot"]): run["jid"] for run in runs if run["outcome"] == "enqueued"}
    ran = {int(k.rsplit(":", 1)[1]) for k in m.r.keys("matrix:slot:*")}
    assert ran <= set(enqueued), (ran, runs)
    if mode == "lost":  # it ran: recorded once, as the run it pushed
        assert faulted in enqueued and faulted in ran
    for slot, jid in enqueued.items():
        assert m.r.get(keys.periodic_slot(ENTRY, slot)) == jid


@pytest.mark.parametrize("mode", MODES)
def test_a_paused_entry_records_each_slot_once_and_runs_none(m: Stack, mode: str) -> None:
    fresh(m)
    m.r.sadd(keys.PERIODIC_PAUSED, ENTRY)
    # Every call names the paused set: skip the worker's first, its baseline look at the entry.
    rule = m.arm(mode, script="periodic", skip=1)
    ticker = m.workers.start(m.proxy.url, **ENV, MATRIX_RECORD_URL=m.server.url)
    m.proxy.wait_fired(rule)
    faulted = faulted_slot(m, rule.id)
    wait_until(
        lambda: sum(1 for run in history(m) if run["slot"] > faulted) >= 2,
        timeout=20,
        message="two slots after",
    )
    assert ticker.stop() == 0
    runs = history(m)
    slots = [run["slot"] for run in runs]
    assert len(slots) == len(set(slots)), runs
    assert {run["outcome"] for run in runs} == {"paused"}
    if mode == "lost":
        assert faulted in slots
    assert m.r.keys("matrix:slot:*") == [] and m.r.llen(keys.queue("periodic")) == 0
    m.r.delete(keys.PERIODIC_PAUSED)
