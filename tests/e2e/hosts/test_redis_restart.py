"""Redis restarted with persistence off (every key gone) while three hosts run and a producer pushes.

Every process registers again by itself (heartbeat, process set, in-progress identity), no thread
dies, `cogworker status` shows all 3x2 children again, and new pushes run. The loss is exactly the
jobs that were only in Redis: pushed and not yet fetched when it went down. The jobs the workers had
already fetched were in their memory too, and ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cogworker.store import keys
from tests.support.many_hosts import ManyHosts, host_jobs_tag
from tests.support.redis_server import wait_until


@pytest.mark.timeout(240)
def test_a_redis_restart_without_persistence_loses_only_what_was_only_in_redis(many_hosts: ManyHosts) -> None:
    hosts = many_hosts
    children = {s.pid: sorted(s.current_children().values()) for s in hosts.swarms}
    identities = {i for h in hosts.hosts for i in hosts.identities(h)}
    assert len(identities) == 6

    hosts.producer.burst(60)  # a backlog: jobs that are only in Redis
    # Writes paused, so the queue read next is exactly what the restart throws away: nothing is
    # fetched, pushed or acknowledged between the read and the kill.
    hosts.control.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")
    only_in_redis = {host_jobs_tag(raw) for raw in hosts.control.lrange(keys.queue("default"), 0, -1)}
    assert only_in_redis, "nothing was queued: the test proves nothing"
    assert not hosts.control.zcard(keys.RETRY) and not hosts.control.zcard(keys.SCHEDULE)
    hosts.redis.restart()
    restarted_at = time.monotonic()
    hosts.sink.mark("restart")
    pushed_before = len(hosts.producer.taken())

    def reregistered() -> bool:
        pipe = hosts.control.pipeline(transaction=False)
        for identity in identities:
            pipe.sismember(keys.PROCESSES, identity)
            pipe.exists(keys.process(identity))
            pipe.sismember(keys.IN_PROGRESS_IDENTITIES, identity)
        return all(pipe.execute())

    wait_until(reregistered, timeout=30, interval=0.05, message="every process to register again")
    back_s = time.monotonic() - restarted_at
    print(f"FIGURE redis restart: all 6 processes registered again {back_s:.1f} s after")
    status = subprocess.run(
        [sys.executable, "-m", "cogworker", "status"],
        env=dict(os.environ, COGWORKER_REDIS_URL=hosts.redis.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "Processes: 6 live" in status.stdout, status.stdout

    # New pushes run.
    wait_until(lambda: len(hosts.producer.taken()) >= pushed_before + 40, timeout=30, message="new pushes")
    hosts.producer.stop()
    accepted = hosts.producer.taken()
    owed = [tag for tag in accepted if tag not in only_in_redis]
    wait_until(lambda: hosts.all_ran(owed), timeout=90, interval=0.2, message="every job not lost to run")

    ended = hosts.sink.count("E")
    lost = sorted(tag for tag in accepted if not ended[tag])
    print(
        f"FIGURE redis restart: {len(accepted)} jobs pushed, {len(only_in_redis)} queued and not yet "
        f"fetched at the restart, {len(lost)} lost; {hosts.producer.failed} pushes refused while it restarted"
    )
    assert lost == sorted(only_in_redis & set(accepted))
    # No process died or was replaced, and no thread with it.
    assert {s.pid: sorted(s.current_children().values()) for s in hosts.swarms} == children
    for swarm in hosts.swarms:
        text = swarm.log_path.read_text(errors="replace")
        # A job's failure line carries its traceback (job_fail's `exception`); any other would be a crash.
        crashes = [ln for ln in text.splitlines() if "Traceback" in ln and '"event":"job_fail"' not in ln]
        assert not crashes and "job_thread_error" not in text, swarm.tail(60)
        assert not swarm.supervisor_events("child_exited")
