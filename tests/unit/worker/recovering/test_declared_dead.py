"""A process declared dead while it still runs its jobs (silent past COGWORKER_ORPHAN_THRESHOLD_S: a
partition) comes back to find its in-progress list requeued. The jobs it holds now belong to whoever
runs the requeued copies: it must neither acknowledge nor file them (settle.py `disown`, found by the
reconcile after a failure in reconcile.py), nor hand them over at shutdown (handover.lua).
The whole story, with real hosts and a real partition, is tests/e2e/hosts/test_partition.py."""

from __future__ import annotations

from collections import Counter

import redis

from cogworker import codec
from cogworker.api import payload, retry
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.recovering.reconcile import Reconciler
from cogworker.worker.settling.settle import Settler
from tests.support import components

ME = "me:1:dead"


def raw_job(tag: str) -> str:
    return codec.dumps(payload.build("demo_jobs.record", [tag], {}, queue="default", retry=True))


def fetched(raws: list[str]) -> list[Work]:
    """Jobs as a fetch hands them out (pushed onto the list by the test: their Redis's run_id unknown)."""
    return [Work("default", raw) for raw in raws]


def requeued_by_recovery(r: redis.Redis) -> None:
    """What another process's orphan recovery does to our list once it has declared us dead."""
    for raw in r.lrange(keys.in_progress(ME), 0, -1):
        r.rpush(keys.queue("default"), raw)
    r.delete(keys.in_progress(ME))


def parts_for(settings: Settings) -> tuple[Settler, Reconciler, ReliableFetch]:
    parts = components.build(settings, identity=ME)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    fetcher = ReliableFetch(parts.client, parts.client, parts.scripts, ME, settings.queue_spec)
    return settler, Reconciler(parts.ctx, settler), fetcher


def test_jobs_requeued_while_silent_are_neither_acknowledged_nor_filed(
    r: redis.Redis, settings: Settings
) -> None:
    settler, reconciler, fetcher = parts_for(settings)
    done, failing, running = raw_job("done"), raw_job("failing"), raw_job("running")
    r.lpush(keys.in_progress(ME), done, failing, running)
    reconciler.hold(fetched([done, failing, running]))
    settler.ack(done, "jid-done")  # finished during the partition: its ack waits for the next fetch
    reconciler.release(done)
    reconciler.lost_reply()  # the fetches failed while the link was down
    requeued_by_recovery(r)

    reconciler.run_if_due(fetcher)  # back in touch: the reconcile after the failure
    assert settler.pending_acks == 0  # the waiting ack is dropped
    assert settler.disowned == 2  # the two still running here

    # The failing one ends: filed nowhere (a retry would be its third run), counted nowhere.
    assert settler.file(failing, retry.on_failure(codec.loads(failing), ValueError("x"))) is True
    reconciler.release(failing)
    settler.ack(running, "jid-running")
    reconciler.release(running)
    assert settler.pending_acks == 0 and settler.pending_filings == 0 and settler.disowned == 0
    assert r.zcard(keys.RETRY) == 0 and r.get(keys.STAT_FAILED) is None
    assert r.llen(keys.queue("default")) == 3  # the requeued copies, for whoever fetches them

    # Fetched again by this very process: that copy is ours, and its ack goes out as usual.
    r.lpush(keys.in_progress(ME), running)
    reconciler.hold(fetched([running]))
    settler.ack(running, "jid-running")
    assert settler.pending_acks == 1


def test_a_copy_fetched_again_before_the_check_keeps_one_entry(r: redis.Redis, settings: Settings) -> None:
    """Copies of one payload are interchangeable: held twice, listed once -> one disowned."""
    settler, reconciler, fetcher = parts_for(settings)
    raw = raw_job("twice")
    reconciler.hold(fetched([raw, raw]))  # the stale copy still running, and the one fetched again
    r.lpush(keys.in_progress(ME), raw)
    reconciler.lost_reply()
    reconciler.run_if_due(fetcher)
    assert settler.disowned == 1
    settler.ack(raw, "j")  # the first to end (either copy) is the one dropped
    settler.ack(raw, "j")
    assert settler.pending_acks == 1


def test_a_mark_for_a_job_no_longer_held_is_forgotten(r: redis.Redis, settings: Settings) -> None:
    settler, reconciler, fetcher = parts_for(settings)
    raw = raw_job("gone")
    settler.disown(Counter([raw]))  # its settle came just before the check: it was no longer held
    reconciler.lost_reply()  # makes a reconcile due now
    reconciler.run_if_due(fetcher)  # nothing holds it any more, so the mark goes
    assert settler.disowned == 0
    reconciler.hold(fetched([raw]))
    r.lpush(keys.in_progress(ME), raw)
    settler.ack(raw, "j")
    assert settler.pending_acks == 1


def test_handover_of_a_job_requeued_elsewhere_hands_nothing_over(r: redis.Redis, settings: Settings) -> None:
    """handover.lua: a job no longer on the list is not pushed to cogworker:unsettled (another
    process would file it in retry: a third run). A job still there is, as before."""
    parts = components.build(settings, identity=ME)
    gone, here = raw_job("gone"), raw_job("here")
    r.lpush(keys.in_progress(ME), here)
    mark_gone, mark_here = keys.handed_over("gone"), keys.handed_over("here")
    reply = parts.scripts.run(
        "handover", [keys.UNSETTLED, keys.in_progress(ME), mark_gone], ["record-gone", gone, 60]
    )
    assert reply == 0
    assert r.llen(keys.UNSETTLED) == 0
    reply = parts.scripts.run(
        "handover", [keys.UNSETTLED, keys.in_progress(ME), mark_here], ["record-here", here, 60]
    )
    assert reply == 1
    assert r.lrange(keys.UNSETTLED, 0, -1) == ["record-here"] and r.llen(keys.in_progress(ME)) == 0


def test_a_pending_filing_of_a_requeued_job_is_dropped_at_handover(
    r: redis.Redis, settings: Settings
) -> None:
    parts = components.build(settings, identity=ME)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    raw = raw_job("late")
    r.lpush(keys.in_progress(ME), raw)
    r.set(keys.DEAD, "wrong type for a moment")  # the filing fails, and is kept
    assert settler.file(raw, retry.on_failure(codec.loads(raw) | {"retry": False}, ValueError("x"))) is False
    requeued_by_recovery(r)
    assert settler.hand_over() == 0
    assert r.llen(keys.UNSETTLED) == 0


def test_an_outage_seen_by_any_component_makes_the_check_due(r: redis.Redis, settings: Settings) -> None:
    """Every thread busy, nothing fetched: only the heartbeat failed while the host was cut off. The
    fetcher's next round still checks what it owns before it fetches anything."""
    parts = components.build(settings, identity=ME)
    settler = Settler(parts.ctx, keys.in_progress(ME))
    fetcher = ReliableFetch(parts.client, parts.client, parts.scripts, ME, settings.queue_spec)
    reconciler = Reconciler(parts.ctx, settler)
    raw = raw_job("long")
    r.lpush(keys.in_progress(ME), raw)
    reconciler.hold(fetched([raw]))
    reconciler.run_if_due(fetcher)  # not due: nothing happened
    assert settler.disowned == 0
    outages = parts.ctx.outages  # the process's one Outages, shared by every component
    outages.report("Heartbeat", redis.ConnectionError("link down"))
    requeued_by_recovery(r)
    outages.recovered("Heartbeat")
    reconciler.run_if_due(fetcher)
    assert settler.disowned == 1
