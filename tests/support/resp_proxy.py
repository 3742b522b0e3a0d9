"""A fault-injecting Redis proxy for tests: lose a reply after the command ran, drop a command before
it is sent, or hold replies back.

It runs in the test's process, on its own thread and asyncio loop, between real clients (the test's,
a `cogworker run` child's) and a real redis-server. Each client connection gets its own upstream
connection; the proxy frames commands and replies (resp_wire.py, RESP2 and RESP3, pipelines too) and
pairs each reply with its command, first in first out. Faults (proxy_rules.py):

  lose   the command (and every command before it on the connection) is sent and runs; its reply is
         thrown away and the client's connection is closed, so the client sees the connection break
         and can't know the command ran. Commands the client pipelined after it are never sent.
  drop   the command is never sent, nor anything after it on the connection; the replies to the
         commands before it are delivered, then the connection is closed.
  delay  its reply, and every later reply on the connection (order is kept), is held `seconds`:
         past the client's socket timeout, the client gives up while Redis has run the command.

A connection that subscribes (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE) or MONITORs is passed through
untouched from then on: its messages answer no command. RESP3 pushes pass without being paired.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import redis

from tests.support.paths import ROOT
from tests.support.proxy_rules import (
    DELAY,
    DROP,
    LOSE,
    Fault,
    Rule,
    RuleBook,
    ScriptBook,
    cogworker_script_texts,
)
from tests.support.resp_wire import Incomplete, command_frame, reply_frame

LUA_DIR = ROOT / "cogworker" / "store" / "lua"
_PASS_THROUGH = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"})
_CLOSE = b""


@dataclass
class _Pending:
    """A command sent upstream whose reply hasn't come back."""

    name: str
    scripts: frozenset[str]
    args: list[bytes]
    candidates: list[Rule]
    # Set once the reply is in for a command a lost reply may be armed on: nothing after it is sent
    # until then. `lost` says whether the reply was lost.
    decided: asyncio.Event | None = None
    lost: bool = False
    switches_to_pass_through: bool = False


@dataclass(eq=False)
class _Link:
    """One client connection and its own upstream connection."""

    id: int
    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    upstream_reader: asyncio.StreamReader
    upstream_writer: asyncio.StreamWriter
    pending: deque[_Pending] = field(default_factory=deque)
    out: asyncio.Queue[tuple[bytes, float]] = field(default_factory=asyncio.Queue)
    pass_through: bool = False
    draining: bool = False
    closed: bool = False
    held_until: float = 0.0

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for writer in (self.client_writer, self.upstream_writer):
                with contextlib.suppress(Exception):
                    writer.close()


