"""The heartbeat: this process's presence in Redis, and remote commands read on each beat."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import structlog

from cogworker import codec, keys
from cogworker.context import RedisContext

log = structlog.get_logger("cogworker.heartbeat")

REMOTE_COMMANDS = ("quiet", "stop", "resume")


class Heartbeat:
    def __init__(
        self,
        ctx: RedisContext,
        identity: str,
        *,
        reliable: bool,
        busy: Callable[[], int],
        running: Callable[[], list[tuple[str, dict[str, Any]]]],
        quiet: Callable[[], bool],
        on_command: Callable[[str], None],
        tag: str = "",
        version: str = "",
    ) -> None:
        self._client = ctx.client
        self._scripts = ctx.scripts
        self._settings = settings = ctx.settings
        self._outages = ctx.outages
        self.identity = identity
        self.reliable = reliable
        self._busy = busy
        self._running = running
        self._quiet = quiet
        self._on_command = on_command
        self._process = psutil.Process()
        self._info = codec.dumps(
            {
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "identity": identity,
                "queues": list(settings.queue_spec.names),
                "weights": list(settings.queue_spec.weights or ()),
                "concurrency": settings.concurrency,
                "started_at": time.time(),
                "version": version,
                "tag": tag,
            }
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_ok: float | None = None

    def beat(self) -> None:
        """One beat; raises on a Redis error (the caller reports it)."""
        queues = list(self._settings.queue_spec.names)
        args: list[Any] = [
            self.identity,
            int(self._settings.presence_ttl_s),
            "1" if self.reliable else "0",
            self._info,
            self._busy(),
            self._process.memory_info().rss,
            "1" if self._quiet() else "0",
            len(queues),
            *queues,
        ]
        for thread, item in self._running():
            args += [thread, codec.dumps(item)]
        reply = self._scripts.run(
            "heartbeat",
            [
                keys.process(self.identity),
                keys.PROCESSES,
                keys.LAST_BEAT,
                keys.IN_PROGRESS_IDENTITIES,
                keys.LIVE_QUEUES,
                keys.work(self.identity),
                keys.signals(self.identity),
            ],
            args,
            client=self._client,
        )
        self.last_ok = time.monotonic()
        for command in reply[1:]:
            command = str(command)
            if command in REMOTE_COMMANDS:
                log.info("remote_command", command=command)
                self._on_command(command)
            else:
                log.warning("unknown_remote_command", command=command)

    def beat_guarded(self) -> bool:
        try:
            self.beat()
        except Exception as exc:
            self._outages.report("Heartbeat", exc)
            return False
        self._outages.recovered("Heartbeat")
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._settings.heartbeat_interval_s):
            self.beat_guarded()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def clear(self, *, list_empty: bool) -> None:
        """On a clean stop: no longer present. The in-progress registration stays if jobs remain."""
        pipe = self._client.pipeline(transaction=False)
        pipe.delete(keys.process(self.identity))
        pipe.srem(keys.PROCESSES, self.identity)
        pipe.delete(keys.work(self.identity))
        pipe.delete(keys.signals(self.identity))
        if list_empty:
            pipe.srem(keys.IN_PROGRESS_IDENTITIES, self.identity)
            pipe.hdel(keys.LAST_BEAT, self.identity)
        pipe.execute()
