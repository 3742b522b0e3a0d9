"""COGWORKER_CPU_AFFINITY=auto: a pinned worker checks, now and then, whether it would use more than
its one CPU, and stays unpinned while it would.

Pinning costs a worker nothing while its threads run Python (one CPU at a time, under the GIL) and
saves the GIL's hand-overs between cores. It costs a worker whose threads compute outside the GIL
(numpy, torch, compression) every CPU but one. A pinned process can't show that it would use more, so
every `interval_s` this thread unpins it for PROBE_S and measures: more than MORE_THAN_ONE CPU used
then, it stays unpinned; unpinned, it is pinned again after an interval in which it used at most
ONE_CPU. Each change is logged (cpu_affinity_released, cpu_affinity_repinned). A probe costs W1-like
work a second at its unpinned rate once a minute (about 0.5 % of its throughput at the default).
"""

from __future__ import annotations

import os
import threading
import time

import structlog

from supervisor.forkserver.cpu_affinity import Pinning

PROBE_S = 1.0
MORE_THAN_ONE = 1.2  # CPUs: above this while unpinned, the process computes beside its Python
ONE_CPU = 1.0

log = structlog.get_logger("cogworker.worker")


class PinProbe(threading.Thread):
    def __init__(self, pinning: Pinning, slot: int, interval_s: float) -> None:
        super().__init__(name="pin-probe", daemon=True)
        self._pinning = pinning
        self._slot = slot
        self._interval_s = interval_s
        # The cadence's clock: nothing sets it; the thread dies with the process.
        self._never = threading.Event()

    def run(self) -> None:
        pinned = True
        while True:
            if pinned:
                self._never.wait(self._interval_s)
                set_every_thread(self._pinning.allowed)
                used = self._cpus_used_over(PROBE_S)
                log.debug("cpu_affinity_probed", slot=self._slot, cpus_used=round(used, 2))
                if used > MORE_THAN_ONE:
                    pinned = False
                    log.info("cpu_affinity_released", slot=self._slot, cpus_used=round(used, 2))
                else:
                    set_every_thread({self._pinning.cpu})
            else:
                used = self._cpus_used_over(self._interval_s)
                if used <= ONE_CPU:
                    set_every_thread({self._pinning.cpu})
                    pinned = True
                    log.info(
                        "cpu_affinity_repinned",
                        slot=self._slot,
                        cpu=self._pinning.cpu,
                        cpus_used=round(used, 2),
                    )

    def _cpus_used_over(self, seconds: float) -> float:
        """CPUs this process used, on average, over the next `seconds` (all its threads)."""
        before, started = _cpu_seconds(), time.monotonic()
        self._never.wait(seconds)
        return (_cpu_seconds() - before) / max(time.monotonic() - started, 1e-6)


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def set_every_thread(cpus: set[int] | frozenset[int]) -> None:
    """Every thread of this process onto `cpus` (sched_setaffinity sets one thread at a time). A thread
    started meanwhile inherits its starter's mask: set or not yet, the next probe sets it."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # it exited since the listing
            continue
