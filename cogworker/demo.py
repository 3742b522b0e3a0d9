"""A demo app for `make run`: a few jobs, and a producer that pushes them.

COGWORKER_REQUIRE=cogworker.demo cogworker-swarm      # the swarm runs these jobs
python -m cogworker.demo [--rate 2]                   # pushes a mix of them, forever
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time

import structlog

import cogworker
from cogworker import job

log = structlog.get_logger("cogworker.demo")


@job(queue="default")
def greet(name: str) -> None:
    log.info("demo_hello", name=name)


@job(queue="default", retry=2)
def flaky(chance: float) -> None:
    """Fails now and then, to show retries (and, rarely, the dead set)."""
    if random.random() < chance:
        raise RuntimeError("the demo dice said no")


@job(queue="default")
def crunch(n: int) -> None:
    """A little CPU work."""
    total = sum(i * i for i in range(n))
    log.info("demo_crunched", n=n, total=total)


def produce(rate: float) -> None:
    cogworker.configure()
    names = ["ada", "grace", "linus", "barbara", "ken"]
    pushed = 0
    while True:
        greet.perform_async(random.choice(names))
        flaky.perform_async(0.3)
        crunch.perform_in(random.uniform(0, 5), random.randint(10_000, 200_000))
        pushed += 3
        if pushed % 30 == 0:
            print(f"demo producer: {pushed} jobs pushed", flush=True)
        time.sleep(1.0 / rate)


def main() -> None:
    parser = argparse.ArgumentParser(description="Push demo jobs for `make run`.")
    parser.add_argument("--rate", type=float, default=2.0, help="batches of three jobs per second")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how the demo producer stops
        produce(args.rate)


if __name__ == "__main__":
    main()
