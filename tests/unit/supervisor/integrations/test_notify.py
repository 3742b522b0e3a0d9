"""supervisor/integrations/notify.py against a real datagram listener at NOTIFY_SOCKET."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sdnotify
from structlog.testing import capture_logs

from supervisor.integrations.notify import CHILD_ENV_SCRUB, Notifier, scrub_child_env


@dataclass
class Listener:
    """The systemd end: a bound datagram socket and the NOTIFY_SOCKET value that names it."""

    sock: socket.socket
    notify_socket: str

    def recv(self) -> bytes:
        # Blocks until the datagram is there (the send already happened), with a deadline.
        self.sock.settimeout(5)
        return self.sock.recv(4096)

    def assert_empty(self) -> None:
        self.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            self.sock.recv(4096)


def _path_listener(directory: Path) -> Listener:
    path = str(directory / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    return Listener(sock, path)


def _abstract_listener() -> Listener:
    name = f"cogworker-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    return Listener(sock, "@" + name)


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest, short_dir: Path) -> Iterator[Listener]:
    made = _path_listener(short_dir) if request.param == "path" else _abstract_listener()
    try:
        yield made
    finally:
        made.sock.close()


def notifier_for(monkeypatch: pytest.MonkeyPatch, notify_socket: str, **env: str) -> Notifier:
    """A Notifier built as the supervisor builds it: from its environment (set here)."""
    for name in CHILD_ENV_SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Notifier()


@pytest.fixture
def notifier(listener: Listener, monkeypatch: pytest.MonkeyPatch) -> Iterator[Notifier]:
    made = notifier_for(monkeypatch, listener.notify_socket)
    try:
        yield made
    finally:
        made.close()


def test_each_message_is_one_datagram_with_exact_bytes(listener: Listener, notifier: Notifier) -> None:
    cases: list[tuple[Callable[[], bool], bytes]] = [
        (lambda: notifier.ready(), b"READY=1"),
        (lambda: notifier.ready(status="8/8 ready"), b"READY=1\nSTATUS=8/8 ready"),
        (lambda: notifier.status("busy 3/80, processed 12"), b"STATUS=busy 3/80, processed 12"),
        (lambda: notifier.watchdog(), b"WATCHDOG=1"),
        (lambda: notifier.stopping(), b"STOPPING=1"),
        (lambda: notifier.extend_timeout(45), b"EXTEND_TIMEOUT_USEC=45000000"),
        (lambda: notifier.extend_timeout(0.25), b"EXTEND_TIMEOUT_USEC=250000"),
        # A deadline already past asks for no more time; it does not raise into the event loop.
        (lambda: notifier.extend_timeout(-3), b"EXTEND_TIMEOUT_USEC=0"),
        (lambda: notifier.send("MAINPID=1"), b"MAINPID=1"),
    ]
    for send, expected in cases:
        assert send() is True
        assert listener.recv() == expected
    listener.assert_empty()


def test_status_is_one_line_of_utf8(listener: Listener, notifier: Notifier) -> None:
    # A second line would be read as another field: an error message could forge READY=1.
    assert notifier.status("redis down:\nREADY=1\r\n  retrying ") is True
    assert listener.recv() == b"STATUS=redis down: READY=1 retrying"
    assert notifier.ready(status="caf\u00e9 \u2713\x00x") is True
    assert listener.recv() == "READY=1\nSTATUS=caf\u00e9 \u2713 x".encode()


def test_reloading_carries_a_plausible_monotonic_usec(listener: Listener, notifier: Notifier) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading() is True
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    match = re.fullmatch(rb"RELOADING=1\nMONOTONIC_USEC=(\d+)", listener.recv())
    assert match is not None
    assert before <= int(match.group(1)) <= after


def test_one_socket_is_reused_and_reopened_after_close(listener: Listener, notifier: Notifier) -> None:
    notifier.watchdog()
    first = notifier._transport
    assert isinstance(first, sdnotify.SystemdNotifier)  # sdnotify is the transport
    notifier.watchdog()
    assert notifier._transport is first
    notifier.close()
    assert notifier._transport is None
    assert notifier.watchdog() is True
    assert [listener.recv() for _ in range(3)] == [b"WATCHDOG=1"] * 3


def test_settings_are_read_at_construction(listener: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    made = notifier_for(monkeypatch, listener.notify_socket, WATCHDOG_USEC="4000000")
    assert made.ready() is True
    assert listener.recv() == b"READY=1"
    # A connection made keeps working after the variables are gone; a new one can't be made (sdnotify
    # reads NOTIFY_SOCKET when it connects), and that is logged rather than sent somewhere else.
    scrub_child_env(os.environ)
    assert made.watchdog_interval_s() == 2.0
    assert made.watchdog() is True
    assert listener.recv() == b"WATCHDOG=1"
    made.close()
    with capture_logs() as logs:
        assert made.watchdog() is False
    assert _failures(logs) == ["EDESTADDRREQ"]


def test_without_notify_socket_everything_is_a_quiet_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CHILD_ENV_SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    with capture_logs() as logs:
        made = Notifier()
        assert made.enabled is False
        results = [
            made.ready(),
            made.ready(status="x"),
            made.status("x"),
            made.watchdog(),
            made.reloading(),
            made.stopping(),
            made.extend_timeout(10),
            made.send("READY=1"),
        ]
        # Nowhere to send pings to, so no watchdog either.
        assert made.watchdog_interval_s() is None
        made.close()
    assert results == [False] * len(results)
    assert made._transport is None
    assert logs == []


def _failures(logs: Sequence[Mapping[str, Any]]) -> list[object]:
    return [entry["errno"] for entry in logs if entry["log_level"] == "error"]


def test_a_missing_socket_returns_false_and_logs_once_per_errno(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = short_dir / "gone"
    made = notifier_for(monkeypatch, str(path))
    with capture_logs() as logs:
        assert made.watchdog() is False
        assert made.status("x") is False
        assert _failures(logs) == ["ENOENT"]
        entry = logs[0]
        assert entry["socket"] == str(path)
        assert "systemd notify failed" in str(entry["event"])

        # A socket file nobody listens on any more: a different errno, so a new line.
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(path))
        dead.close()
        assert made.watchdog() is False
        assert made.watchdog() is False
        assert _failures(logs) == ["ENOENT", "ECONNREFUSED"]

        # Recovery is logged once, and a later failure is news again.
        path.unlink()
        live = _path_listener(short_dir)
        os.rename(live.notify_socket, path)
        assert made.watchdog() is True
        assert live.recv() == b"WATCHDOG=1"
        assert [e["event"] for e in logs if e["log_level"] == "info"] == ["systemd notify works again"]
        # The listener goes away: the connection is refused, then a new one finds no socket.
        live.sock.close()
        path.unlink()
        assert made.watchdog() is False
        assert made.watchdog() is False
        assert _failures(logs) == ["ENOENT", "ECONNREFUSED", "ECONNREFUSED", "ENOENT"]
    made.close()


@pytest.mark.parametrize("address", ["relative/notify", "@"])
def test_an_unusable_address_is_logged_not_raised(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made = notifier_for(monkeypatch, address)
    with capture_logs() as logs:
        assert made.ready() is False
        assert made.watchdog() is False
    assert _failures(logs) == ["EAFNOSUPPORT"]


def test_an_address_too_long_for_a_unix_socket_is_logged_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    made = notifier_for(monkeypatch, "/" + "x" * 200)
    with capture_logs() as logs:
        assert made.ready() is False
        assert made.watchdog() is False
    failures = [e for e in logs if e["log_level"] == "error"]
    assert len(failures) == 1 and "too long" in failures[0]["reason"]


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_a_full_queue_fails_the_send_instead_of_blocking(
    kind: str, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nobody reads the listener: sends must fail with EAGAIN rather than stall the event loop.
    listener = _path_listener(short_dir) if kind == "path" else _abstract_listener()
    made = notifier_for(monkeypatch, listener.notify_socket)
    with capture_logs() as logs:
        results = [made.watchdog() for _ in range(5000)]
    assert results[0] is True
    assert False in results
    assert _failures(logs) == ["EAGAIN"]
    listener.sock.close()
    made.close()


def test_extend_timeout_rejects_a_non_number(listener: Listener, notifier: Notifier) -> None:
    with pytest.raises(ValueError, match="finite"):
        notifier.extend_timeout(float("nan"))
    listener.assert_empty()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "<self>"}, 15.0),
        # Inherited from a parent: the watchdog is that process's, not ours.
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "nonsense"}, None),
        ({}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_for_its_own_pid(
    env: dict[str, str], expected: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {key: str(os.getpid()) if value == "<self>" else value for key, value in env.items()}
    assert notifier_for(monkeypatch, "@unused", **environ).watchdog_interval_s() == expected


def test_scrub_child_env_removes_only_the_notify_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": "42",
        "COGWORKER_COUNT": "4",
        "PATH": "/usr/bin",
    }
    scrub_child_env(env)
    assert env == {"COGWORKER_COUNT": "4", "PATH": "/usr/bin"}
    scrub_child_env(env)  # nothing left to remove is not an error
    assert env == {"COGWORKER_COUNT": "4", "PATH": "/usr/bin"}

    monkeypatch.setenv("NOTIFY_SOCKET", "@x")
    monkeypatch.setenv("WATCHDOG_PID", "1")
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    scrub_child_env(os.environ)
    assert "NOTIFY_SOCKET" not in os.environ
    assert "WATCHDOG_PID" not in os.environ


def test_an_abstract_socket_that_appears_later_is_connected_then(monkeypatch: pytest.MonkeyPatch) -> None:
    # `@name` is Linux's abstract namespace: nothing on disk, and nobody bound to it yet.
    name = f"cogworker-test-{uuid.uuid4().hex}"
    made = notifier_for(monkeypatch, "@" + name)
    with capture_logs() as logs:
        assert made.ready() is False
        assert made.watchdog() is False
        assert _failures(logs) == ["ECONNREFUSED"]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind("\0" + name)
        listener = Listener(sock, "@" + name)
        try:
            assert made.ready(status="caf\u00e9") is True
            assert listener.recv() == "READY=1\nSTATUS=caf\u00e9".encode()
        finally:
            sock.close()
            made.close()
    assert [e["event"] for e in logs if e["log_level"] == "info"] == ["systemd notify works again"]


def test_the_transport_imports_nothing_heavy() -> None:
    # The supervisor stays small (RSS <= 30 MB): importing notify must not pull in a Redis client,
    # pydantic or anything of the sort; sdnotify itself uses only the standard library.
    code = (
        "import sys; before = set(sys.modules); import supervisor.integrations.notify; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    loaded = set(result.stdout.split())
    assert "sdnotify" in loaded
    assert not {
        m
        for m in loaded
        if m.split(".")[0] in {"redis", "pydantic", "pydantic_settings", "prometheus_client", "psutil"}
    }
