"""One host of three cut off from Redis for longer than COGWORKER_ORPHAN_THRESHOLD_S, then back.

The other hosts requeue its in-progress jobs once it has been silent past the threshold, and nothing
is lost. When the link comes back its processes learn they were declared dead: the jobs they were
running now belong to someone else, so they neither acknowledge nor file them (a failure filed in
retry would run a third time), and they register again as they were. The jobs that run twice are
exactly those that were on the partitioned host's in-progress lists.
"""

from __future__ import annotations

import time

import pytest

from cogworker.store import keys
from tests.support.many_hosts import ORPHAN_CHECK_INTERVAL_S, ORPHAN_THRESHOLD_S, ManyHosts, host_name
from tests.support.redis_server import wait_until

# Declared dead once silent past the threshold (read on Redis's whole-second clock: up to 1 s more),
# then the next orphan check (one interval) requeues, and a free thread elsewhere starts the job.
PICKUP_SLACK_S = 3.0


def stable_in_progress(hosts: ManyHosts, index: int) -> list[str]:
    """The host's in-progress lists once two reads 0.2 s apart agree (a command already on its way
    when the link went down has landed by then)."""
    seen: list[tuple[float, list[str]]] = [(time.monotonic(), hosts.in_progress(hosts.hosts[index]))]

    def settled() -> bool:
        now = time.monotonic()
        if now - seen[-1][0] < 0.2:
            return False
        seen.append((now, hosts.in_progress(hosts.hosts[index])))
        return sorted(seen[-1][1]) == sorted(seen[-2][1])

    wait_until(settled, timeout=10, interval=0.05, message="the partitioned host's lists to stop changing")
    return seen[-1][1]


@pytest.mark.timeout(240)
def test_partitioned_host_is_recovered_and_rejoins_without_settling_others_jobs(
    many_hosts: ManyHosts,
) -> None:
    hosts = many_hosts
    cut = hosts.hosts[0]
    name = host_name(cut)
    children_before = sorted(hosts.swarms[0].current_children().values())
    identities = hosts.identities(cut)
    # Runs going on the cut-off host stall at their end until it is back (and knows it was declared
    # dead), then fail: a failure it must not file, as its job was requeued meanwhile.
    hosts.sink.stall_then_fail(name, True)

    cut.partition()
    partitioned_at = time.monotonic()
    hosts.sink.mark("partition")
    in_flight = stable_in_progress(hosts, 0)
    assert in_flight, "nothing was in flight on the partitioned host: the test proves nothing"

    # The others requeue its lists (the lists empty) and start each of those jobs on their hosts.
    wait_until(
        lambda: not any(hosts.control.llen(keys.in_progress(i)) for i in identities),
        timeout=ORPHAN_THRESHOLD_S + ORPHAN_CHECK_INTERVAL_S + 30,
        interval=0.05,
        message="the partitioned host's in-progress lists to be requeued",
    )
    wait_until(
        lambda: all(set(hosts.sink.hosts_of(tag)) - {name} for tag in in_flight),
        timeout=30,
        interval=0.05,
        message="every job of the partitioned host to start elsewhere",
    )
    recovery_s = time.monotonic() - partitioned_at
    print(f"FIGURE partition: {len(in_flight)} jobs in flight, started elsewhere after {recovery_s:.1f} s")
    # Not before the threshold: the host's last beat came at most one interval (0.5 s, later on a
    # loaded machine) before the cut, and Redis's clock counts whole seconds.
    assert recovery_s >= ORPHAN_THRESHOLD_S - 2
    assert recovery_s <= ORPHAN_THRESHOLD_S + ORPHAN_CHECK_INTERVAL_S + PICKUP_SLACK_S

    cut.heal()
    hosts.sink.mark("heal")

    # It registers again as it was: same children (none was restarted), present, beating, listed.
    def rejoined() -> bool:
        pipe = hosts.control.pipeline(transaction=False)
        for identity in identities:
            pipe.sismember(keys.PROCESSES, identity)
            pipe.exists(keys.process(identity))
            pipe.hexists(keys.LAST_BEAT, identity)
            pipe.sismember(keys.IN_PROGRESS_IDENTITIES, identity)
        return all(pipe.execute())

    wait_until(rejoined, timeout=30, interval=0.1, message="the partitioned host's processes to re-register")
    assert sorted(hosts.swarms[0].current_children().values()) == children_before
    assert len(hosts.registered()) == 6
    # Back in touch, its processes find the jobs they still run gone from their lists, and say so.
    ended = {p[1] for p in hosts.sink.lines() if p[0] in "EF" and p[2] == name}
    stalled = [tag for tag in in_flight if name in hosts.sink.hosts_of(tag) and tag not in ended]
    wait_until(
        lambda: sum(e["count"] for e in hosts.swarms[0].events("held_jobs_gone_from_list")) >= len(stalled),
        timeout=30,
        interval=0.1,
        message=f"the healed host to disown {stalled}",
    )
    hosts.sink.stall_then_fail(name, False)
    wait_until(
        lambda: any(
            p[0] == "E" and p[2] == name
            for p in hosts.sink.lines()[hosts.sink.lines().index(["#", "heal"]) :]
        ),
        timeout=30,
        interval=0.1,
        message="the healed host to run new jobs",
    )

    hosts.producer.stop()
    accepted = hosts.producer.taken()
    wait_until(lambda: hosts.all_ran(accepted), timeout=90, interval=0.2, message="every pushed job to run")
    wait_until(
        lambda: (
            not any(
                hosts.control.llen(keys.in_progress(i)) for s in hosts.swarms for i in s.identities().values()
            )
        ),
        timeout=30,
        interval=0.1,
        message="every in-progress list to empty",
    )

    started = hosts.sink.count("S")
    twice = sorted(tag for tag, n in started.items() if n > 1)
    # Of its lists' jobs, those the cut-off host had in hand (running, or fetched and waiting for a
    # thread) ran there and again elsewhere. A fetch whose reply the partition swallowed left jobs on
    # its list it never knew of: those ran once, elsewhere.
    held = sorted(tag for tag in in_flight if name in hosts.sink.hosts_of(tag))
    print(
        f"FIGURE partition: {len(accepted)} jobs, ran twice: {len(twice)}; on the cut host's lists: "
        f"{len(in_flight)}, of which it held {len(held)}"
    )
    assert max(started.values()) <= 2, f"a job ran three times: {started.most_common(3)}"
    assert twice == held
    print(f"FIGURE partition: {len(stalled)} still running when the host came back, disowned")
    # Nothing it was running was filed (a retry would be a third run) or acknowledged twice.
    assert hosts.control.zcard(keys.RETRY) == 0
    assert hosts.control.zcard(keys.DEAD) == 0
    assert hosts.control.llen(keys.UNSETTLED) == 0
    assert int(hosts.control.get(keys.STAT_PROCESSED) or 0) == len(accepted)
    assert int(hosts.control.get(keys.STAT_FAILED) or 0) == 0
    for swarm in hosts.swarms:  # no thread died of the partition
        text = swarm.log_path.read_text(errors="replace")
        # A job's failure line carries its traceback (job_fail's `exception`); any other would be a crash.
        crashes = [ln for ln in text.splitlines() if "Traceback" in ln and '"event":"job_fail"' not in ln]
        assert not crashes and "job_thread_error" not in text, swarm.tail(60)
