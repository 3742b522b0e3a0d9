"""The worker's side of the child -> supervisor pipe (cogworker/worker/supervisor_events.py), on a real
pipe: one JSON line per event, and a supervisor that is gone stops the sending instead of crashing the
worker."""

from __future__ import annotations

import errno
import fcntl
import os

import orjson
import pytest

from cogworker.worker.supervisor_events import Reporter


def test_an_unsupervised_reporter_sends_nothing_and_is_never_orphaned() -> None:
    reporter = Reporter(None)
    reporter.send("ready", slot=1)
    assert not reporter.supervised
    assert not reporter.orphaned()


def test_each_event_is_one_json_line_and_an_unencodable_field_is_sent_escaped() -> None:
    read_fd, write_fd = os.pipe()
    try:
        reporter = Reporter(write_fd)
        reporter.send("booted", slot=3)
        reporter.send("boot_error", path=b"/srv/\xff".decode("utf-8", "surrogateescape"))
        lines = os.read(read_fd, 65536).decode().splitlines()
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert orjson.loads(lines[0]) == {"event": "booted", "slot": 3}
    second = orjson.loads(lines[1])
    assert second["event"] == "boot_error" and "srv" in second["path"]
    assert reporter.supervised and not reporter.orphaned()


@pytest.mark.parametrize("gone", ["reader closed", "fd closed"])
def test_a_supervisor_that_is_gone_stops_the_sending(gone: str) -> None:
    read_fd, write_fd = os.pipe()
    if gone == "reader closed":
        os.close(read_fd)  # EPIPE: Python ignores SIGPIPE, so the write raises instead
    else:
        os.close(read_fd)
        os.close(write_fd)  # EBADF
    reporter = Reporter(write_fd)
    reporter.send("status", busy=0)
    assert not reporter.supervised
    reporter.send("stopping")  # a no-op from now on, not an error
    if gone == "reader closed":
        os.close(write_fd)


def test_a_full_pipe_drops_the_line_and_keeps_the_reporter() -> None:
    read_fd, write_fd = os.pipe()
    try:
        flags = fcntl.fcntl(write_fd, fcntl.F_GETFL)
        fcntl.fcntl(write_fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        chunk = b"x" * 65536
        while True:
            try:
                os.write(write_fd, chunk)
            except BlockingIOError:
                break
        reporter = Reporter(write_fd)
        reporter.send("status", busy=1)  # EAGAIN: this status line is lost, the next one is not
        assert reporter.supervised
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_any_other_write_error_is_raised() -> None:
    # /dev/full fails every write with ENOSPC, which is no sign of a departed supervisor.
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as raised:
            Reporter(fd).send("ready")
    finally:
        os.close(fd)
    assert raised.value.errno == errno.ENOSPC
