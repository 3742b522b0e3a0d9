"""systemd's end of NOTIFY_SOCKET for tests: a datagram listener that stamps each message on arrival."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.redis_server import wait_until


@dataclass(frozen=True)
class Datagram:
    at: float  # time.monotonic() when it arrived
    text: str

    @property
    def fields(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.text.split("\n") if "=" in line)

    @property
    def status(self) -> str | None:
        return self.fields.get("STATUS")

    def has(self, key: str) -> bool:
        return key in self.fields


class NotifyListener:
    """systemd's end of the socket: a thread receives every datagram and stamps it on arrival."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if kind == "path":
            address = str(directory / "notify")
            self.notify_socket = address
        else:
            name = f"cogworker-test-{uuid.uuid4().hex}"
            address = "\0" + name
            self.notify_socket = "@" + name
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self._received: list[Datagram] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._received.append(Datagram(time.monotonic(), data.decode()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    @property
    def messages(self) -> list[Datagram]:
        with self._lock:
            return list(self._received)

    def wait(
        self, predicate: Callable[[Datagram], bool], *, after: int = 0, timeout: float = 45, what: str = ""
    ) -> int:
        """Index of the first datagram from `after` on that satisfies `predicate`."""

        def find() -> int | None:
            for index, message in enumerate(self.messages[after:], start=after):
                if predicate(message):
                    return index + 1  # truthy even for index 0
            return None

        return int(wait_until(find, timeout=timeout, interval=0.02, message=what or "a datagram")) - 1

    def dump(self) -> str:
        return "\n".join(f"{m.at:.3f} {m.text!r}" for m in self.messages)
