"""The child side of the child -> supervisor pipe: newline-delimited JSON events.

Events: booted, ready, status (every second), stopping, stopped, stuck (a job stuck past its time
limit: the supervisor replaces this process, worker/running/stuck_jobs.py), and redis (up/down changes ride in
status). `send` may be called from any thread: each line is one write, under PIPE_BUF, so lines never
interleave. The supervisor reads them in supervisor/wire/child_lines.py.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from cogworker import codec


class Reporter:
    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self.parent_pid = os.getppid()

    @property
    def supervised(self) -> bool:
        return self._fd is not None

    def send(self, event: str, **fields: Any) -> None:
        if self._fd is None:
            return
        # Lenient: a field JSON can't hold as it is (a boot error quoting a path that isn't UTF-8)
        # is sent escaped rather than raising in the middle of a boot or a stop.
        line = (codec.dumps_lenient({"event": event, **fields})[0] + "\n").encode()
        try:
            os.write(self._fd, line)
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                self._fd = None  # the supervisor is gone; the parent check stops this process
            elif exc.errno != errno.EAGAIN:
                raise

    def orphaned(self) -> bool:
        """True when the supervisor that forked this process is gone."""
        return self.supervised and os.getppid() != self.parent_pid
