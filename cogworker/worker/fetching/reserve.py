"""How many jobs a busy process may hold beyond its idle threads.

Without a reserve, a thread that finishes a job waits for the fetcher's next round trip before it has
another, and under a backlog of short jobs the process sits idle for a round trip every few jobs
(issue 18: a third of the CPU stayed unused while jobs waited). Holding a few jobs more than there are
idle threads hides that round trip behind the jobs still running.

A held job waits in this process while another process might run it now, so the reserve exists only
while this process's jobs are short: then a held job waits less than one job's run time. Once jobs
take longer on average, the fetcher again takes only as many jobs as it has idle threads, and a long
job never waits behind another in memory. Held jobs are on the in-progress list like any fetched job
(never lost), and are given back unstarted at stop. The reserve is half the threads, rounded down, so a
single-thread process holds none: a job held there would wait a whole job while another process
may sit idle.
"""

from __future__ import annotations

# Jobs that take less than this on average are short enough to hold a few of in memory.
SHORT_JOB_S = 0.01
# Weight of one finished job in the average run time (about the last 20 jobs count).
ALPHA = 0.05


class Reserve:
    def __init__(self, size: int) -> None:
        self._size = size
        # Start as if jobs were long: a process holds nothing extra until its jobs have proved short.
        self._average_s = SHORT_JOB_S * 2

    def observe(self, run_s: float) -> None:
        """A job ran for `run_s` seconds (called with the manager's lock held)."""
        self._average_s += ALPHA * (run_s - self._average_s)

    @property
    def extra(self) -> int:
        """Jobs to hold beyond the idle threads now."""
        return self._size if self._average_s < SHORT_JOB_S else 0
