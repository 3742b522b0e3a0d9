"""The heartbeat: this process's presence in Redis, and remote commands read on each beat.

Each beat also rewrites the work hash (`cogworker:work:<identity>`: thread -> the job running on it)
with a bounded summary of each job -- class, jid, queue, run_at and its arguments cut to
`SUMMARY_ARGS_CHARS` -- never the whole payload: a 50 MB job written every beat would push 10 MB/s
into Redis and into every `cogworker status`.

In the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT) the same script call also writes the process's presence
as Sidekiq reads it and takes one signal Sidekiq's API sent it (sidekiq_presence.py); with the mode off
the script's keys, arguments and reply are as they were.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import structlog

from cogworker import codec
from cogworker.store import key_guard, keys, sidekiq_keys
from cogworker.store.redis_context import RedisContext
from cogworker.worker.loops import sidekiq_presence

log = structlog.get_logger("cogworker.heartbeat")

REMOTE_COMMANDS = ("quiet", "stop", "resume")
# Of a running job's arguments, the work hash keeps this many characters of their JSON.
SUMMARY_ARGS_CHARS = 300
TRUNCATED = "… (truncated: {size} bytes of arguments)"


def _text(raw: Any) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return raw if isinstance(raw, str) else ""


def _bounded_args(job: dict[str, Any]) -> list[Any]:
    """The job's args when short; else one string: their JSON cut to SUMMARY_ARGS_CHARS characters,
    with a marker saying how big they were."""
    args = job.get("args")
    listed: list[Any] = list(args) if isinstance(args, list) else []
    try:
        text = codec.dumps(listed)
    except TypeError:
        return ["(arguments can't be shown)"]
    if len(text) <= SUMMARY_ARGS_CHARS:
        return listed
    return [text[:SUMMARY_ARGS_CHARS] + TRUNCATED.format(size=len(text.encode()))]


def summarize(item: dict[str, Any]) -> dict[str, Any]:
    """The work-hash entry for one running job: bounded, whatever the payload's size or form."""
    payload = item.get("payload")
    job = codec.loads_dict(payload) if isinstance(payload, str | bytes) and payload else None
    summary: dict[str, Any] = {"queue": item.get("queue"), "run_at": item.get("run_at")}
    if job is None:
        # Escaped: a payload that isn't UTF-8 (read with surrogateescape) can't go into JSON as is.
        unreadable = codec.escape(_text(payload)[:100])
        summary.update({"jid": None, "class": None, "args": [], "unreadable": unreadable})
        return summary
    jid, name = job.get("jid"), job.get("class")
    summary.update(
        {
            "jid": jid if isinstance(jid, str) else None,
            "class": name if isinstance(name, str) else None,
            "args": _bounded_args(job),
        }
    )
    return summary


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
        stopping: Callable[[], bool] = lambda: False,
        async_slots: int = 0,
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
        self._stopping = stopping
        self._on_command = on_command
        self._process = psutil.Process()
        started_at = time.time()
        self._info = codec.dumps(
            {
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "identity": identity,
                "queues": list(settings.queue_spec.names),
                "weights": list(settings.queue_spec.weights or ()),
                "concurrency": settings.concurrency,
                "async_concurrency": async_slots,
                "started_at": started_at,
                "version": version,
                "tag": tag,
            }
        )
        # The Sidekiq mode: Sidekiq's presence on the same round trip (worker/loops/sidekiq_presence.py).
        self._sidekiq: sidekiq_presence.SidekiqPresence | None = None
        if sidekiq_keys.enabled():
            sidekiq_info = sidekiq_presence.info(
                identity,
                settings.queue_spec,
                concurrency=settings.concurrency + async_slots,
                tag=tag,
                version=version,
                started_at=started_at,
            )
            self._sidekiq = sidekiq_presence.SidekiqPresence(
                identity,
                codec.dumps(sidekiq_info),
                max(sidekiq_presence.PRESENCE_TTL_S, int(settings.presence_ttl_s)),
            )
        self._rtt_us = 0
        # thread -> (the payload object, its Sidekiq busy-jobs entry), as `_summaries` for the work hash.
        self._sidekiq_entries: dict[str, tuple[object, str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_ok: float | None = None
        # thread -> (the payload object, its summary): a job's payload is decoded once, not per beat.
        self._summaries: dict[str, tuple[object, str]] = {}
        self._wrong_type_reported: dict[str, float] = {}

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
            # "2": stopping (and so quiet too), written as its own presence field: while a stopping
            # process drains its running jobs, `/busy` shows it stopping rather than merely quiet.
            "2" if self._stopping() else "1" if self._quiet() else "0",
            len(queues),
            *queues,
        ]
        running = self._running()
        args += self._work_entries(running)
        script_keys = [
            keys.process(self.identity),
            keys.PROCESSES,
            keys.LAST_BEAT,
            keys.IN_PROGRESS_IDENTITIES,
            keys.LIVE_QUEUES,
            keys.work(self.identity),
            keys.signals(self.identity),
        ]
        sidekiq = self._sidekiq
        if sidekiq is not None:
            script_keys += sidekiq.keys
            args += sidekiq.args(
                busy=int(args[4]),
                quiet=args[6] != "0",
                rss_bytes=int(args[5]),
                rtt_us=self._rtt_us,
                entries=self._sidekiq_busy_entries(running),
            )
        sent = time.monotonic()
        reply = self._scripts.run("heartbeat", script_keys, args, client=self._client)
        self.last_ok = time.monotonic()
        self._rtt_us = int((self.last_ok - sent) * 1_000_000)
        failed = int(reply[1])
        if failed:
            self._report_failed_keys([str(k) for k in reply[2 : 2 + failed]])
        commands = reply[2 + failed :]
        if sidekiq is not None:
            self._handle_sidekiq_signal(str(commands[0]))
            commands = commands[1:]
        self._handle_commands([str(c) for c in commands])

    def _handle_sidekiq_signal(self, name: str) -> None:
        """A signal from Sidekiq's API or Web UI (Process#quiet!, #stop!, #dump_threads), as a remote
        command: TSTP quiet, TERM stop, TTIN the thread dump."""
        if not name:
            return
        command = sidekiq_presence.command_for(name)
        if command is None:
            log.warning("unknown_sidekiq_signal", signal=name)
            return
        log.info("sidekiq_signal", signal=name, command=command)
        self._on_command(command)

    def _sidekiq_busy_entries(self, running: list[tuple[str, dict[str, Any]]]) -> list[str]:
        entries: list[str] = []
        cache: dict[str, tuple[object, str]] = {}
        for thread, item in running:
            payload = item.get("payload")
            cached = self._sidekiq_entries.get(thread)
            if cached is None or cached[0] is not payload:
                job = codec.loads_dict(payload) if isinstance(payload, str | bytes) and payload else None
                bounded = _bounded_args(job) if job is not None else []
                cached = (payload, sidekiq_presence.busy_entry(item, job, bounded))
            cache[thread] = cached
            entries += [thread, cached[1]]
        self._sidekiq_entries = cache
        return entries

    def _handle_commands(self, commands: list[str]) -> None:
        """Handle remote commands (oldest first), then trim them off their list. If the trim fails
        they come again with the next beat: handling one twice changes nothing (quiet, resume, stop)."""
        if not commands:
            return
        for command in commands:
            if command in REMOTE_COMMANDS:
                log.info("remote_command", command=command)
                self._on_command(command)
            else:
                log.warning("unknown_remote_command", command=command)
        # Newer commands are pushed at the head: the ones handled are the oldest, at the tail.
        self._client.ltrim(keys.signals(self.identity), 0, -(len(commands) + 1))

    def _work_entries(self, running: list[tuple[str, dict[str, Any]]]) -> list[str]:
        entries: list[str] = []
        summaries: dict[str, tuple[object, str]] = {}
        for thread, item in running:
            payload = item.get("payload")
            cached = self._summaries.get(thread)
            if cached is None or cached[0] is not payload:
                cached = (payload, codec.dumps(summarize(item)))
            summaries[thread] = cached
            entries += [thread, cached[1]]
        self._summaries = summaries
        return entries

    def _report_failed_keys(self, failed: list[str]) -> None:
        """A beat wrote everything but these keys (wrong type): logged now and then, guard asked."""
        now = time.monotonic()
        fresh = [k for k in failed if self._wrong_type_reported.get(k, -60.0) < now - 60.0]
        if not fresh:
            return
        self._wrong_type_reported.update(dict.fromkeys(fresh, now))
        log.error("heartbeat_write_failed", keys=fresh, note="wrong type? the key guard is asked")
        key_guard.request(self._client, *fresh)

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
        if self._sidekiq is not None:
            self._sidekiq.clear(pipe)
        if list_empty:
            pipe.srem(keys.IN_PROGRESS_IDENTITIES, self.identity)
            pipe.hdel(keys.LAST_BEAT, self.identity)
        pipe.execute()
