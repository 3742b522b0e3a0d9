"""A whole host lost at once: every process in its namespace SIGKILLed (supervisor, fork server and
children together, so no supervisor is left to requeue its children's lists at once). The other
hosts' orphan checks requeue them once the host has been silent past COGWORKER_ORPHAN_THRESHOLD_S:
its jobs start again within the threshold plus one check interval, and none is lost."""

from __future__ import annotations

import time

import pytest

from cogworker.store import keys
from tests.support.many_hosts import ORPHAN_CHECK_INTERVAL_S, ORPHAN_THRESHOLD_S, ManyHosts, host_name
from tests.support.redis_server import wait_until

# Redis's clock is read in whole seconds (up to 1 s late), and a free thread elsewhere picks the job.
SLACK_S = 2.0


@pytest.mark.timeout(240)
def test_a_host_killed_whole_has_its_jobs_run_again_in_time(many_hosts: ManyHosts) -> None:
    hosts = many_hosts
    lost = hosts.hosts[1]
    name = host_name(lost)
    identities = hosts.identities(lost)

    killed = lost.kill_all()
    killed_at = time.monotonic()
    hosts.sink.mark("killed")
    assert len(killed) >= 4  # supervisor, fork server, two children
    wait_until(lambda: not lost.pids(), timeout=10, message="every process of the host to be gone")
    # Dead processes change nothing more: what is on their lists now is what must run again.
    orphans = [
        tag for i in identities for tag in map(host_tag, hosts.control.lrange(keys.in_progress(i), 0, -1))
    ]
    assert orphans, "nothing was in flight on the killed host: the test proves nothing"

    wait_until(
        lambda: all(set(hosts.sink.hosts_of(tag)) - {name} for tag in orphans),
        timeout=ORPHAN_THRESHOLD_S + ORPHAN_CHECK_INTERVAL_S + 30,
        interval=0.05,
        message="every job of the killed host to start elsewhere",
    )
    rerun_s = time.monotonic() - killed_at
    print(f"FIGURE lost host: {len(orphans)} jobs in flight, all started elsewhere after {rerun_s:.1f} s")
    assert rerun_s <= ORPHAN_THRESHOLD_S + ORPHAN_CHECK_INTERVAL_S + SLACK_S

    hosts.producer.stop()
    accepted = hosts.producer.taken()
    wait_until(lambda: hosts.all_ran(accepted), timeout=90, interval=0.2, message="every pushed job to run")
    ended = hosts.sink.count("E")
    lost_jobs = [tag for tag in accepted if not ended[tag]]
    print(f"FIGURE lost host: {len(accepted)} jobs pushed, {len(lost_jobs)} lost")
    assert lost_jobs == []
    # Its processes are gone from every registry: no one waits on a dead host's list.
    wait_until(
        lambda: (
            not set(identities) & hosts.registered()
            and not any(hosts.control.exists(keys.in_progress(i)) for i in identities)
        ),
        timeout=30,
        interval=0.1,
        message="the dead host's processes to be forgotten",
    )


def host_tag(raw: str) -> str:
    from tests.support.many_hosts import host_jobs_tag

    return host_jobs_tag(raw)
