"""The sharded fetcher's own connections: one DirectConnection per partition client (so per master
slot), as reliable_fetch.py keeps one to the deployment's Redis: the fetch script per batch is sent
and read without redis-py's pool round, and a settle learns the run_id of the server that fetched.

A second caller (a final ack flush from another thread while the fetcher thread is still stuck) finds a
line taken and goes through that client's pool instead. A WAIT for replicas (COGWORKER_REDIS_MIN_REPLICAS)
goes on the same connection as the write it follows: to the master that holds it.
"""

from __future__ import annotations

import threading
from typing import Any

import redis

from cogworker.store.direct_connection import DirectConnection
from cogworker.store.replicas import AckWait
from cogworker.store.scripts import Scripts
from cogworker.store.shard_clients import ShardClients
from cogworker.store.shards import Partition


class _Line:
    __slots__ = ("direct", "lock")

    def __init__(self, client: redis.Redis) -> None:
        self.direct = DirectConnection(client)
        self.lock = threading.Lock()


class PartitionLines:
    def __init__(self, clients: ShardClients, scripts: Scripts, ack_wait: AckWait | None) -> None:
        self._clients = clients
        self._scripts = scripts
        self._ack_wait = ack_wait
        self._lines: dict[int, _Line] = {}  # by id() of the partition's client (partitions may share one)
        self._lock = threading.Lock()

    def _line(self, partition: Partition) -> _Line:
        client = self._clients.of(partition)
        line = self._lines.get(id(client))
        if line is None:
            with self._lock:
                line = self._lines.get(id(client))
                if line is None:
                    line = self._lines[id(client)] = _Line(client)
        return line

    def run_id(self, partition: Partition) -> str:
        return self._line(partition).direct.run_id

    def run(
        self,
        partition: Partition,
        name: str,
        script_keys: list[str],
        args: list[str | int],
        wait: bool = False,
    ) -> Any:
        client = self._clients.of(partition)
        line = self._line(partition)
        ack_wait = self._ack_wait if wait else None
        command = ack_wait.command_now() if ack_wait is not None else None
        if not line.lock.acquire(blocking=False):
            reply = self._scripts.run(name, script_keys, args, client=client)
            if ack_wait is not None and command is not None:
                ack_wait.observe(client.execute_command(*command))  # type: ignore[no-untyped-call]
            return reply
        try:
            if ack_wait is None or command is None:
                return self._scripts.run_direct(line.direct, name, script_keys, args)
            reply, waited = self._scripts.run_direct_then(line.direct, name, script_keys, args, command)
            ack_wait.observe(waited)
            return reply
        finally:
            line.lock.release()

    def close(self) -> None:
        for line in list(self._lines.values()):
            # A line in use (a final flush) is left to the process's end, as reliable_fetch.py does.
            if line.lock.acquire(blocking=False):
                try:
                    line.direct.close()
                finally:
                    line.lock.release()
