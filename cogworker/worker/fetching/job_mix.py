"""How many jobs one fetch may take when a process runs two kinds of job: sync jobs on its job
threads (`COGWORKER_CONCURRENCY`) and `async def` jobs on its event loop
(`COGWORKER_ASYNC_CONCURRENCY`).

A job's kind is known only once its payload is resolved, after the fetch has moved it onto this
process's in-progress list, so a fetch can't ask for "3 sync and 40 async". The fetcher therefore
sizes each fetch by the mix it has seen (the share of async jobs among those it fetched, an
exponential average), to fit the free slots of both kinds, and a fetched job whose kind has no free
slot waits in memory (on the in-progress list, so it is never lost) until one frees. That wait is
bounded: each kind may be over-taken by a tenth of its slots (at least one), and once a kind holds
that many waiting jobs nothing is fetched until it catches up. The queue's order is kept: the job at
the head of a queue is never skipped for one behind it.

A process with no `async def` job registered fetches exactly as many jobs as it has idle threads,
as it always did; the first async job (from a module imported lazily) is run from a job thread.
Nor does a process that has fetched nothing yet take more than either kind can start at once: until
a fetch shows the mix, any job might be of the kind with fewer free slots. (It used to assume an even
mix: a new process with 8 idle threads took 18 jobs of 3 s, all sync, and held 10 of them for a job's
length while another process sat idle; `make bench`'s W3 saw two killed jobs wait 1.8 s for a thread.)
"""

from __future__ import annotations

from cogworker.api import registry

# Weight of one fetched job in the average: about the last 20 jobs count.
ALPHA = 0.05
# Once async jobs exist, the share stays inside these bounds: a kind never seen lately is still
# fetched for, one job at a time at worst.
MIN_SHARE, MAX_SHARE = 0.02, 0.98


class JobMix:
    def __init__(self, sync_slots: int, async_slots: int, allowed: tuple[str, ...]) -> None:
        self._allowed = allowed
        self._hold_sync = 1 + sync_slots // 10
        self._hold_async = 1 + async_slots // 10
        self.share = 0.0  # of async jobs among those fetched; 0 until a fetch with async jobs registered
        self._async_known = False

    def has_async(self) -> bool:
        """An async job this process may run is registered (once true, it stays true)."""
        if not self._async_known:
            self._async_known = registry.has_async(self._allowed)
        return self._async_known

    def observe(self, async_jobs: int, jobs: int) -> None:
        """`jobs` were fetched, `async_jobs` of them async."""
        if jobs == 0 or not self.has_async():
            return
        if self.share == 0.0:  # the first fetch since async jobs exist: its share is all we know
            share = async_jobs / jobs
        else:
            # `jobs` steps of the average, each towards this fetch's share (the order within a fetch
            # says nothing).
            kept = (1.0 - ALPHA) ** jobs
            share = self.share * kept + (async_jobs / jobs) * (1.0 - kept)
        self.share = min(MAX_SHARE, max(MIN_SHARE, share))

    def room(self, free_sync: int, free_async: int) -> int:
        """How many jobs to fetch, given the free slots of each kind (negative: jobs of that kind
        wait for a slot)."""
        if self.share == 0.0:
            if not self.has_async():
                return max(0, free_sync)
            # Async jobs are registered but no fetch has shown the mix yet: take only what either
            # kind could start now, so none waits in memory on a guess.
            return max(0, min(free_sync, free_async))
        free = max(0, free_sync) + max(0, free_async)
        if free == 0:
            return 0
        fits_sync = (free_sync + self._hold_sync) / (1.0 - self.share)
        fits_async = (free_async + self._hold_async) / self.share
        return max(0, min(free, int(min(fits_sync, fits_async))))
