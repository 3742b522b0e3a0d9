"""The signal self-pipe: what the handlers record, the loop reads in order."""

from __future__ import annotations

import os
import signal

from supervisor.signals import SignalPipe


def test_signal_pipe_hands_over_signal_numbers_in_order() -> None:
    pipe = SignalPipe()
    try:
        _, write_fd = pipe.fds
        os.write(write_fd, bytes([signal.SIGHUP, signal.SIGTERM, 0]))
        assert pipe.drain() == [signal.SIGHUP, signal.SIGTERM]
        assert pipe.drain() == []
    finally:
        pipe.close()
