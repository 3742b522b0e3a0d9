"""The Swarm's decisions, in process: a fake clock, a fake spawner and a fake system, no real child.

The swarm runs turn by turn (`Swarm.turn(0)`) exactly as its loop would. Its spawner is played by the
test: a spawn is recorded and answered with a made-up pid, and each "child" is a real pipe the test
writes the child's state lines to. Signals the swarm sends are recorded instead of sent, and the
children that exit are handed to its reaper by the test. So minutes of backoff, deadlines and a
restart take no time, and what the swarm asked for, and in which order, can be read off one log.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from cogworker import exitcodes
from supervisor.children.child import Child
from supervisor.children.spawner import ExitStep, SpawnerOwner, SpawnRequest
from supervisor.config import SwarmConfig
from supervisor.forkserver_client.handle import ForkServerHandle
from supervisor.signals import SignalPipe
from supervisor.swarm import Swarm
from supervisor.system import System

SETTINGS = SwarmConfig(
    count=1,
    preload=False,
    phased_restart=True,
    graceful_stop_timeout_s=35.0,
    restart_ready_timeout_s=60.0,
    boot_timeout_s=120.0,
    healthy_uptime_s=30.0,
    respawn_base_delay_s=1.0,
    respawn_max_delay_s=60.0,
    liveness_timeout_s=30.0,
    maxmem_mb=None,
    memory_check_interval_s=5.0,
    metrics_port=None,
    metrics_host="127.0.0.1",
    redis_url="redis://127.0.0.1:1/0",
    redis_ssl_ca_file="",
    redis_ssl_cert_file="",
    redis_ssl_key_file="",
    redis_ssl_check_hostname=True,
    redis_sentinels="",
    redis_sentinel_master="",
    redis_sentinel_password="",
    redis_cluster=False,
    redis_timeout_s=5.0,
    metrics_job_labels=True,
    metrics_max_job_labels=200,
    key_prefix="cogworker:",
    cluster_sharding="off",
    queue_partitions="",
    sidekiq_compat="off",
    sidekiq_namespace="",
    log_level="info",
    log_format="json",
)
FIRST_PID = 4_000_000  # above any real pid (pid_max is at most 2**22): never a real process


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeSpawner:
    """Records what the swarm asks, in one ordered list; the test answers spawns itself."""

    def __init__(self, owner: SpawnerOwner, clock: Callable[[], float], asked: list[tuple[Any, ...]]) -> None:
        self.owner = owner
        self.clock = clock
        self.asked = asked
        self.ready = True
        self.restart_loading = False
        self.requests: dict[str, SpawnRequest] = {}
        self.write_ends: dict[str, int] = {}

    @property
    def awaiting_spawns(self) -> bool:
        return bool(self.requests)

    @property
    def current_pid(self) -> int | None:
        return None

    def spawn(
        self, slot: int, purpose: str, *, quiet: bool, generation: int, replaces: Child | None = None
    ) -> SpawnRequest:
        if not self.ready:
            raise OSError("no fork server is ready")
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        nonce = secrets.token_hex(4)
        request = SpawnRequest(
            slot, purpose, nonce, quiet, generation, replaces, ForkServerHandle(0), read_fd, self.clock()
        )
        self.requests[nonce] = request
        self.write_ends[nonce] = write_fd
        self.asked.append(("spawn", slot, purpose))
        return request

    def spawning(self, slot: int) -> SpawnRequest | None:
        return next((r for r in self.requests.values() if r.slot == slot), None)

    def requeue_jobs_of(self, identity: str) -> None:
        self.asked.append(("requeue", identity))

    def load_new_code(self) -> None:
        self.restart_loading = True
        self.asked.append(("load_new_code",))

    def begin_stop(self) -> None:
        self.asked.append(("begin_stop",))

    def reaped(self, pid: int, code: int) -> bool:
        return False

    def on_readable(self, source: object) -> None:
        raise AssertionError(f"the fake spawner registers nothing: {source!r}")

    def tick(self) -> None:
        pass

    def next_due_in(self) -> float | None:
        return None

    def exit_steps(self) -> list[ExitStep]:
        return []

    def close(self) -> set[str]:
        for request in self.requests.values():
            os.close(request.read_fd)
        return set()


@dataclass
class FakeChild:
    pid: int
    slot: int
    purpose: str
    write_fd: int


class World:
    def __init__(self, settings: SwarmConfig) -> None:
        self.clock = Clock()
        self.asked: list[tuple[Any, ...]] = []  # spawns and requeues, in the order they were asked
        self.signals: list[tuple[int, int]] = []  # (pid, signal) the swarm sent
        self.exits: list[tuple[int, int]] = []  # (pid, exit code) for the swarm's next reap
        self.next_pid = FIRST_PID
        self.children: dict[int, FakeChild] = {}
        self.signal_pipe = SignalPipe()
        self.spawner: FakeSpawner | None = None
        system = System(send_signal=self._record_signal, reap=self._reap, set_title=lambda _title: None)
        self.swarm = Swarm(settings, self.signal_pipe, self._make_spawner, clock=self.clock, system=system)

    def _make_spawner(
        self, _selector: selectors.BaseSelector, owner: SpawnerOwner, clock: Callable[[], float]
    ) -> FakeSpawner:
        self.spawner = FakeSpawner(owner, clock, self.asked)
        return self.spawner

    @property
    def fake(self) -> FakeSpawner:
        assert self.spawner is not None
        return self.spawner

    def _record_signal(self, pid: int, signum: int) -> None:
        self.signals.append((pid, signum))

    def _reap(self) -> Iterator[tuple[int, int]]:
        while self.exits:
            yield self.exits.pop(0)

    # Playing the children ---------------------------------------------------------------------
    def answer(self, slot: int) -> FakeChild:
        """The fork server forks the worker asked for `slot`."""
        request = self.fake.spawning(slot)
        assert request is not None, f"no spawn asked for slot {slot}"
        del self.fake.requests[request.nonce]
        child = FakeChild(self.next_pid, slot, request.purpose, self.fake.write_ends.pop(request.nonce))
        self.next_pid += 1
        self.children[child.pid] = child
        self.swarm.spawned(request, child.pid)
        return child

    def say(self, child: FakeChild, event: str, **fields: Any) -> None:
        os.write(child.write_fd, orjson.dumps({"event": event, **fields}) + b"\n")

    def ready_child(self, slot: int) -> FakeChild:
        child = self.answer(slot)
        self.say(child, "booted")
        self.say(child, "ready")
        self.turn()
        return child

    def exit(self, child: FakeChild, code: int) -> None:
        """The child exits with `code` (negative: killed by that signal); the next turn reaps it."""
        os.close(child.write_fd)
        del self.children[child.pid]
        self.exits.append((child.pid, code))

    def turn(self) -> None:
        self.swarm.turn(0)

    def identity(self, child: FakeChild) -> str:
        found = self.swarm.roster.get(child.pid)
        assert found is not None
        return found.identity

    def signalled(self, child: FakeChild) -> list[signal.Signals]:
        return [signal.Signals(s) for pid, s in self.signals if pid == child.pid]

    def close(self) -> None:
        for child in self.children.values():
            os.close(child.write_fd)
        if self.spawner is not None:
            for fd in self.spawner.write_ends.values():
                os.close(fd)
            self.spawner.close()
        for child in list(self.swarm.roster):
            self.swarm.procs.close_pipe(child)
        self.swarm.selector.close()
        self.signal_pipe.close()


@pytest.fixture
def make_world() -> Iterator[Callable[..., World]]:
    made: list[World] = []

    def make(**settings: Any) -> World:
        world = World(replace(SETTINGS, **settings))
        made.append(world)
        world.swarm.start()
        return world

    yield make
    for world in made:
        world.close()


def crash_and_respawn(world: World, child: FakeChild, *, delay_s: float) -> FakeChild:
    """`child` crashes: its slot must be asked for again exactly `delay_s` later, not before."""
    world.exit(child, exitcodes.FAILURE)
    crashed_at = world.clock.now
    world.turn()
    if delay_s > 0:
        assert world.fake.spawning(child.slot) is None, "respawned at once"
        world.clock.now = crashed_at + delay_s - 0.001
        world.turn()
        assert world.fake.spawning(child.slot) is None, f"respawned before {delay_s} s"
        world.clock.now = crashed_at + delay_s
        world.turn()
    assert world.fake.spawning(child.slot) is not None, f"not respawned after {delay_s} s"
    return world.ready_child(child.slot)


def test_a_slot_that_keeps_crashing_young_is_respawned_after_a_doubling_delay(
    make_world: Callable[..., World],
) -> None:
    world = make_world(respawn_base_delay_s=1.0, respawn_max_delay_s=8.0)
    child = world.ready_child(0)
    world.clock.now += 60.0  # a healthy run first: its crash opens a streak, respawned at once
    for delay_s in (0.0, 1.0, 2.0, 4.0, 8.0, 8.0):
        child = crash_and_respawn(world, child, delay_s=delay_s)
    # A healthy run again: the streak starts over.
    world.clock.now += 30.0
    child = crash_and_respawn(world, child, delay_s=0.0)
    crash_and_respawn(world, child, delay_s=1.0)
    assert [a[2] for a in world.asked if a[0] == "spawn"] == ["start"] + ["respawn"] * 8


def test_a_dead_childs_jobs_are_requeued_before_its_slot_is_forked_again(
    make_world: Callable[..., World],
) -> None:
    world = make_world(count=2)
    first, second = world.ready_child(0), world.ready_child(1)
    killed, crashed = world.identity(first), world.identity(second)
    world.asked.clear()
    world.exit(first, -signal.SIGKILL)
    world.exit(second, exitcodes.FAILURE)
    world.turn()
    assert world.asked == [
        ("requeue", killed),
        ("requeue", crashed),
        ("spawn", 0, "respawn"),
        ("spawn", 1, "respawn"),
    ]
    # A child that exits cleanly (after a healthy run: an exit nobody asked for counts toward the
    # backoff) had nothing in progress: its slot is forked again, and nothing is requeued.
    world.asked.clear()
    clean = world.ready_child(0)
    world.clock.now += 60.0
    world.say(clean, "stopped", code=0)
    world.exit(clean, 0)
    world.turn()
    assert world.asked == [("spawn", 0, "respawn")]


def test_a_phased_restart_replaces_one_slot_at_a_time_and_never_drops_ready_capacity(
    make_world: Callable[..., World],
) -> None:
    world = make_world(count=3)
    old = [world.ready_child(slot) for slot in range(3)]
    world.asked.clear()
    world.swarm.restart_children()
    assert world.asked == [("load_new_code",)]
    world.turn()
    assert world.fake.spawning(0) is None  # nothing is forked until the new code is loaded
    world.fake.restart_loading = False
    world.swarm.forkserver_ready(restarted=True)

    with capture_logs() as events:
        for slot in range(3):
            world.turn()
            world.turn()  # however many turns pass, only this slot's replacement is asked for
            restarts = [r for r in world.fake.requests.values() if r.purpose == "restart"]
            assert [r.slot for r in restarts] == [slot]
            new = world.answer(slot)
            world.turn()
            assert world.signalled(old[slot]) == []  # the old child serves until its replacement is ready
            assert world.swarm.roster.ready == 3
            world.say(new, "booted")
            world.say(new, "ready")
            world.turn()
            assert world.signalled(old[slot]) == [signal.SIGTERM]
            assert world.swarm.roster.ready == 3
            world.exit(old[slot], 0)

        world.turn()
    assert [e["event"] for e in events].count("restart_finished") == 1
    assert not world.fake.requests and len(world.swarm.roster) == 3
    assert [a for a in world.asked if a[0] == "spawn"] == [("spawn", s, "restart") for s in range(3)]
    assert world.swarm.respawns.replaced == {"restart": 3}


def test_a_silent_child_is_killed_at_its_boot_or_liveness_deadline_then_requeued_and_respawned(
    make_world: Callable[..., World],
) -> None:
    world = make_world(count=2, boot_timeout_s=120.0, liveness_timeout_s=30.0)
    importing = world.answer(0)  # never says a word: still importing the app
    talking = world.answer(1)
    world.say(talking, "booted")
    world.turn()

    world.clock.now += 30.0  # liveness counts from the last line, and only once a child has spoken
    world.turn()
    assert world.signals == []
    world.clock.now += 0.1
    world.turn()
    assert world.signalled(talking) == [signal.SIGKILL] and world.signalled(importing) == []

    world.clock.now += 120.0 - 30.1
    world.turn()
    assert world.signalled(importing) == []
    world.clock.now += 0.1
    world.turn()
    assert world.signalled(importing) == [signal.SIGKILL]

    hung = world.identity(talking)
    world.asked.clear()
    world.exit(talking, -signal.SIGKILL)
    with capture_logs() as logs:
        world.turn()
    [exited] = [e for e in logs if e["event"] == "child_exited"]
    assert exited["reason"] == "hung" and exited["requeue"] is True
    assert world.asked == [("requeue", hung), ("spawn", 1, "respawn")]


def test_a_stop_kills_the_stragglers_at_the_deadline_and_exits_failed(
    make_world: Callable[..., World],
) -> None:
    world = make_world(count=2, graceful_stop_timeout_s=35.0)
    quick, slow = world.ready_child(0), world.ready_child(1)
    slow_identity = world.identity(slow)
    world.swarm.stop()
    assert world.signalled(quick) == [signal.SIGTERM] and world.signalled(slow) == [signal.SIGTERM]
    world.say(quick, "stopping")
    world.say(quick, "stopped", code=0)
    world.exit(quick, 0)
    world.clock.now += 35.0 - 0.01
    world.turn()
    assert world.signalled(slow) == [signal.SIGTERM] and not world.swarm.done

    world.clock.now += 0.01
    world.turn()
    assert world.signalled(slow) == [signal.SIGTERM, signal.SIGKILL]
    world.asked.clear()
    world.exit(slow, -signal.SIGKILL)
    world.turn()
    assert world.asked == [("requeue", slow_identity)]  # and nothing respawned: it is stopping
    assert world.swarm.done
    world.swarm.finish()
    assert world.swarm.exit_code == exitcodes.FAILURE
