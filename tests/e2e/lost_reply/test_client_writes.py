"""The lost-reply matrix, job API side: each write the app's process makes (a push, a scheduled push,
a unique push and its claim, push_bulk, a batch's member, creation, registration and end, a chain's
start, a cancel, a limiter's acquire and release outside a job), its reply lost after it ran or the
command dropped before it ran, by the RESP proxy between this test's job API and a real Redis. A
worker runs the jobs straight against Redis, so only the app's side meets the fault.

What each case may leave (docs/architecture.md, "What a lost reply can and cannot cause"):

- lost: the write happened, so the push returns its jid (it finds its jobs written) and the job
  runs once; what the client chain took for it (its unique claim, its batch membership) stands
  until its run ends.
- dropped: nothing was written and the push raises; what the chain took is given back (the claim
  is free, the batch doesn't wait for the job), so pushing again runs it once.
- a unique claim's own write (SET NX): either way nothing is pushed, the push raises and the claim
  is free, so pushing again runs the job once.
- a cancel is answered, or raises and is called again: the job never runs, and is counted
  cancelled once.
- a limiter's acquire raises (lost: its token holds the slot until its lease ends; dropped: nothing
  held); a release that fails is logged, and a lost or dropped one frees the slot at once or at the
  lease's end, never beyond the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import matrix_jobs
import pytest
import redis

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support import matrix
from tests.support.matrix import MODES, Stack
from tests.support.redis_server import wait_until

# The commands that write a job: a push's pipeline, a scheduled push, a script writing a batch.
JOB_WRITES = ("LPUSH", "ZADD", "EVALSHA", "EVAL")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with matrix.stack(worker_through_proxy=False) as made:
        yield made


@pytest.fixture
def m(stack: Stack) -> Iterator[Stack]:
    """One case: the job API talks through the proxy; the worker runs the jobs past it."""
    # A block's lease is short, so a batch whose block lost its creation's reply, or its end, lapses
    # within the case (what a dead app's hold does, at COGWORKER_BATCH_HOLD_LEASE_S).
    cw_client.configure(load_settings(redis_url=stack.proxy.url, redis_timeout_s=2, batch_hold_lease_s=2))
    stack.proxy.clear()
    yield stack
    stack.end_case()


def pushed(m: Stack, mode: str, push: Callable[[], Any]) -> Any:
    """Run `push` with its job write faulted: a lost reply returns (the push finds its job written);
    a dropped write raises."""
    if mode == "lost":
        return push()
    with pytest.raises(redis.ConnectionError):
        push()
    return None


@pytest.mark.parametrize("mode", MODES)
def test_push(m: Stack, mode: str) -> None:
    tag = f"push-{mode}"
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)
    jid = pushed(m, mode, lambda: matrix_jobs.mark.perform_async(tag))
    m.proxy.wait_fired(rule)
    if mode == "lost":
        assert isinstance(jid, str)
        m.wait_ran(tag)
        return
    wait_until(m.settled, timeout=10, message="nothing written")
    assert m.ran(tag) == 0
    matrix_jobs.mark.perform_async(tag)  # pushed again: it runs once
    m.wait_ran(tag)


@pytest.mark.parametrize("mode", MODES)
def test_scheduled_push(m: Stack, mode: str) -> None:
    tag = f"scheduled-{mode}"
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)
    pushed(m, mode, lambda: matrix_jobs.mark.perform_in(0.2, tag))
    m.proxy.wait_fired(rule)
    if mode == "dropped":
        assert m.r.zcard(keys.SCHEDULE) == 0
        matrix_jobs.mark.perform_in(0.2, tag)
    m.wait_ran(tag)


@pytest.mark.parametrize("mode", MODES)
def test_unique_push(m: Stack, mode: str) -> None:
    tag = f"unique-{mode}"
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)
    pushed(m, mode, lambda: matrix_jobs.unique_mark.perform_async(tag))
    m.proxy.wait_fired(rule)
    if mode == "dropped":
        assert m.r.keys(keys.unique("*")) == []  # given back: the push can be made again
        assert matrix_jobs.unique_mark.perform_async(tag) is not None
    m.wait_ran(tag)  # settled: the claim released by the run


@pytest.mark.parametrize("mode", MODES)
def test_unique_claim(m: Stack, mode: str) -> None:
    """The claim's own write (SET NX PX), before the job's: either way nothing is pushed, the push
    raises and the claim is free again, so the push made again runs the job once."""
    tag = f"claim-{mode}"
    rule = m.arm(mode, command="SET", arg=keys.unique(""))
    with pytest.raises(redis.ConnectionError):
        matrix_jobs.unique_mark.perform_async(tag)
    m.proxy.wait_fired(rule)
    assert m.r.keys(keys.unique("*")) == []
    assert matrix_jobs.unique_mark.perform_async(tag) is not None
    m.wait_ran(tag)


@pytest.mark.parametrize("mode", MODES)
def test_push_bulk(m: Stack, mode: str) -> None:
    tag = f"bulk-{mode}"
    tags = [f"{tag}-{i}" for i in range(3)]
    rule = m.arm(mode, command=JOB_WRITES, arg=tags[0])
    pushed(m, mode, lambda: cogworker.push_bulk(matrix_jobs.unique_mark, [(t,) for t in tags]))
    m.proxy.wait_fired(rule)
    if mode == "dropped":
        assert m.r.keys(keys.unique("*")) == []  # every claim given back
        cogworker.push_bulk(matrix_jobs.unique_mark, [(t,) for t in tags])
    for t in tags:
        m.wait_ran(t)


@pytest.mark.parametrize("mode", MODES)
def test_batch_member_push(m: Stack, mode: str) -> None:
    tag, done = f"member-{mode}", f"{mode}-member-done"  # the member's tag is not in the callback's
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)

    def push_in_batch() -> str:
        with cogworker.batch(on_success=matrix_jobs.callback, callback_args=(done,)) as b:
            matrix_jobs.mark.perform_async(tag)
        return b.bid

    bid = pushed(m, mode, push_in_batch)
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.callbacks(done), timeout=20, message="the callback")
    m.wait_ran(tag, times=1 if mode == "lost" else 0)
    assert m.callbacks(done) == 1
    if bid is not None:
        status = cogworker.batch_status(bid, conn=m.r)
        assert status is not None and status.complete and status.done == 1 and status.pending == 0


@pytest.mark.parametrize("mode", MODES)
def test_chain_start(m: Stack, mode: str) -> None:
    tag = f"chain-{mode}"
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)
    chain = pushed(m, mode, lambda: cogworker.chain(*(matrix_jobs.step.s(tag, i) for i in range(2))))
    m.proxy.wait_fired(rule)
    if mode == "dropped":
        chain = cogworker.chain(*(matrix_jobs.step.s(tag, i) for i in range(2)))
    assert chain is not None
    wait_until(lambda: (cogworker.chain_status(chain.id) or {}).get("state") == "complete", timeout=20,
               message="the chain complete")  # fmt: skip
    for i in range(2):
        m.wait_ran(f"{tag}:{i}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["record", "remove"])
def test_cancel(m: Stack, mode: str, op: str) -> None:
    tag = f"cancel-{op}-{mode}"
    cancelled = m.stat(keys.stat("cancelled"))
    jid = matrix_jobs.mark.perform_in(60, tag)
    assert jid is not None
    rule = m.arm(mode, script="cancel", arg=op)
    try:
        outcome = cogworker.cancel(jid)
    except redis.ConnectionError:
        outcome = cogworker.cancel(jid)  # what a caller does with an error: ask again
    m.proxy.wait_fired(rule)
    assert outcome.case in ("scheduled", "finished", "not_found"), outcome
    assert m.r.zcard(keys.SCHEDULE) == 0
    if outcome.case != "not_found":  # a job found nowhere keeps its record entry, by design
        assert m.r.zscore(keys.CANCELS, jid) is None  # taken off the record with the job
    assert m.stat(keys.stat("cancelled")) == cancelled + 1
    assert m.ran(tag) == 0


def holders(m: Stack) -> int:
    return int(m.r.zcard(keys.limiter("concurrent", "matrix")))


@pytest.mark.parametrize("mode", MODES)
def test_limiter_acquire(m: Stack, mode: str) -> None:
    rule = m.arm(mode, script="limit_concurrent", arg="acquire")
    with pytest.raises(redis.ConnectionError), matrix_jobs.ONE_AT_A_TIME:
        pass
    m.proxy.wait_fired(rule)
    assert holders(m) == (1 if mode == "lost" else 0)  # a lost acquire's token holds its slot
    wait_until(lambda: holders(m) == 0, timeout=10, message="the lease to end")
    with matrix_jobs.ONE_AT_A_TIME:
        assert holders(m) == 1
    assert holders(m) == 0


@pytest.mark.parametrize("mode", MODES)
def test_limiter_release(m: Stack, mode: str) -> None:
    rule = m.arm(mode, script="limit_concurrent", arg="release")
    with matrix_jobs.ONE_AT_A_TIME:  # a failed release is logged, never raised
        assert holders(m) == 1
    m.proxy.wait_fired(rule)
    assert holders(m) == (0 if mode == "lost" else 1)
    wait_until(lambda: holders(m) == 0, timeout=10, message="the slot back, at the latest at the lease's end")
    with matrix_jobs.ONE_AT_A_TIME:  # the slot is back, at the latest when the lease ended
        assert holders(m) == 1


@pytest.mark.parametrize(("op", "mode"), [(op, mode) for op in ("new", "add", "close") for mode in MODES])
def test_batch_block(m: Stack, op: str, mode: str) -> None:
    """A batch's own writes: its creation (batch_open.lua "new"), a member's registration ("add"),
    the block's end (batch_close.lua). An error raised out of the block leaves the batch decided once
    its pushed members end, and a batch whose creation or end lost its reply decides once its lease
    lapses: the callback runs once, never twice, and never before the member ran."""
    tag, done = f"block-{op}-{mode}", f"{mode}-{op}-block-done"
    # The block's batch_open.lua calls come in order, "new" then "add" (a substring match on "add"
    # could meet a hex id).
    rule = (
        m.arm(mode, script="batch_close")
        if op == "close"
        else m.arm(mode, script="batch_open", skip=1 if op == "add" else 0)
    )
    before = set(m.r.zrange(keys.BATCHES, 0, -1))
    member: list[str] = []
    try:
        with cogworker.batch(on_success=matrix_jobs.callback, callback_args=(done,)):
            matrix_jobs.mark.perform_async(tag)
            member.append(tag)
    except redis.ConnectionError:
        pass
    m.proxy.wait_fired(rule)
    m.wait_ran(tag, times=len(member))
    made = set(m.r.zrange(keys.BATCHES, 0, -1)) - before
    if made:
        wait_until(lambda: m.callbacks(done), timeout=20, message="the callback")
    wait_until(m.settled, timeout=20, message="everything settled")
    assert m.callbacks(done) == len(made)
    assert [bid for bid in made if not m.r.hexists(keys.batch(bid), "completed_at")] == []
