"""The supervisor stays lean (RSS <= 30 MB, so a swarm per host costs little beyond its workers):
measured on a real swarm, systemd notify on. See "The three processes" in docs/architecture.md."""

from __future__ import annotations

import socket
import uuid

import psutil
import pytest

from cogworker import exitcodes
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow

MAX_SUPERVISOR_RSS_MB = 30


def test_the_supervisor_with_notify_on_stays_under_its_rss_budget(swarms: SwarmRunner) -> None:
    # An abstract NOTIFY_SOCKET, so the sdnotify transport is loaded and used as under systemd.
    name = f"cogworker-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        # The budget is the supervisor's own: under `make test` coverage would trace this swarm and
        # add its tracer's memory, so an empty COVERAGE_PROCESS_CONFIG keeps coverage out of it.
        swarm = swarms.start(NOTIFY_SOCKET="@" + name, COVERAGE_PROCESS_CONFIG="")
        listener.settimeout(45)  # a bound for a loaded machine: READY=1 came after 5 s once
        wait_until(lambda: b"READY=1" in listener.recv(4096), message="READY=1 over the abstract socket")
        rss_mb = psutil.Process(swarm.pid).memory_info().rss / 2**20
        assert rss_mb <= MAX_SUPERVISOR_RSS_MB, f"supervisor RSS {rss_mb:.1f} MB"
        assert swarm.stop() == exitcodes.OK
