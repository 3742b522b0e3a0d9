"""The fork servers' requests and lifecycle (forkserver_client/keeper.py, forkserver_client/lifecycle.py), in
process, with an injected clock.

The test plays each fork server's end of a real SOCK_SEQPACKET socket pair: it reads the requests the
keeper sends and answers them (or doesn't). Each fork server's pid is a real `sleep` process, so a
fork server killed as hung, or a worker stopped because nobody waits for it, is seen really dying.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor.children.late_spawns import UnclaimedPipe
from supervisor.children.spawner import SpawnRequest
from supervisor.forkserver_client.handle import ForkServerHandle
from supervisor.forkserver_client.keeper import ForkServerKeeper
from supervisor.wire import forkserver_messages

ANSWER_TIMEOUT_S = 10.0
BOOT_TIMEOUT_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeForkServer:
    """The fork server's side of the socket, played by the test."""

    def __init__(self, generation: int, now: float, processes: list[subprocess.Popen[bytes]]) -> None:
        self.proc = subprocess.Popen(["sleep", "60"])
        processes.append(self.proc)
        ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.theirs.setblocking(False)
        self.handle = ForkServerHandle(generation)
        self.handle.pid = self.proc.pid
        self.handle.attach(ours, now)
        self.write_fds: list[int] = []  # state pipes' write ends that came with spawn requests

    def say(self, **message: Any) -> None:
        forkserver_messages.send(self.theirs, message)

    def requests(self) -> list[dict[str, Any]]:
        found = []
        while True:
            try:
                message, fds = forkserver_messages.receive(self.theirs)
            except BlockingIOError:
                return found
            assert message is not None
            self.write_fds += fds
            found.append(message)

    def killed(self) -> bool:
        return self.proc.wait(timeout=5) == -signal.SIGKILL


class Owner:
    """The swarm's part: records what the keeper tells it."""

    def __init__(self) -> None:
        self.ready: list[bool] = []
        self.spawns: list[tuple[SpawnRequest, int]] = []
        self.failed: list[tuple[SpawnRequest, str, bool]] = []
        self.restart_failures: list[str] = []
        self.requeued: list[tuple[str, int]] = []

    def forkserver_ready(self, *, restarted: bool) -> None:
        self.ready.append(restarted)

    def spawned(self, request: SpawnRequest, pid: int) -> None:
        self.spawns.append((request, pid))

    def spawn_failed(self, request: SpawnRequest, error: str, *, server_lost: bool) -> None:
        self.failed.append((request, error, server_lost))

    def restart_failed(self, reason: str) -> None:
        self.restart_failures.append(reason)

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        self.requeued.append((identity, moved))


