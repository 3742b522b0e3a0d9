"""The lost-reply matrix, worker side: each write a `cogworker run` worker makes (its Lua scripts and
its MULTI), under the two faults of a command on the wire, injected by the RESP proxy
(tests/support/resp_proxy.py) between the worker and a real Redis:

- lost: the write ran, its reply never came back (the worker's connection breaks);
- dropped: the write never reached Redis (the connection breaks before it is sent).

One worker and one Redis serve the whole module; every case arms one fault on one write, pushes
its jobs (straight to Redis, past the proxy), waits for the fault to fire and for everything to
settle, then checks what docs/architecture.md ("What a lost reply can and cannot cause") allows:
every job ran exactly as often as the list below says, nothing is left on a list or in a set, counters
counted once, callbacks ran once, claims and limiter slots are free again. The jobs record their
runs on a connection of their own (tests/apps/matrix_jobs.py), so no fault touches the record.

Each case, the write it arms a fault on (the script, or the command of a MULTI), the path that
sends it, and what both faults may leave (the same for both unless said):

- fetch.lua moving a job (fetcher, worker/fetching/reliable_fetch.py): lost, the reconcile puts it back on
  its queue; dropped, the next fetch moves it. It runs once, counted processed once.
- fetch.lua carrying an ack: the acks are sent again with the next fetch; counted once.
- settle.lua filing a retry (job thread, worker/settling/settle.py; kept and retried by the fetch loop): one
  retry entry, one more run, `stat:failed` counted once.
- settle.lua filing in dead: one dead entry, one death notice, counted once; a unique job's claim
  released.
- file_unsettled.lua (poller, a handed-over dead filing): one dead entry, one death notice.
- quarantine.lua (the key guard moving a wrong-type queue key aside): moved once; the queue's jobs
  run.
- MULTI SET/PUBLISH of a result (Settler.after_result): kept and written again; the same record.
- owned_delete.lua releasing a unique claim (api/unique.py; deferred and retried): the claim is free.
- chain_ack.lua (worker/settling/chain_step.py, retried on the job thread): each step runs once, the chain
  completes.
- batch_ack.lua (worker/settling/batch_settle.py, kept and retried): the member counts once, the callback
  runs once.
- batch_filed.lua around settle.lua (a member filed in dead): counted dead once, on_death and
  on_complete once each, one dead entry and notice.
- graduate_batch.lua and bury.lua (poller): a scheduled job pushed once; an unusable entry buried once.
- heartbeat.lua: the next beat writes again; the worker is never taken for dead.
- reconcile.lua, after a lost fetch reply: the job goes back once, by the next reconcile if dropped.
- limit_concurrent.lua acquire (a job's `limit=`): the try fails and is retried (its body never ran);
  a lost reply's token holds its slot until the lease ends, never longer.
- limit_concurrent.lua release (api/limit_release.py's thread): lost, released; dropped, the slot
  comes back when its lease ends. Never early: the limit holds.
"""

from __future__ import annotations

import json
import time

import matrix_jobs
import pytest

import cogworker
from cogworker.api import client as cw_client
from cogworker.store import keys
from cogworker.store.locks import unique_digest
from tests.support.matrix import MODES, Stack
from tests.support.redis_server import wait_until


@pytest.mark.parametrize("mode", MODES)
def test_fetch_moving_a_job(m: Stack, mode: str) -> None:
    processed = m.stat(keys.STAT_PROCESSED)
    tag = f"fetch-{mode}"
    # A lost reply is armed on the fetch that moves this job; a drop on the next fetch (whatever it
    # carries: its command names no job).
    rule = m.arm(mode, script="fetch", reply_contains=tag) if mode == "lost" else m.arm(mode, script="fetch")
    matrix_jobs.mark.perform_async(tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)
    assert m.stat(keys.STAT_PROCESSED) == processed + 1


@pytest.mark.parametrize("mode", MODES)
def test_fetch_carrying_an_ack(m: Stack, mode: str) -> None:
    processed = m.stat(keys.STAT_PROCESSED)
    tag = f"ack-{mode}"
    rule = m.arm(mode, script="fetch", arg=tag)  # the fetch whose ARGV holds the job's ack
    matrix_jobs.mark.perform_async(tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)
    assert m.stat(keys.STAT_PROCESSED) == processed + 1  # an ack made twice counts once


@pytest.mark.parametrize("mode", MODES)
def test_settle_filing_a_retry(m: Stack, mode: str) -> None:
    failed = m.stat(keys.STAT_FAILED)
    tag = f"retry-{mode}"
    rule = m.arm(mode, script="settle", arg=tag)
    matrix_jobs.flaky.perform_async(tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag, times=2)  # the failing run and its one retry, no third run
    assert m.stat(keys.STAT_FAILED) == failed + 1
    assert m.dead_entries(tag) == []


