"""`python pacer.py SYSTEM RATE SECONDS`: the load curve's steady stream (curves/load.py), from a process
of its own, as an application's producers are.

Pushes the system's load-curve job (jobkit.record_paced) at RATE jobs/s for SECONDS, paced against the
start: each time round it pushes every job due by now, each carrying the time of its push, so a push
that ran late is caught up at once and the rate holds. Below ~1,000 jobs/s that is one job per push;
above it a push carries the jobs of the last millisecond or so (the system's bulk path), since one
process can't make thousands of single round trips a second on a machine the workers share.
Writes what it did to the hash bench:pacer: began (epoch), pushed, seconds.
"""

from __future__ import annotations

import os
import sys
import time

import jobkit
import systems

PACER = "bench:pacer"
# Never sleep less: a shorter sleep costs a system call and a wake-up for a job or two at most.
MIN_SLEEP_S = 0.0005


def main(argv: list[str]) -> int:
    name, rate, seconds = argv[0], float(argv[1]), float(argv[2])
    url = os.environ["BENCH_REDIS_URL"]
    system = systems.load(name, url)
    total = round(rate * seconds)
    try:
        began_epoch, began = time.time(), time.monotonic()
        pushed = 0
        while pushed < total:
            due = min(total, int((time.monotonic() - began) * rate) + 1) - pushed
            if due > 0:
                system.push_paced(time.time(), due)
                pushed += due
                continue
            time.sleep(max(MIN_SLEEP_S, began + pushed / rate - time.monotonic()))
        took = time.monotonic() - began
    finally:
        system.close()
    jobkit.connect(url).hset(PACER, mapping={"began": repr(began_epoch), "pushed": pushed, "seconds": took})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