class World:
    def __init__(self) -> None:
        self.clock = Clock()
        self.processes: list[subprocess.Popen[bytes]] = []
        self.fakes: list[FakeForkServer] = []
        self.selector = selectors.DefaultSelector()
        self.owner = Owner()
        first = self.launch(0, self.clock())
        self.keeper = ForkServerKeeper(
            first,
            self.selector,
            self.owner,
            answer_timeout_s=ANSWER_TIMEOUT_S,
            boot_timeout_s=BOOT_TIMEOUT_S,
            clock=self.clock,
            launch=self.launch,
        )

    def launch(self, generation: int, now: float) -> ForkServerHandle:
        fake = FakeForkServer(generation, now, self.processes)
        self.fakes.append(fake)
        return fake.handle

    def ready(self, fake: FakeForkServer) -> None:
        fake.say(op="ready", settings={})
        self.keeper.on_readable(fake.handle)

    def dispatch(self) -> None:
        """One turn of the swarm's loop, as far as the keeper is concerned."""
        for key, _ in self.selector.select(0):
            self.keeper.on_readable(key.data)
        self.keeper.tick()

    def reap(self, fake: FakeForkServer) -> None:
        code = fake.proc.wait(timeout=5)
        assert self.keeper.reaped(fake.proc.pid, code)

    def close(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for fake in self.fakes:
            for fd in fake.write_fds:
                os.close(fd)
            fake.theirs.close()
        self.selector.close()


@pytest.fixture
def world() -> Iterator[World]:
    made = World()
    try:
        yield made
    finally:
        made.close()


def test_answers_reach_the_owner_and_a_busy_fork_server_is_not_hung(world: World) -> None:
    [first] = world.fakes
    world.ready(first)
    assert world.keeper.ready and world.owner.ready == [False]

    world.keeper.requeue_jobs_of("h:1:dead")
    request = world.keeper.spawn(0, "respawn", quiet=False, generation=0)
    assert world.keeper.spawning(0) is request
    asked = first.requests()
    assert [m["op"] for m in asked] == ["requeue", "spawn"]  # in the order they were sent
    assert asked[1]["nonce"] == request.nonce and len(first.write_fds) == 1

    # Slow but steady: each answer within the deadline, all of them well past it. Not hung.
    world.clock.now += ANSWER_TIMEOUT_S * 0.9
    first.say(op="requeued", identity="h:1:dead", ok=True, moved=2)
    world.dispatch()
    world.clock.now += ANSWER_TIMEOUT_S * 0.9
    first.say(op="spawned", slot=0, nonce=request.nonce, pid=4242)
    world.dispatch()
    assert first.proc.poll() is None
    assert world.owner.requeued == [("h:1:dead", 2)]
    assert world.owner.spawns == [(request, 4242)] and world.keeper.spawning(0) is None

    # Owing nothing, silence is fine however long it lasts.
    world.clock.now += ANSWER_TIMEOUT_S * 10
    world.dispatch()
    assert first.proc.poll() is None and world.owner.failed == []
    os.close(request.read_fd)


def test_a_fork_server_silent_past_its_deadline_is_killed_and_its_requests_go_to_the_next(
    world: World,
) -> None:
    [first] = world.fakes
    world.ready(first)
    world.keeper.requeue_jobs_of("h:1:dead")
    request = world.keeper.spawn(3, "respawn", quiet=True, generation=0)
    world.clock.now += ANSWER_TIMEOUT_S
    world.dispatch()
    assert first.proc.poll() is None  # at the deadline, not past it

    world.clock.now += 0.1
    world.dispatch()
    assert first.killed()
    # The spawn failed as "server lost" (no crash of the slot), and nobody waits for it any more.
    [(failed, error, server_lost)] = world.owner.failed
    assert failed is request and server_lost and "hung" in error
    assert world.keeper.spawning(3) is None and not world.keeper.ready
    # A new fork server was started at once; until it is ready nothing can be asked of it.
    second = world.fakes[1]
    assert world.keeper.servers.current is second.handle and second.handle.generation == 1
    with pytest.raises(OSError):
        world.keeper.spawn(3, "respawn", quiet=True, generation=0)

    # Ready: the requeue the old one owed is sent to it before anything else.
    world.ready(second)
    assert world.owner.ready == [False, False]
    assert second.requests() == [{"op": "requeue", "identity": "h:1:dead"}]
    world.reap(first)
    assert world.keeper.servers.alive() == [second.handle]


def test_late_answers_from_a_killed_fork_server_count_for_nothing_and_its_worker_is_stopped(
    world: World,
) -> None:
    [first] = world.fakes
    world.ready(first)
    world.keeper.requeue_jobs_of("h:1:dead")
    request = world.keeper.spawn(0, "respawn", quiet=False, generation=0)
    world.clock.now += ANSWER_TIMEOUT_S + 1
    world.dispatch()
    assert first.killed()
    # What it wrote before it died is still in the socket: a requeue done, a worker forked.
    worker = subprocess.Popen(["sleep", "60"])
    world.processes.append(worker)
    first.say(op="requeued", identity="h:1:dead", ok=True, moved=1)
    first.say(op="spawned", slot=0, nonce=request.nonce, pid=worker.pid)
    world.reap(first)  # reading its last answers first
    assert worker.wait(timeout=5) == -signal.SIGTERM  # nobody tracks it: stopped
    assert world.owner.spawns == [] and world.owner.requeued == []
    # The requeue is still pending, for the next fork server to do.
    assert world.keeper.requeues.pending == {"h:1:dead"}


def test_a_worker_forked_for_a_given_up_spawn_is_stopped_when_it_speaks(world: World) -> None:
    [first] = world.fakes
    world.ready(first)
    world.keeper.spawn(1, "respawn", quiet=False, generation=0)
    first.requests()
    [write_fd] = first.write_fds
    world.clock.now += ANSWER_TIMEOUT_S + 1
    world.dispatch()
    assert first.killed()
    world.reap(first)  # it died without answering; maybe after forking the worker
    unclaimed = [k.data for k in world.selector.get_map().values() if isinstance(k.data, UnclaimedPipe)]
    assert len(unclaimed) == 1

    worker = subprocess.Popen(["sleep", "60"])
    world.processes.append(worker)
    os.write(write_fd, b'{"event": "booted", "pid": %d, "identity": "x"}\n' % worker.pid)
    world.dispatch()
    assert worker.wait(timeout=5) == -signal.SIGTERM
    # At the pipe's end (the worker is gone) the supervisor lets go of it.
    first.write_fds.remove(write_fd)
    os.close(write_fd)
    world.dispatch()
    assert not any(isinstance(k.data, UnclaimedPipe) for k in world.selector.get_map().values())


def test_a_restarts_fork_server_not_ready_within_the_boot_timeout_fails_the_restart(world: World) -> None:
    [first] = world.fakes
    world.ready(first)
    world.keeper.load_new_code()
    loading = world.keeper.servers.loading
    assert loading is not None
    world.clock.now += BOOT_TIMEOUT_S + 1
    world.dispatch()
    assert world.fakes[1].killed()
    assert len(world.owner.restart_failures) == 1 and "hung" in world.owner.restart_failures[0]
    assert (
        world.keeper.servers.loading is None
        and world.keeper.servers.current is first.handle
        and world.keeper.ready
    )
    world.reap(world.fakes[1])
    assert loading.pid == 0 and world.keeper.servers.alive() == [first.handle]


def test_a_restarts_fork_server_takes_over_when_ready_and_the_old_one_retires(world: World) -> None:
    [first] = world.fakes
    world.ready(first)
    world.keeper.load_new_code()
    second = world.fakes[1]
    world.ready(second)
    assert world.owner.ready == [False, True]
    assert world.keeper.servers.current is second.handle and first.handle in world.keeper.servers.retired
    assert first.handle.retiring and not first.handle.ready
    assert first.theirs.recv(16) == b""  # told to exit: the supervisor's sending side is shut


def test_a_dead_fork_server_is_started_again_with_a_growing_delay(world: World) -> None:
    [first] = world.fakes
    world.ready(first)
    first.proc.kill()
    world.reap(first)
    assert world.keeper.servers.current is None and world.keeper.next_due_in() == 1.0
    world.clock.now += 0.9
    world.dispatch()
    assert len(world.fakes) == 1
    world.clock.now += 0.1
    world.dispatch()
    second = world.fakes[1]
    assert world.keeper.servers.current is second.handle
    second.proc.kill()  # dies before it is ready: the next try waits longer
    world.reap(second)
    assert world.keeper.next_due_in() == 2.0


def test_a_fork_server_that_reads_nothing_never_blocks_a_send(world: World) -> None:
    # Its socket buffer fills up; every further request fails at once (and leaks no descriptor)
    # instead of blocking the supervisor's loop until the fork server reads again.
    [first] = world.fakes
    world.ready(first)
    sent = 0
    while first.handle.request_requeue(f"h:{sent}:dead", world.clock()):
        sent += 1
        assert sent < 1_000_000, "the socket never filled up"
    open_fds = len(os.listdir("/proc/self/fd"))
    started = time.monotonic()
    with pytest.raises(OSError):
        world.keeper.spawn(0, "respawn", quiet=False, generation=0)
    assert not first.handle.request_requeue("h:more:dead", world.clock())
    assert time.monotonic() - started < 0.5
    assert len(os.listdir("/proc/self/fd")) == open_fds
    assert world.keeper.spawning(0) is None
    # Owing all those answers, it is hung once silent past its deadline.
    world.clock.now += ANSWER_TIMEOUT_S + 1
    world.dispatch()
    assert first.killed()