@pytest.mark.parametrize("mode", MODES)
def test_settle_filing_in_dead(m: Stack, mode: str) -> None:
    failed = m.stat(keys.STAT_FAILED)
    tag = f"dead-{mode}"
    rule = m.arm(mode, script="settle", arg=tag)
    jid = matrix_jobs.dies.perform_async(tag)
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.dead_entries(tag), timeout=20, message="the dead entry")
    m.wait_ran(tag)
    assert [e["jid"] for e in m.dead_entries(tag)] == [jid]
    assert len(m.notices(tag)) == 1
    assert m.stat(keys.STAT_FAILED) == failed + 1


@pytest.mark.parametrize("mode", MODES)
def test_unique_claim_release(m: Stack, mode: str) -> None:
    tag = f"unique-{mode}"
    rule = m.arm(mode, script="owned_delete")
    matrix_jobs.unique_mark.perform_async(tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)  # settled: no unique claim left
    assert matrix_jobs.unique_mark.perform_async(tag) is not None  # the claim is free again
    m.wait_ran(tag, times=2)


@pytest.mark.parametrize("mode", MODES)
def test_settle_filing_a_unique_job_in_dead(m: Stack, mode: str) -> None:
    tag = f"unique-dead-{mode}"
    rule = m.arm(mode, script="settle", arg=tag)
    jid = matrix_jobs.unique_dies.perform_async(tag)
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.dead_entries(tag), timeout=20, message="the dead entry")
    m.wait_ran(tag)  # settled: its claim released with the filing
    assert [e["jid"] for e in m.dead_entries(tag)] == [jid]


@pytest.mark.parametrize("mode", MODES)
def test_file_unsettled_in_dead(m: Stack, mode: str) -> None:
    """file_unsettled.lua, the poller filing a record a stopping process handed over (a dead
    filing of a unique job): one dead entry, one death notice, and its unique claim released, also
    when the call that filed it lost its reply (the next poll finds it filed)."""
    tag = f"unsettled-{mode}"
    name, options = "matrix_jobs.unique_dies", {"unique": "until_executed"}
    job = cw_client.build_job(name, [tag], {}, queue="default", options=options, at=None)
    job |= {"error_class": "RuntimeError", "error_message": tag}
    claim = keys.unique(unique_digest(job))
    m.r.set(claim, job["jid"])  # held as a push of the job holds it
    rule = m.arm(mode, script="file_unsettled", arg=tag)
    m.r.rpush(keys.UNSETTLED, json.dumps({"set": keys.DEAD, "score": time.time(), "payload": job}))
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.r.llen(keys.UNSETTLED) == 0 and m.dead_entries(tag), timeout=20, message="filed")
    assert [e["jid"] for e in m.dead_entries(tag)] == [job["jid"]]
    assert len(m.notices(tag)) == 1
    wait_until(lambda: m.r.get(claim) is None, timeout=20, message="the unique claim released")


@pytest.mark.parametrize("mode", MODES)
def test_result_write(m: Stack, mode: str) -> None:
    tag = f"result-{mode}"
    # The result is one MULTI: a lost reply is EXEC's (it ran); a drop is the SET's (MULTI discarded).
    rule = m.arm(mode, command="EXEC") if mode == "lost" else m.arm(mode, command="SET", arg="result:")
    jid = matrix_jobs.kept.perform_async(tag)
    m.proxy.wait_fired(rule)
    assert cogworker.result(jid, timeout=20) == f"result of {tag}"
    m.wait_ran(tag)


@pytest.mark.parametrize("mode", MODES)
def test_chain_step_ack(m: Stack, mode: str) -> None:
    tag = f"chain-{mode}"
    rule = m.arm(mode, script="chain_ack", arg=tag)
    chain = cogworker.chain(*(matrix_jobs.step.s(tag, i) for i in range(3)))
    assert chain is not None
    m.proxy.wait_fired(rule)
    wait_until(lambda: (cogworker.chain_status(chain.id) or {}).get("state") == "complete", timeout=20,
               message="the chain complete")  # fmt: skip
    for i in range(3):
        m.wait_ran(f"{tag}:{i}")


@pytest.mark.parametrize("mode", MODES)
def test_batch_member_ack(m: Stack, mode: str) -> None:
    tag = f"member-{mode}"
    rule = m.arm(mode, script="batch_ack", arg=tag)
    # One member: its ack is the one that decides the batch and pushes the callback.
    with cogworker.batch(on_success=matrix_jobs.callback, callback_args=(f"cb-{tag}",)) as b:
        matrix_jobs.mark.perform_async(tag)
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.callbacks(f"cb-{tag}"), timeout=20, message="the callback")
    m.wait_ran(tag)
    status = cogworker.batch_status(b.bid)
    assert status is not None and status.complete and status.pending == 0 and status.done == 1
    assert m.callbacks(f"cb-{tag}") == 1


