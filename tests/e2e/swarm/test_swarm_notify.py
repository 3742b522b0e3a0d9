"""The real swarm speaking systemd's notify protocol to a datagram listener at NOTIFY_SOCKET.

The listener plays systemd's part: it records every datagram with its arrival time, and the tests
assert the order systemd relies on (READY=1 once every slot is ready, RELOADING=1 ... READY=1 around a
restart, STOPPING=1 and EXTEND_TIMEOUT_USEC= while draining, WATCHDOG=1 at half the interval).
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from cogworker import exitcodes
from tests.support.notify_listener import Datagram, NotifyListener
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner, stays

pytestmark = pytest.mark.slow


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest, short_dir: Path) -> Iterator[NotifyListener]:
    made = NotifyListener(request.param, short_dir)
    try:
        yield made
    finally:
        made.close()


def is_ready(m: Datagram) -> bool:
    return m.fields.get("READY") == "1"


def not_watchdog(messages: list[Datagram]) -> list[Datagram]:
    return [m for m in messages if not m.has("WATCHDOG")]


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def assert_boot_sequence(messages: list[Datagram]) -> None:
    """STATUS lines while children boot, then exactly one READY=1 carrying the running STATUS."""
    messages = not_watchdog(messages)
    ready = [i for i, m in enumerate(messages) if is_ready(m)]
    assert len(ready) == 1, [m.text for m in messages]
    before, first_ready = messages[: ready[0]], messages[ready[0]]
    assert before and all(set(m.fields) == {"STATUS"} for m in before), [m.text for m in before]
    assert before[0].status is not None and before[0].status.startswith("starting: 0/2 ready")
    assert set(first_ready.fields) == {"READY", "STATUS"}
    assert first_ready.status is not None and first_ready.status.startswith("running: 2/2 ready, 0/")
    assert first_ready.status.endswith("redis up")


def assert_reload_sequence(messages: list[Datagram], sent_before_usec: int) -> None:
    """RELOADING=1 + MONOTONIC_USEC=, STATUS lines saying `restarting`, then READY=1 only when the
    restart is over (no STATUS says `restarting` after it) and a running STATUS."""
    messages = not_watchdog(messages)
    reloading = [i for i, m in enumerate(messages) if m.has("RELOADING")]
    assert len(reloading) == 1, f"one RELOADING=1 per restart: {[m.text for m in messages]}"
    first = messages[reloading[0]]
    assert set(first.fields) == {"RELOADING", "MONOTONIC_USEC"} and first.fields["RELOADING"] == "1"
    usec = int(first.fields["MONOTONIC_USEC"])
    assert sent_before_usec <= usec <= int(first.at * 1_000_000), "MONOTONIC_USEC is CLOCK_MONOTONIC"
    ready = [i for i, m in enumerate(messages) if is_ready(m) and i > reloading[0]]
    assert len(ready) == 1, f"one READY=1 ends the restart: {[m.text for m in messages]}"
    during = messages[reloading[0] + 1 : ready[0]]
    assert all(not m.has("READY") for m in during)
    statuses = [m.status for m in during if m.status is not None]
    assert any(s.startswith("restarting:") for s in statuses), statuses
    after = [m.status for m in messages[ready[0] :] if m.status is not None]
    assert not any(s.startswith("restarting") for s in after), after
    assert after and after[-1].startswith("running: 2/2 ready"), after


def started(r: redis.Redis, tag: str) -> bool:
    return any(line.split()[0] == tag for line in r.lrange("test:started", 0, -1))


def test_boot_restart_and_stop_are_announced_in_order(
    swarms: SwarmRunner, r: redis.Redis, configured: object, listener: NotifyListener
) -> None:
    import demo_jobs

    swarm = swarms.start(NOTIFY_SOCKET=listener.notify_socket)
    first_ready = listener.wait(is_ready, what=f"READY=1:\n{swarm.tail()}")
    assert swarm.supervisor_events("swarm_capacity")[-1]["ready"] == 2  # logged before it was sent
    # Work changes the STATUS line, never brings another READY=1.
    for i in range(3):
        demo_jobs.record.perform_async(f"n{i}")
    listener.wait(
        lambda m: (m.status or "").startswith("running: 2/2 ready, 0/4 busy, 3 processed"),
        after=first_ready,
        what=f"a STATUS with the jobs counted:\n{listener.dump()}",
    )
    assert_boot_sequence(listener.messages)

    # A restart (phased, the default): the children are replaced, systemd sees reloading, then ready.
    old = {c.pid for c in swarm.children()}
    before_hup = len(listener.messages)
    sent_before = monotonic_usec()
    swarm.signal(signal.SIGHUP)
    reloading = listener.wait(lambda m: m.has("RELOADING"), after=before_hup, what="RELOADING=1")
    listener.wait(is_ready, after=reloading, what=f"READY=1 ending the restart:\n{listener.dump()}")
    swarm.wait_event("restart_finished")
    wait_until(lambda: not old & {c.pid for c in swarm.children()}, message="every old child gone")
    listener.wait(
        lambda m: (m.status or "").startswith("running: 2/2 ready"), after=reloading, what="a running STATUS"
    )
    assert_reload_sequence(listener.messages[before_hup:], sent_before)

    # A stop while a job keeps a child busy for three seconds: STOPPING=1 at once, and the stop
    # timeout extended again while the drain goes on.
    demo_jobs.sleepy.perform_async("drain", 3.0)
    wait_until(lambda: started(r, "drain"), message="the long job to start")
    before_term = len(listener.messages)
    swarm.signal(signal.SIGTERM)
    assert swarm.wait() == exitcodes.OK
    assert "drain" in [line.split()[0] for line in r.lrange("test:ran", 0, -1)]  # it finished its job
    stopping = [m for m in not_watchdog(listener.messages[before_term:]) if not m.has("STATUS")]
    assert stopping[0].text == "STOPPING=1", listener.dump()
    extends = [int(m.fields["EXTEND_TIMEOUT_USEC"]) for m in stopping[1:]]
    assert len(stopping) - 1 == len(extends) >= 2, [m.text for m in stopping]
    # Graceful deadline (10 s) + the supervisor's margin (10 s), then what is left of it.
    assert extends[0] == 20_000_000
    assert extends == sorted(extends, reverse=True) and extends[-1] > 10_000_000
    stop_statuses = [m.status for m in listener.messages[before_term:] if m.status is not None]
    assert stop_statuses and all(s.startswith("stopping:") for s in stop_statuses), stop_statuses
    assert not any(is_ready(m) for m in listener.messages[before_term:])


def ping_times(listener: NotifyListener) -> list[float]:
    pings = [m for m in listener.messages if m.has("WATCHDOG")]
    assert all(m.text == "WATCHDOG=1" for m in pings)
    return [m.at for m in pings]


def own_pid_command() -> list[str]:
    """The swarm with WATCHDOG_PID set to its own pid, which is only known once it runs: a shell
    exports its own $$ and execs the supervisor in its place (same pid)."""
    return ["/bin/sh", "-c", f'export WATCHDOG_PID=$$; exec "{sys.executable}" -m supervisor.main']


@pytest.mark.parametrize("watchdog_pid", ["absent", "own"])
def test_watchdog_pings_at_half_the_interval(
    swarms: SwarmRunner, listener: NotifyListener, watchdog_pid: str
) -> None:
    command = own_pid_command() if watchdog_pid == "own" else None
    # WatchdogSec=2 s: pings every 1 s. (With 1 s, a gap reached 0.998 s on a machine loaded by three
    # test streams and other work: the supervisor's loop waits for the CPU like any process.)
    swarm = swarms.start(command=command, NOTIFY_SOCKET=listener.notify_socket, WATCHDOG_USEC="2000000")
    listener.wait(is_ready, what="READY=1")
    times = wait_until(
        lambda: len(t := ping_times(listener)) >= 6 and t, timeout=20, message=f"pings:\n{listener.dump()}"
    )
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 0.8 <= statistics.median(gaps) <= 1.2, gaps
    assert max(gaps) < 1.8, gaps  # never near WatchdogSec=2 s
    if watchdog_pid == "own":
        # The shell exec'd the supervisor (same pid, its title now): the pings came from WATCHDOG_PID.
        assert psutil.Process(swarm.pid).name().startswith("cogworker-swarm")
    assert swarm.stop() == exitcodes.OK


def test_watchdog_of_another_pid_gets_no_pings(swarms: SwarmRunner, listener: NotifyListener) -> None:
    # The variables were inherited from a process that has a watchdog of its own (here: the test).
    swarm = swarms.start(
        NOTIFY_SOCKET=listener.notify_socket, WATCHDOG_USEC="1000000", WATCHDOG_PID=str(os.getpid())
    )
    listener.wait(is_ready, what="READY=1")
    stays(lambda: not ping_times(listener), 1.5, "no WATCHDOG=1 for another process's watchdog")
    assert swarm.stop() == exitcodes.OK
    assert listener.messages and not ping_times(listener)


def test_preload_restart_loads_a_new_forkserver_and_ends_with_ready(
    swarms: SwarmRunner, listener: NotifyListener
) -> None:
    swarm = swarms.start(
        NOTIFY_SOCKET=listener.notify_socket, WATCHDOG_USEC="1000000", COGWORKER_PRELOAD="true"
    )
    listener.wait(is_ready, what="READY=1")
    old = {c.pid for c in swarm.children()}
    old_forkservers = {p.pid for p in swarm.forkservers()}
    before_hup = len(listener.messages)
    sent_before = monotonic_usec()
    swarm.signal(signal.SIGHUP)
    swarm.wait_event("restart_finished")
    ready = listener.wait(is_ready, after=before_hup, what=f"READY=1 after the restart:\n{listener.dump()}")
    assert len(swarm.supervisor_events("restart_loading")) == 1
    assert [e["forkserver_pid"] for e in swarm.wait_event("forkserver_retired")] == list(old_forkservers)
    wait_until(lambda: not old & {c.pid for c in swarm.children()}, message="every old child replaced")
    assert len(swarm.forkservers()) == 1 and not old_forkservers & {p.pid for p in swarm.forkservers()}
    listener.wait(
        lambda m: (m.status or "").startswith("running: 2/2 ready"), after=ready, what="a running STATUS"
    )
    assert_reload_sequence(listener.messages[before_hup:], sent_before)
    # The watchdog is still fed after the restart.
    ready_at = listener.messages[ready].at
    wait_until(lambda: len([t for t in ping_times(listener) if t > ready_at]) >= 2, message="pings go on")
    assert swarm.stop() == exitcodes.OK
