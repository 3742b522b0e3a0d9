"""Reading children's state pipes: no child can hold the supervisor's loop by writing without end."""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
import time

from cogworker.settings import load_settings
from supervisor.children.child import Child
from supervisor.children.processes import MAX_READ_PER_TURN, READ_BYTES, ChildProcesses
from supervisor.children.roster import Roster
from supervisor.config import SwarmConfig
from supervisor.wire.child_lines import Garbage


def test_a_child_that_never_stops_writing_gets_one_bounded_read_per_turn() -> None:
    settings = SwarmConfig.from_dict(load_settings().model_dump())
    roster = Roster(1)
    with selectors.DefaultSelector() as selector:
        procs = ChildProcesses(settings, roster, selector, time.monotonic)
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        # `yes` fills the pipe faster than any reader empties it: a read "until nothing is left"
        # would never end, and the loop would stop dispatching signals, reaping, feeding systemd.
        writer = subprocess.Popen(["yes", "a line that is not JSON"], stdout=write_fd)
        os.close(write_fd)
        child = Child(writer.pid, 0, "h:1:n", read_fd, started_at=0.0, last_heard=0.0)
        procs.add(child, current=True)
        items: list[object] = []
        reader = threading.Thread(target=lambda: items.extend(procs.read(child)), daemon=True)
        try:
            assert selector.select(timeout=5), "yes wrote nothing"
            reader.start()
            reader.join(timeout=5)
            assert not reader.is_alive(), "the read never returned"
            assert items and all(isinstance(i, Garbage) for i in items)
            line = len(b"a line that is not JSON\n")
            assert len(items) <= (MAX_READ_PER_TURN + READ_BYTES) // line + 1
            assert child.fd == read_fd  # still open: the rest is read on the next turns
        finally:
            writer.kill()
            writer.wait()
            reader.join(timeout=5)
            procs.close_pipe(child)