@pytest.mark.parametrize("mode", MODES)
def test_batch_member_filed_in_dead(m: Stack, mode: str) -> None:
    tag = f"member-dead-{mode}"
    rule = m.arm(mode, script="batch_filed", arg=tag)
    with cogworker.batch(on_death=matrix_jobs.callback, on_complete=matrix_jobs.callback,
                         callback_args=(f"cb-{tag}",)) as b:  # fmt: skip
        jid = matrix_jobs.dies.perform_async(tag)
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.callbacks(f"cb-{tag}") >= 2, timeout=20, message="both callbacks")
    m.wait_ran(tag)
    status = cogworker.batch_status(b.bid)
    assert status is not None and status.complete and status.dead == 1 and status.done == 1
    assert m.callbacks(f"cb-{tag}") == 2  # on_death once, on_complete once
    assert [e["jid"] for e in m.dead_entries(tag)] == [jid]
    assert len(m.notices(tag)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_graduate_a_scheduled_job(m: Stack, mode: str) -> None:
    tag = f"graduate-{mode}"
    rule = m.arm(mode, script="graduate_batch", arg=tag)
    matrix_jobs.mark.perform_in(0.2, tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)


@pytest.mark.parametrize("mode", MODES)
def test_bury_an_unusable_entry(m: Stack, mode: str) -> None:
    tag = f"bury-{mode}"
    rule = m.arm(mode, script="bury", arg=tag)
    m.r.zadd(keys.SCHEDULE, {f"not json {tag}": time.time()})
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.r.zcard(keys.SCHEDULE) == 0, timeout=20, message="the entry buried")
    wait_until(lambda: m.dead_entries(tag), timeout=20, message="the dead entry")
    assert len(m.dead_entries(tag)) == 1
    assert len(m.notices(tag)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_heartbeat(m: Stack, mode: str) -> None:
    tag = f"heartbeat-{mode}"
    rule = m.arm(mode, script="heartbeat")
    m.proxy.wait_fired(rule)
    matrix_jobs.mark.perform_async(tag)
    m.wait_ran(tag)
    wait_until(lambda: m.r.exists(keys.process(m.identity)), timeout=20, message="the worker's presence")


@pytest.mark.parametrize("mode", MODES)
def test_reconcile_after_a_lost_fetch(m: Stack, mode: str) -> None:
    tag = f"reconcile-{mode}"
    fetch = m.proxy.lose_reply(script="fetch", reply_contains=tag)
    # A lost reply is armed on the reconcile that puts the job back (a count of 1 in its reply);
    # a drop on the first reconcile after the lost fetch (a drop is decided before Redis answers).
    rule = m.proxy.lose_reply(script="reconcile", reply_contains="\r\n:1\r\n") if mode == "lost" else None
    matrix_jobs.mark.perform_async(tag)
    m.proxy.wait_fired(fetch)
    rule = rule or m.proxy.drop_command(script="reconcile")
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)


def limiter_holders(s: Stack) -> int:
    return int(s.r.zcard(keys.limiter("concurrent", "matrix")))


@pytest.mark.parametrize("mode", MODES)
def test_limiter_acquire(m: Stack, mode: str) -> None:
    tag = f"acquire-{mode}"
    rule = m.arm(mode, script="limit_concurrent", arg="acquire")
    matrix_jobs.limited.perform_async(tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)  # its failed try never ran the body; the retry did, once
    # A lost acquire's token holds its slot until its lease ends, never longer.
    wait_until(lambda: limiter_holders(m) == 0, timeout=20, message="every slot free")


@pytest.mark.parametrize("mode", MODES)
def test_limiter_release(m: Stack, mode: str) -> None:
    tag = f"release-{mode}"
    rule = m.arm(mode, script="limit_concurrent", arg="release")
    matrix_jobs.limited.perform_async(tag)
    m.proxy.wait_fired(rule)
    m.wait_ran(tag)
    wait_until(lambda: limiter_holders(m) == 0, timeout=20, message="every slot free")
    matrix_jobs.limited.perform_async(f"{tag}-next")
    m.wait_ran(f"{tag}-next")


@pytest.mark.parametrize("mode", MODES)
def test_quarantine_of_a_wrong_type_queue(m: Stack, mode: str) -> None:
    tag = f"quarantine-{mode}"
    queue = keys.queue("other")
    rule = m.arm(mode, script="quarantine", arg=queue)
    m.r.set(queue, tag)  # someone SET a queue's name: every fetch names it, the key guard moves it
    m.proxy.wait_fired(rule)
    wait_until(lambda: m.r.type(queue) == "none", timeout=20, message="the key moved aside")
    aside = [k for k in m.r.keys(keys.quarantine("*")) if m.r.get(k) == tag]
    assert len(aside) == 1
    matrix_jobs.mark.set(queue="other").perform_async(tag)
    m.wait_ran(tag)
