"""`python multiproc.py N CMD ...`: runs N copies of a one-process worker command under one parent.

arq's and SAQ's workers are one process each (SAQ's own --workers N runs one in the parent and forks
the rest with multiprocessing, whose children a SIGTERM to the parent does not reach). The harness
wants one command whose direct children are the WORKER_PROCESSES workers, and that a SIGTERM stops:
this parent starts the copies, relays SIGTERM and SIGINT to each, and exits when all have.

With BENCH_PIN_CPUS=1, copy N runs on the Nth CPU this parent may use (wrapping round), started under
`taskset`, which execs the command: what an operator does for a worker with no affinity setting of its
own, to compare with cogworker's COGWORKER_CPU_AFFINITY=spread in W1's pinned rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    count, command = int(argv[0]), argv[1:]
    children = [subprocess.Popen(_placed(command, index)) for index in range(count)]

    def relay(signum: int, _frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, relay)
    signal.signal(signal.SIGINT, relay)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


def _placed(command: list[str], index: int) -> list[str]:
    if os.environ.get("BENCH_PIN_CPUS") != "1":
        return command
    cpus = sorted(os.sched_getaffinity(0))
    return ["taskset", "-c", str(cpus[index % len(cpus)]), *command]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
