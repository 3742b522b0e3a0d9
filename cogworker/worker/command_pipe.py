"""A self-pipe of one-byte commands: how signal handlers and other threads talk to the main loop.

A signal handler may only record the signal. A lock or an Event taken in a handler can deadlock the
main thread it interrupted (if that thread held the same lock), so handlers write one byte to a
non-blocking pipe and the main loop reads it with select().
"""

from __future__ import annotations

import contextlib
import os
import select

_BYTES = {"stop": b"s", "quiet": b"q", "resume": b"r", "dump": b"d", "stuck": b"k"}
_NAMES = {code[0]: name for name, code in _BYTES.items()}


class CommandPipe:
    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def send(self, name: str) -> None:
        # A full pipe already holds unread commands; dropping this one loses nothing new.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, _BYTES[name])

    def wait(self, timeout_s: float) -> list[str]:
        """Commands received within `timeout_s` (an empty list when none came)."""
        ready, _, _ = select.select([self._read], [], [], max(0.0, timeout_s))
        if not ready:
            return []
        try:
            data = os.read(self._read, 512)
        except BlockingIOError:
            return []
        return [_NAMES[b] for b in data if b in _NAMES]
