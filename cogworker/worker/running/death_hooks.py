"""The death-hooks thread: pops death notices (cogworker:deaths) and runs this process's on_death
hooks on each (api/death.py says where notices come from and why).

Its own thread, not a poller task: a hook may be slow (it mails someone, calls a web service), and
the poller's work (due retries, orphan recovery) must not wait for it. A process with no hooks makes
no Redis call here: it only looks, once a second, whether a hook has been registered since.

Once: RPOP hands each notice to one process only, which calls its hooks. A process stopping stops
popping; a notice whose hooks were running when the process was killed outright (or that a stop's
wait cut short) is not handed to another: at most once, as a Sidekiq death handler running in a
killed process.

In the sharded layout each queue partition keeps its own deaths list (a job's dead filing pushes its
notice in the job's slot, in the same script): a pass pops from every partition of every known queue
(the home registry, the recorded partition counts, the queues this process reads: a cleared queue's
name leaves the registry while its partitions' jobs can still die) in turn, on each partition's
client, so hooks see the notices of every partition. A partition whose master is away is skipped for
that pass; its notices wait for it.
"""

from __future__ import annotations

import threading

import structlog

from cogworker.api import death
from cogworker.store import key_guard, keys, shards
from cogworker.store.redis_context import RedisContext
from cogworker.store.shard_clients import ShardClients
from cogworker.worker.recovering import partitions

log = structlog.get_logger("cogworker.death")

INTERVAL_S = 1.0
COMPONENT = "Death hooks"


class DeathHookRunner:
    def __init__(
        self, ctx: RedisContext, interval_s: float = INTERVAL_S, clients: ShardClients | None = None
    ) -> None:
        self._clients = clients if shards.is_sharded() else None
        self._queues = tuple(ctx.settings.queue_spec.names)
        self._client = ctx.client
        self._outages = ctx.outages
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._announced: list[str] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="death-hooks", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.run_once()
            except Exception as exc:  # never the thread's end: the next second tries again
                log.error("death_hooks_pass_failed", error=f"{type(exc).__name__}: {exc}")

    def run_once(self) -> int:
        """Pop and handle the waiting notices, one at a time; returns how many were handled."""
        current = death.hooks()
        if not current:
            return 0
        self._announce(current)
        handled = 0
        lists = self._lists()
        while not self._stop.is_set() and lists:
            text = self._pop_any(lists)
            if text is None:
                break
            death.call_hooks(text, current)
            handled += 1
        return handled

    def _lists(self) -> list[str]:
        """The deaths lists to pop from: the one of the one-slot layout, or every partition's."""
        if self._clients is None:
            return [keys.DEATHS]
        try:
            known = partitions.known(self._clients.home, self._queues)
        except Exception as exc:
            self._outages.report(COMPONENT, exc)
            return []
        return [shards.deaths(p) for p in known]

    def _pop_any(self, lists: list[str]) -> str | None:
        """A notice from the first of `lists` that has one; a list found empty (or unreachable) is
        dropped from `lists` for this pass."""
        while lists:
            text = self._pop(lists[0])
            if text is not None:
                return text
            lists.pop(0)
        return None

    def _pop(self, key: str = "") -> str | None:
        """The oldest notice (they are pushed at the head). One at a time, so a slow hook holds no
        other notice back from the other workers."""
        key = key or keys.DEATHS
        client = self._client if self._clients is None else self._clients.for_key(key)
        try:
            popped = client.rpop(key)
        except Exception as exc:
            self._outages.report(COMPONENT, exc)
            if key_guard.is_wrong_type(exc):
                key_guard.request(client, key)
            return None
        self._outages.recovered(COMPONENT)
        return None if popped is None else str(popped)

    def _announce(self, current: list[death.DeathHook]) -> None:
        names = [death.hook_name(hook) for hook in current]
        if names != self._announced:
            self._announced = names
            log.info("death_hooks_registered", hooks=names)
