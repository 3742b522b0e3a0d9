"""`make test`'s runner: the suite as a few pytest processes at once, each under coverage.

Most of the suite's time is spent waiting on servers (a cluster forming, a Sentinel failover, a
network partition healing, a browser rendering), not on the CPU, so independent groups run side by
side: each stream is its own `coverage run -m pytest` over a set of folders, and the last stream
takes every folder the others don't name (a new folder runs without being listed here). coverage.py
writes one data file per process (parallel = true in pyproject.toml), so `coverage combine` then
merges the streams and every process they started, as it did for one pytest.

Tests already assume they are not alone on the machine (free ports, their own servers, names and
network namespaces; tests/README.md), which is what makes this safe.

Each stream's output goes to .test-artifacts/streams/<n>.log and is printed whole when the stream
ends, one stream at a time, so the output reads as if the streams had run one after another. The
exit status is the first failing stream's, else 0.

Usage: python tests/run_streams.py   (the Makefile passes its coverage command in COVERAGE_RUN)
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".test-artifacts" / "streams"

# Folders under tests/, by stream, balanced by how long each took in a streamed run on a 2-core
# machine. The named streams mostly wait on servers (a cluster forming, a failover, a browser), so a
# fourth still shortens the run: the browser tests had made the second stream the longest (24 min
# of a 30-minute CI budget). Measured with four: 23.2, 21.0, 10.2 and 21.7 min before e2e/worker
# moved from the first to the third.
STREAMS: list[list[str]] = [
    ["e2e/cluster", "e2e/sharded", "e2e/sentinel", "e2e/hosts", "e2e/tls", "e2e/package"],
    ["e2e/swarm", "e2e/systemd", "e2e/faults", "e2e/lost_reply"],
    ["e2e/web", "e2e/prefix", "e2e/worker"],
]


def remainder(named: list[str]) -> list[str]:
    """pytest arguments for the last stream: every test folder, minus those another stream runs."""
    return ["tests", *(f"--ignore=tests/{folder}" for folder in named)]


def commands() -> list[list[str]]:
    base = [*shlex.split(os.environ.get("COVERAGE_RUN", f"{sys.executable} -m coverage run")), "-m", "pytest"]
    named = [folder for stream in STREAMS for folder in stream]
    for folder in named:
        if not (ROOT / "tests" / folder).is_dir():
            raise SystemExit(f"run_streams.py names tests/{folder}, which doesn't exist")
    streams = [[f"tests/{folder}" for folder in stream] for stream in STREAMS]
    return [[*base, "-q", *paths] for paths in [*streams, remainder(named)]]


def main() -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    running: list[tuple[int, subprocess.Popen[bytes], Path]] = []
    for n, argv in enumerate(commands(), start=1):
        log = LOGS / f"{n}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        print(f"stream {n}: {shlex.join(argv[argv.index('-q') + 1 :])}", flush=True)
        running.append((n, proc, log))
    status = 0
    while running:
        pid, wait_status = os.wait()  # whichever stream ends first is printed first
        for item in [item for item in running if item[1].pid == pid]:
            n, proc, log = item
            running.remove(item)
            proc.returncode = os.waitstatus_to_exitcode(wait_status)  # reaped here, not by Popen
            took = time.monotonic() - began
            print(f"\n===== stream {n}: exit {proc.returncode} after {took / 60:.1f} min =====", flush=True)
            sys.stdout.write(log.read_text(errors="replace"))
            sys.stdout.flush()
            if proc.returncode and not status:
                status = proc.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
