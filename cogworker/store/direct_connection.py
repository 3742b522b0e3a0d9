"""A Redis connection that one thread drives itself, for the fetch loop's command per batch and
the one-queue BLMOVE.

redis-py's client path wraps every command in a pool checkout and return, event dispatch and
metrics recording; for the fetch script that costs about as much CPU as the round trip itself. The
fetcher thread (or the one job thread blocked on the queue) is the only user of its connection, so
it sends and reads directly. A failure behaves as on our clients (connection.py, retries off): the
call raises, and the next call reconnects.
"""

from __future__ import annotations

import re
from typing import Any

import redis

_RUN_ID = re.compile(r"^run_id:([0-9a-f]+)", re.MULTILINE)


class DirectConnection:
    def __init__(self, client: redis.Redis) -> None:
        # Made by the client's pool, so it has the client's address, timeouts and decoding, but
        # not kept in it: nobody else may take it.
        self._conn: Any = client.connection_pool.make_connection()
        # The run_id (INFO server) of the Redis this socket is connected to, read once per socket:
        # a restart or a failover closes the socket, so every reply read on it came from that server.
        # A settle compares it with the run_id it finds then (settle.lua): a different server may
        # have lost the job's in-progress entry. "" when INFO is refused (an ACL) or not read yet.
        self.run_id = ""

    def _connected(self) -> Any:
        """The connection, connected through its own connect(): redis-py's send_command connects a
        closed socket itself, to the connection's last host, bypassing a Sentinel-managed connection's
        connect() that asks the sentinels for the master (so a first call went to localhost:6379, and
        a call after a failover to the dead master).

        A socket with something to read before we sent anything is stale: the server closed it (it
        died, or restarted) while the connection sat idle. Reconnect now, as redis-py's pool does for
        its idle connections, rather than fail the command and report an outage long after it ended
        (the one-queue BLMOVE connection may sit idle for the whole of a busy spell)."""
        conn = self._conn
        try:
            stale = conn._sock is not None and conn.can_read(timeout=0)
        except (redis.ConnectionError, OSError):
            stale = True
        if stale:
            conn.disconnect()
        if conn._sock is None:
            conn.connect()
            self.run_id = self._read_run_id(conn)
        return conn

    @staticmethod
    def _read_run_id(conn: Any) -> str:
        try:
            conn.send_command("INFO", "server")
            info = conn.read_response()
        except redis.ResponseError:
            return ""  # refused (an ACL without INFO): the comparison is off, as before it existed
        except BaseException:
            conn.disconnect()
            raise
        found = _RUN_ID.search(info if isinstance(info, str) else "")
        return found.group(1) if found else ""

    def call(self, *args: Any) -> Any:
        conn = self._connected()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except redis.ResponseError:
            raise  # Redis answered; the connection is fine
        except BaseException:
            # A reply may be half read: never reuse this socket.
            conn.disconnect()
            raise

    def call_many(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Send `commands` in one write and read every reply. A reply that is an error comes back
        as the ResponseError in its place (raising at the first would leave the rest unread)."""
        conn = self._connected()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies
        except BaseException:
            conn.disconnect()
            raise

    def close(self) -> None:
        self._conn.disconnect()
