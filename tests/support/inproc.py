"""Running queued jobs in the test process through the real processor and settler (reliable-fetch
style: each job is moved onto an in-progress list first, and acknowledged after)."""

from __future__ import annotations

import redis

from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.settling.settle import Settler
from tests.support.components import Parts, build

IN_PROGRESS = keys.in_progress("inproc:0:0")


class Runner:
    def __init__(self, settings: Settings) -> None:
        self.parts: Parts = build(settings)
        self.settler = Settler(self.parts.ctx, IN_PROGRESS)
        self.stats = Stats()
        self.allowed = settings.require_modules

    @property
    def client(self) -> redis.Redis:
        return self.parts.client

    def run_next(self, queue: str = "default") -> bool:
        """Run the job popped next from `queue`; False when the queue is empty."""
        raw = self.client.lmove(keys.queue(queue), IN_PROGRESS, "RIGHT", "LEFT")
        if raw is None:
            return False
        self.run_raw(str(raw), queue)
        return True

    def run_raw(self, raw: str, queue: str = "default") -> None:
        process(Work(queue, raw), self.settler, self.stats, allowed=self.allowed)
        for acked, _jid in self.settler.take_acks():
            self.client.lrem(IN_PROGRESS, 1, acked)

    def make_retries_due(self) -> int:
        """Every retry entry due now, and onto its queue."""
        for raw in self.client.zrange(keys.RETRY, 0, -1):
            self.client.zadd(keys.RETRY, {raw: 0}, xx=True)
        return self.parts.poller.enqueue_due()
