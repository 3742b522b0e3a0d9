"""COGWORKER_CPU_AFFINITY (supervisor/forkserver/cpu_affinity.py): with `spread`, slot N's worker and
every thread it starts run on the Nth CPU the swarm may use, wrapping round, and a replacement gets its
slot's CPU again; the CPUs are only those the swarm was started with. `auto` (the default) does the
same when the swarm has one worker per CPU, and unpins a worker that uses more than one CPU while it
does (supervisor/forkserver/pin_probe.py); `none` leaves the workers where the kernel puts them."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import redis

from cogworker import exitcodes
from tests.support.redis_server import wait_until
from tests.support.swarm import Swarm, SwarmRunner

pytestmark = pytest.mark.slow

ALL_CPUS = sorted(os.sched_getaffinity(0))


def thread_cpus(pid: int) -> set[tuple[int, ...]]:
    """The distinct CPU lists of every thread of `pid` (Cpus_allowed_list in each task's status)."""
    found: set[tuple[int, ...]] = set()
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                found.add(tuple(_expand(line.split(":", 1)[1].strip())))
    return found


def _expand(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def run_reports(swarm: Swarm, r: redis.Redis, count: int) -> list[dict[str, object]]:
    """Run `count` report jobs; what each reported."""
    from cogworker import codec
    from cogworker.api import payload

    r.delete("test:cpus")
    for index in range(count):
        job = payload.build("affinity_jobs.report_cpus", (f"j{index}",), {}, queue="default", retry=False)
        r.lpush("cogworker:queue:default", codec.dumps(job))
    lines = wait_until(lambda: r.llen("test:cpus") == count and r.lrange("test:cpus", 0, -1), message="jobs")
    return [json.loads(line) for line in lines]


def test_spread_pins_each_slot_and_its_replacement_to_one_cpu(swarms: SwarmRunner, r: redis.Redis) -> None:
    swarm = swarms.start(
        COGWORKER_REQUIRE="affinity_jobs", COGWORKER_CPU_AFFINITY="spread", COGWORKER_COUNT="3"
    )
    swarm.wait_ready()
    children = swarm.current_children()
    expected = {slot: ALL_CPUS[slot % len(ALL_CPUS)] for slot in range(3)}
    for slot, pid in children.items():
        # Every thread: job threads, the fetcher, the heartbeat, the event loop.
        assert thread_cpus(pid) == {(expected[slot],)}, (slot, pid)
    pinned = {e["slot"]: e["cpu"] for e in swarm.events("worker_pinned")}
    assert pinned == expected
    # The job's own thread reports one CPU: its process's slot's.
    by_pid = {pid: expected[slot] for slot, pid in children.items()}
    for report in run_reports(swarm, r, 12):
        assert report["cpus"] == [by_pid[int(str(report["pid"]))]], report

    os.kill(children[1], signal.SIGKILL)
    replaced = wait_until(
        lambda: swarm.current_children().get(1) not in (None, children[1]) and swarm.current_children()[1],
        message="slot 1 replaced",
    )
    wait_until(lambda: thread_cpus(int(replaced)) == {(expected[1],)}, message="the replacement pinned")
    assert swarm.stop() == exitcodes.OK


def test_spread_keeps_to_the_cpus_the_swarm_was_started_with(swarms: SwarmRunner, r: redis.Redis) -> None:
    only = ALL_CPUS[-1]
    swarm = swarms.start(
        command=["taskset", "-c", str(only), sys.executable, "-m", "supervisor.main"],
        COGWORKER_REQUIRE="affinity_jobs",
        COGWORKER_CPU_AFFINITY="spread",
    )
    swarm.wait_ready()
    for pid in swarm.current_children().values():
        assert thread_cpus(pid) == {(only,)}
    assert {tuple(report["cpus"]) for report in run_reports(swarm, r, 4)} == {(only,)}  # type: ignore[arg-type]
    assert swarm.stop() == exitcodes.OK


def test_the_default_count_is_the_cpus_the_swarm_may_use_and_auto_pins_them(
    swarms: SwarmRunner, r: redis.Redis
) -> None:
    # COGWORKER_COUNT unset (the fixture sets it): one CPU allowed, one worker, not one per host CPU;
    # the default count equals the CPUs allowed, so `auto` pins it.
    only = ALL_CPUS[-1]
    swarm = swarms.start(
        command=[
            "env",
            "-u",
            "COGWORKER_COUNT",
            "taskset",
            "-c",
            str(only),
            sys.executable,
            "-m",
            "supervisor.main",
        ],
        COGWORKER_REQUIRE="affinity_jobs",
    )
    swarm.wait_ready(ready=1)
    assert swarm.supervisor_events("swarm_capacity")[-1]["count"] == 1
    assert list(swarm.current_children()) == [0]
    assert [(e["slot"], e["cpu"]) for e in swarm.events("worker_pinned")] == [(0, only)]
    assert {tuple(report["cpus"]) for report in run_reports(swarm, r, 4)} == {(only,)}  # type: ignore[arg-type]
    assert len(swarm.supervisor_events("child_started")) == 1
    assert swarm.stop() == exitcodes.OK


@pytest.mark.parametrize(
    "placement",
    [
        {"COGWORKER_CPU_AFFINITY": "none", "COGWORKER_COUNT": str(len(ALL_CPUS))},
        # `auto` with more workers than CPUs: two would share one CPU the kernel couldn't balance.
        {"COGWORKER_COUNT": str(len(ALL_CPUS) + 1)},
    ],
)
def test_none_and_auto_without_a_worker_per_cpu_leave_workers_on_every_cpu(
    swarms: SwarmRunner, r: redis.Redis, placement: dict[str, str]
) -> None:
    swarm = swarms.start(COGWORKER_REQUIRE="affinity_jobs", **placement)
    swarm.wait_ready()
    for pid in swarm.current_children().values():
        assert thread_cpus(pid) == {tuple(ALL_CPUS)}
    assert {tuple(report["cpus"]) for report in run_reports(swarm, r, 4)} == {tuple(ALL_CPUS)}  # type: ignore[arg-type]
    assert swarm.events("worker_pinned") == []
    assert swarm.stop() == exitcodes.OK


def test_auto_pins_a_worker_per_cpu_and_unpins_one_while_it_computes_beside_python(
    swarms: SwarmRunner, r: redis.Redis
) -> None:
    assert len(ALL_CPUS) >= 2, "a worker using two CPUs needs a machine with two"
    two = ALL_CPUS[:2]
    # The probe measures what the worker uses unpinned, so it must have CPU to use: the swarm runs at a
    # higher priority than the other test streams sharing the machine (the suite runs as root). Its
    # session is a scheduling group of its own where the kernel has autogroups (Debian's default), and
    # between groups only the group's own nice value counts.
    boost = ["nice", "-n", "-15"]
    swarm = swarms.start(
        command=[*boost, "taskset", "-c", ",".join(map(str, two)), sys.executable, "-m", "supervisor.main"],
        COGWORKER_REQUIRE="affinity_jobs",
        COGWORKER_COUNT="2",
        COGWORKER_CPU_AFFINITY_PROBE_INTERVAL_S="1",
        COGWORKER_LOG_LEVEL="debug",  # for each probe's line
    )
    autogroup = Path(f"/proc/{swarm.pid}/autogroup")
    if autogroup.exists():
        autogroup.write_text("-15")
    swarm.wait_ready()
    children = swarm.current_children()
    for slot, pid in children.items():
        assert thread_cpus(pid) == {(two[slot],)}, (slot, pid)
    assert {e["slot"]: e["cpu"] for e in swarm.events("worker_pinned")} == {0: two[0], 1: two[1]}

    # Plain Python jobs: the probes find each worker within one CPU, so they stay pinned.
    for report in run_reports(swarm, r, 6):
        assert len(report["cpus"]) == 1, report  # type: ignore[arg-type]
    wait_until(lambda: {e["slot"] for e in swarm.events("cpu_affinity_probed")} == {0, 1}, message="probes")
    assert swarm.events("cpu_affinity_released") == []
    for slot, pid in children.items():
        assert thread_cpus(pid) == {(two[slot],)}, (slot, pid)

    from cogworker import codec
    from cogworker.api import payload

    # A probe every second while it runs: one finding it above 1.2 CPUs is enough, however busy the
    # machine is with other work during the rest.
    r.delete("test:computed")
    job = payload.build("affinity_jobs.compute_beside_python", (15.0,), {}, queue="default", retry=False)
    r.lpush("cogworker:queue:default", codec.dumps(job))
    released = wait_until(
        lambda: swarm.events("cpu_affinity_released"), message="the computing worker unpinned"
    )[0]
    assert released["cpus_used"] > 1.2
    slot = int(released["slot"])
    assert thread_cpus(children[slot]) == {tuple(two)}
    # The job over, an interval finds it within one CPU again: it is pinned to its slot's CPU again.
    wait_until(lambda: r.llen("test:computed") == 1, timeout=60, message="the job's end")
    wait_until(lambda: thread_cpus(children[slot]) == {(two[slot],)}, timeout=30, message="pinned again")
    repinned = swarm.events("cpu_affinity_repinned")[-1]
    assert (repinned["slot"], repinned["cpu"]) == (slot, two[slot])
    assert swarm.stop() == exitcodes.OK


def test_an_unknown_affinity_exits_78_before_forking(swarms: SwarmRunner) -> None:
    swarm = swarms.start(COGWORKER_CPU_AFFINITY="compact")
    assert swarm.wait() == exitcodes.CONFIG_ERROR
    assert "configuration error: COGWORKER_CPU_AFFINITY='compact'" in swarm.log_path.read_text()
    assert swarm.supervisor_events("child_started") == []
