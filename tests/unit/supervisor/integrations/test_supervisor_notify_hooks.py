"""The swarm's systemd notify hooks, driven with a fake clock, against a real datagram socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.integrations.hooks import AllHooks, SwarmView
from supervisor.integrations.notify import CHILD_ENV_SCRUB, Notifier
from supervisor.integrations.systemd import NotifyHooks


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    """The notifier reads its environment: start each test from none of systemd's variables."""
    for name in CHILD_ENV_SCRUB:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """systemd's end of the socket, named by NOTIFY_SOCKET for the notifiers the test builds."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", sock.getsockname())
    try:
        yield sock
    finally:
        sock.close()


def received(sock: socket.socket) -> list[str]:
    messages = []
    while True:
        try:
            messages.append(sock.recv(4096).decode())
        except BlockingIOError:
            return messages


def view(**changes: object) -> SwarmView:
    base: dict[str, object] = dict(
        count=2,
        children=2,
        ready=2,
        busy=1,
        threads=20,
        processed=5,
        failed=0,
        redis_down=0,
        quiet=False,
        restarting=False,
        stopping=False,
        stop_deadline_in_s=None,
    )
    base.update(changes)
    return SwarmView(**base)  # type: ignore[arg-type]


def hooks_for(monkeypatch: pytest.MonkeyPatch, clock: Clock, **env: str) -> NotifyHooks:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return NotifyHooks(Notifier(), clock=clock)


def test_ready_only_when_every_slot_is_ready(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = hooks_for(monkeypatch, Clock())
    hooks.state_changed(view(ready=0))
    hooks.state_changed(view(ready=1))
    hooks.state_changed(view(ready=2))
    hooks.state_changed(view(ready=2, busy=2))
    messages = received(listener)
    assert messages[0] == "STATUS=starting: 0/2 ready, 1/20 busy, 5 processed, 0 failed, redis up"
    assert messages[1].startswith("STATUS=degraded: 1/2 ready")
    assert messages[2] == "READY=1\nSTATUS=running: 2/2 ready, 1/20 busy, 5 processed, 0 failed, redis up"
    assert messages[3].startswith("STATUS=running: 2/2 ready, 2/20 busy")


def test_reloading_then_ready_around_a_restart(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = hooks_for(monkeypatch, Clock())
    hooks.state_changed(view())
    received(listener)
    hooks.restart_began(True)
    hooks.state_changed(view(restarting=True))
    hooks.restart_ended(False)  # even a failed restart leaves the old children serving
    reloading, status, ready = received(listener)
    lines = reloading.split("\n")
    assert lines[0] == "RELOADING=1" and lines[1].startswith("MONOTONIC_USEC=")
    assert int(lines[1].split("=")[1]) > 0
    assert status.startswith("STATUS=restarting:")
    assert ready == "READY=1"


def test_ready_during_a_restart_waits_for_its_end(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While a restart's new fork server loads the code, every old child is still ready: the views
    # say "all ready", but READY=1 belongs to the restart's end. A fresh notifier (nothing sent yet)
    # is the hardest case: it has no READY=1 of its own to remember.
    hooks = hooks_for(monkeypatch, Clock())
    hooks.restart_began(True)
    hooks.state_changed(view(restarting=True))
    hooks.state_changed(view(restarting=True, busy=2))
    hooks.restart_ended(True)
    hooks.state_changed(view())
    messages = received(listener)
    assert messages[0].startswith("RELOADING=1\n")
    assert messages[1].startswith("STATUS=restarting: 2/2 ready")
    assert messages[2].startswith("STATUS=restarting: 2/2 ready, 2/20 busy")
    assert messages[3] == "READY=1"
    assert messages[4].startswith("STATUS=running: 2/2 ready")  # no second READY=1
    assert len(messages) == 5


def test_stopping_extends_the_timeout_while_draining(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    hooks = hooks_for(monkeypatch, clock)
    hooks.stop_began(35.0)
    assert received(listener) == ["STOPPING=1", "EXTEND_TIMEOUT_USEC=45000000"]
    hooks.tick(view(stopping=True, stop_deadline_in_s=34.0))
    assert received(listener) == []  # not again within two seconds
    clock.now += 2.5
    hooks.tick(view(stopping=True, stop_deadline_in_s=31.5))
    assert received(listener) == ["EXTEND_TIMEOUT_USEC=41500000"]


def test_watchdog_from_the_loop_at_half_the_interval(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    hooks = hooks_for(monkeypatch, clock, WATCHDOG_USEC="4000000")
    assert hooks.wakeup_in() == 0.0
    hooks.tick(view())
    assert received(listener) == ["WATCHDOG=1"]
    assert hooks.wakeup_in() == 2.0
    clock.now += 1.0
    hooks.tick(view())
    assert received(listener) == []
    clock.now += 1.0
    hooks.tick(view())
    assert received(listener) == ["WATCHDOG=1"]


def test_watchdog_for_another_pid_is_not_ours(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = hooks_for(monkeypatch, Clock(), WATCHDOG_USEC="4000000", WATCHDOG_PID="1")
    assert hooks.wakeup_in() is None
    hooks.tick(view())
    assert received(listener) == []


def test_without_notify_socket_nothing_is_sent_and_nothing_fails() -> None:
    hooks = NotifyHooks(Notifier(), clock=Clock())
    hooks.state_changed(view())
    hooks.restart_began(True)
    hooks.restart_ended(True)
    hooks.stop_began(35)
    hooks.tick(view(stopping=True, stop_deadline_in_s=3.0))
    assert hooks.wakeup_in() is None


def test_one_failing_hook_does_not_stop_the_others(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(NotifyHooks):
        def state_changed(self, view: SwarmView) -> None:
            raise RuntimeError("broken hook")

    both = AllHooks([Broken(Notifier(), clock=Clock()), hooks_for(monkeypatch, Clock())])
    both.state_changed(view())
    assert received(listener)[0].startswith("READY=1")
