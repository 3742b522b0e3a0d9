"""Every command a Redis runs, as MONITOR reports it, for tests that check which keys were touched.

Each line is one command: who ran it (a client address, or "lua" for a command a script ran) and its
arguments as bytes. A script's own commands follow its EVAL/EVALSHA line directly (a script runs
alone), so the keys it touched can be set against the keys it declared.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import redis

ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", '"': b'"', "\\": b"\\"}


@dataclass(frozen=True, slots=True)
class Command:
    source: str  # "lua" for a command a script ran
    args: tuple[bytes, ...]

    @property
    def name(self) -> str:
        return self.args[0].decode().upper()


def parse(line: bytes) -> Command:
    """`<time> [<db> <client>] "ARG" ...` with each argument escaped as Redis's sdscatrepr does."""
    text = line.decode("latin-1")
    head, _, rest = text.partition("] ")
    source = head.rpartition(" ")[2]
    args: list[bytes] = []
    i = 0
    while i < len(rest):
        if rest[i] != '"':
            i += 1
            continue
        arg, i = bytearray(), i + 1
        while rest[i] != '"':
            if rest[i] == "\\":
                if rest[i + 1] == "x":
                    arg.append(int(rest[i + 2 : i + 4], 16))
                    i += 4
                    continue
                arg += ESCAPES[rest[i + 1]]
                i += 2
                continue
            arg += rest[i].encode("latin-1")
            i += 1
        args.append(bytes(arg))
        i += 1
    return Command(source, tuple(args))


class Monitor:
    """Reads MONITOR on its own connection, in a thread, until `stop`."""

    def __init__(self, url: str) -> None:
        self._pool = redis.ConnectionPool.from_url(url)
        self._conn = self._pool.get_connection()
        self._conn.send_command("MONITOR")  # type: ignore[no-untyped-call]
        assert self._conn.read_response() in (b"OK", "OK")  # type: ignore[no-untyped-call]
        self.lines: list[bytes] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._conn.can_read(timeout=0.2):  # type: ignore[no-untyped-call]
                    self.lines.append(self._conn.read_response())  # type: ignore[no-untyped-call]
            except (redis.ConnectionError, OSError):
                return

    def stop(self) -> list[Command]:
        """Stop reading; every command seen, in order."""
        self._stopping.set()
        self._thread.join(timeout=10)
        self._conn.disconnect()  # type: ignore[no-untyped-call]
        self._pool.disconnect()
        return [parse(line) for line in self.lines if b"] " in line]
