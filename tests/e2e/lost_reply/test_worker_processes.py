"""The lost-reply matrix, writes of processes of their own: orphan recovery (requeue.lua) of a worker
SIGKILLed mid-job, a periodic entry's slot (periodic.lua), and the one-queue worker's BLMOVE wait
turn. Each case starts the worker it needs (behind the RESP proxy, tests/support/resp_proxy.py, or
straight on Redis), beside the module's own; docs/architecture.md, "What a lost reply can and cannot
cause", says what each fault may leave:

- requeue.lua, run by the worker behind the proxy for a SIGKILLed one's list: the job back on its
  queue once, its orphaning counted once, run again once (lost: the next pass finds the list empty;
  dropped: the next check requeues it).
- periodic.lua, from a worker with an entry firing every second: no slot runs twice; a slot whose
  reply was lost runs once (the ticker's retry finds the slot claimed).
- BLMOVE, the wait turn of a worker reading one queue: lost, the job waits on the worker's list
  until the reconcile puts it back; dropped, the next BLMOVE takes it. It runs once.
"""

from __future__ import annotations

import matrix_jobs
import pytest

from cogworker.store import keys
from tests.support import matrix
from tests.support.matrix import MODES, Stack
from tests.support.redis_server import wait_until
from tests.support.workers import Worker


@pytest.mark.parametrize("mode", MODES)
def test_requeue_of_a_dead_process(m: Stack, mode: str) -> None:
    """Orphan recovery (requeue.lua), run by the worker behind the proxy for a worker SIGKILLed
    mid-job: the job runs again once, its orphaning counted once."""
    tag = f"requeue-{mode}"
    queue = f"victim-{mode}"  # read by no worker but the victim, then its successor
    env = {**matrix.ENV, "COGWORKER_QUEUES": queue, "MATRIX_RECORD_URL": m.server.url}
    victim = m.workers.start(m.server.url, **env)
    jid = matrix_jobs.held.set(queue=queue).perform_async(tag)
    wait_until(lambda: m.ran(tag) == 1, timeout=20, message="the job running on the victim")
    identity = victim.identity()
    rule = m.arm(mode, script="requeue", arg=identity)
    victim.kill()
    # The successor starts while the victim is found dead, and is slow to call anyone dead itself:
    # the recovery under test is the one behind the proxy.
    successor = m.workers.start(m.server.url, **{**env, "COGWORKER_ORPHAN_THRESHOLD_S": "120"})
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.ran(tag) == 2, timeout=20, message="the requeued copy running")
    assert m.r.exists(keys.in_progress(identity)) == 0
    assert m.r.llen(keys.queue(queue)) == 0
    assert m.r.get(keys.orphanings(str(jid))) == "1"
    m.r.set(f"matrix:go:{tag}", 1)
    successor_list = keys.in_progress(successor.identity())
    wait_until(lambda: m.r.llen(successor_list) == 0, timeout=20, message="the copy acknowledged")
    assert successor.stop() == 0
    assert m.ran(tag) == 2


@pytest.mark.parametrize("mode", MODES)
def test_periodic_enqueue(m: Stack, mode: str) -> None:
    """periodic.lua claiming a slot and pushing its job, sent by a worker whose app has an entry
    firing every second: no slot runs twice, and a slot whose reply was lost still runs once."""
    m.r.delete("matrix:slot:none", *m.r.keys("matrix:slot:*"))
    rule = m.arm(mode, script="periodic", arg="enqueue")
    env = {**matrix.ENV, "COGWORKER_REQUIRE": "matrix_periodic", "COGWORKER_QUEUES": "periodic"}
    ticker = m.workers.start(m.proxy.url, **env, MATRIX_RECORD_URL=m.server.url)
    m.proxy.wait_fired(rule)
    # The slot faulted: the end of the claim key's name, the script's first key.
    faulted = int(next(f for f in m.proxy.faults if f.rule == rule.id).args[2].rsplit(b":", 1)[1])
    wait_until(lambda: len(m.r.keys("matrix:slot:*")) >= 2, timeout=20, message="two slots run")
    assert ticker.stop() == 0
    runs = {int(k.rsplit(":", 1)[1]): int(m.r.get(k) or 0) for k in m.r.keys("matrix:slot:*")}
    assert max(runs.values()) == 1, runs
    if mode == "lost":
        assert runs.get(faulted) == 1, (faulted, runs)
    wait_until(lambda: m.r.llen(keys.queue("periodic")) == 0, timeout=5, message="nothing left queued")


@pytest.fixture(scope="module")
def solo(stack: Stack) -> Worker:
    """A worker behind the proxy reading one queue: idle, it waits in a BLMOVE (a second at a time)."""
    env = {**matrix.ENV, "COGWORKER_QUEUES": "solo", "MATRIX_RECORD_URL": stack.server.url}
    worker = stack.workers.start(stack.proxy.url, **env)
    worker.identity()
    return worker


def blmoves(m: Stack) -> int:
    return sum(1 for _link, name, _scripts in list(m.proxy.forwarded) if name == "BLMOVE")


@pytest.mark.parametrize("mode", MODES)
def test_blmove_wait_turn(m: Stack, solo: Worker, mode: str) -> None:
    tag = f"blmove-{mode}"
    if mode == "lost":
        rule = m.proxy.lose_reply(command="BLMOVE", arg=keys.queue("solo"), reply_contains=tag)
        # A rule applies to commands sent after it: the BLMOVE already blocked passes untouched.
        sent = blmoves(m)
        wait_until(lambda: blmoves(m) > sent, timeout=10, message="a BLMOVE sent after the rule")
    else:
        rule = m.proxy.drop_command(command="BLMOVE", arg=keys.queue("solo"))
    matrix_jobs.mark.set(queue="solo").perform_async(tag)
    m.proxy.wait_fired(rule)
    solo_list = keys.in_progress(solo.identity())
    wait_until(lambda: m.ran(tag) == 1 and m.r.llen(solo_list) == 0 and m.r.llen(keys.queue("solo")) == 0,
               timeout=20, message="the job run, nothing left")  # fmt: skip
    assert m.ran(tag) == 1