class RespProxy:
    """A proxy on 127.0.0.1:`port` in front of the redis-server at `upstream_port`.

    Arm faults with `lose_reply`, `drop_command`, `delay_reply` (each returns its Rule: `rule.fired`
    counts the commands it acted on); `faults` lists what fired; `wait_fired` waits for a rule."""

    def __init__(
        self, upstream_port: int, *, upstream_host: str = "127.0.0.1", known_texts: tuple[str, ...] = ()
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.book = RuleBook()
        self.scripts = ScriptBook(LUA_DIR, known_texts or cogworker_script_texts())
        # The last commands forwarded, by name and script names: what a test can check went through.
        self.forwarded: deque[tuple[int, str, frozenset[str]]] = deque(maxlen=10_000)
        self._links: set[_Link] = set()
        self._next_link = 1
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="resp-proxy", daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    # -- the test's side ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: Any) -> redis.Redis:
        """A client through the proxy, with redis-py's retries off (a retry would hide the fault)."""
        options.setdefault("decode_responses", True)
        options.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, retry=None, **options)

    def lose_reply(self, **match: Any) -> Rule:
        """Let the matching command run, then lose its reply and close the client's connection."""
        return self._arm(LOSE, match)

    def drop_command(self, **match: Any) -> Rule:
        """Never send the matching command (nor what follows it); close the client's connection."""
        return self._arm(DROP, match)

    def delay_reply(self, seconds: float, **match: Any) -> Rule:
        """Hold the matching command's reply (and later ones on its connection) for `seconds`."""
        return self._arm(DELAY, {**match, "seconds": seconds})

    def _arm(self, action: str, match: dict[str, Any]) -> Rule:
        """Match on `command` (a name or names), `script` (a .lua file's name), `arg` (a substring of
        an argument), with `count` (None: forever), `skip`, `reply_contains`, `reply_lacks`."""
        command = match.pop("command", ())
        names = (command,) if isinstance(command, str) else tuple(command)
        match["command"] = tuple(n.upper() for n in names)
        for key in ("arg", "reply_contains", "reply_lacks"):
            if isinstance(match.get(key), str):
                match[key] = match[key].encode()
        return self.book.arm(action, **match)

    @property
    def faults(self) -> list[Fault]:
        return list(self.book.faults)

    def wait_fired(self, rule: Rule, times: int = 1, timeout: float = 30.0) -> None:
        self.book.wait_fired(rule, times, timeout)

    def clear(self) -> None:
        """Disarm every rule (the faults fired stay listed)."""
        self.book.clear()

    def kick(self) -> int:
        """Close every client connection now; returns how many there were."""

        async def kick_all() -> int:
            links = list(self._links)
            for link in links:
                link.close()
            return len(links)

        return int(self._call(kick_all()))

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for link in list(self._links):
                link.close()
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            await self._server.wait_closed()

        if self._loop.is_running():
            with contextlib.suppress(Exception):
                self._call(stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    # -- the loop's side ---------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()  # Redis is down: the client sees its connection refused by closing
            return
        link = _Link(self._next_link, reader, writer, up_reader, up_writer)
        self._next_link += 1
        self._links.add(link)
        # The connection ends when the client closes it, or when every reply due is delivered after a
        # fault or after Redis closed its side; not when sending stops (replies may still be due).
        commands = asyncio.ensure_future(self._commands(link))
        tasks = [
            commands,
            asyncio.ensure_future(self._replies(link)),
            asyncio.ensure_future(self._deliver(link)),
        ]
        try:
            watched = set(tasks)
            while watched:
                done, watched = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                if any(
                    task is not commands or task.exception() is not None or task.result() for task in done
                ):
                    break
        finally:
            link.close()
            for task in tasks:
                task.cancel()
            self._links.discard(link)

    async def _commands(self, link: _Link) -> bool:
        """Client to upstream: frame each command, decide its fault, forward what may go. True when
        the client closed its connection, False when nothing more may be sent on it."""
        buf = bytearray()
        while not link.closed:
            data = await link.client_reader.read(65536)
            if not data:
                return True
            if link.pass_through:
                link.upstream_writer.write(data)
                await link.upstream_writer.drain()
                continue
            buf += data
            while buf and not link.pass_through:
                try:
                    args, raw, end = command_frame(buf, 0)
                except Incomplete:
                    break
                del buf[:end]
                if not args:
                    continue
                if not await self._forward(link, args, raw):
                    return False  # dropped, or its reply lost: nothing more is sent on it
            if link.pass_through and buf:
                link.upstream_writer.write(bytes(buf))
                buf.clear()
                await link.upstream_writer.drain()
        return True

    async def _forward(self, link: _Link, args: list[bytes], raw: bytes) -> bool:
        name = args[0].decode("utf-8", "replace").upper()
        if name == "SCRIPT" and len(args) > 2 and args[1].upper() == b"LOAD":
            self.scripts.learn(args[2])
        scripts = self.scripts.names(name, args)
        dropped = self.book.drop_for(name, scripts, args)
        if dropped is not None:
            self.book.record(Fault(dropped.id, DROP, name, tuple(sorted(scripts)), link.id, tuple(args[1:6])))
            link.draining = True
            if not link.pending:
                link.out.put_nowait((_CLOSE, 0.0))
            return False
        entry = _Pending(name, scripts, args, self.book.candidates(name, scripts, args))
        if any(rule.action == LOSE for rule in entry.candidates):
            entry.decided = asyncio.Event()
        if name in _PASS_THROUGH:
            entry.switches_to_pass_through = link.pass_through = True
        link.pending.append(entry)
        self.forwarded.append((link.id, name, scripts))
        link.upstream_writer.write(raw)
        await link.upstream_writer.drain()
        if entry.decided is not None:
            await entry.decided.wait()
            return not entry.lost
        return True

    async def _replies(self, link: _Link) -> None:
        """Upstream to client: pair each reply with its command and apply the verdict."""
        buf = bytearray()
        while not link.closed:
            data = await link.upstream_reader.read(65536)
            if not data:
                link.out.put_nowait((_CLOSE, 0.0))  # Redis closed: deliver what came, then close
                return
            if link.pass_through and not link.pending:
                link.out.put_nowait((bytes(data), 0.0))
                continue
            buf += data
            while buf:
                if link.pass_through and not link.pending:
                    link.out.put_nowait((bytes(buf), 0.0))
                    buf.clear()
                    break
                try:
                    frame, end = reply_frame(buf, 0)
                except Incomplete:
                    break
                del buf[:end]
                if frame.push and not (link.pending and link.pending[0].switches_to_pass_through):
                    link.out.put_nowait((frame.raw, 0.0))
                    continue
                if not link.pending:
                    link.out.put_nowait((frame.raw, 0.0))
                    continue
                if not self._answer(link, link.pending.popleft(), frame.raw):
                    return

    def _answer(self, link: _Link, entry: _Pending, reply: bytes) -> bool:
        """Deliver, hold or lose one reply; False once the connection is to be closed."""
        rule = self.book.verdict(entry.candidates, reply) if entry.candidates else None
        scripts = tuple(sorted(entry.scripts))
        if rule is not None and rule.action == LOSE:
            entry.lost = True
            self.book.record(
                Fault(rule.id, LOSE, entry.name, scripts, link.id, tuple(entry.args[1:6]), reply)
            )
            link.out.put_nowait((_CLOSE, 0.0))
        else:
            hold = 0.0
            if rule is not None:
                hold = rule.seconds
                self.book.record(
                    Fault(rule.id, DELAY, entry.name, scripts, link.id, tuple(entry.args[1:6]), reply)
                )
            link.out.put_nowait((reply, hold))
            if link.draining and not link.pending:
                link.out.put_nowait((_CLOSE, 0.0))
        if entry.decided is not None:
            entry.decided.set()
        return not entry.lost

    async def _deliver(self, link: _Link) -> None:
        """Write replies to the client in order, honouring holds; close when told to."""
        while True:
            data, hold = await link.out.get()
            if data == _CLOSE:
                return
            now = time.monotonic()
            if hold:
                link.held_until = max(link.held_until, now + hold)
            if link.held_until > now:
                await asyncio.sleep(link.held_until - now)
            link.client_writer.write(data)
            await link.client_writer.drain()
