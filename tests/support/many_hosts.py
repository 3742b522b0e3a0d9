"""Three simulated hosts (netns_hosts.py), each running a 2-child `cogworker-swarm` configured only by
env, against one private Redis that listens on the hosts' addresses (and on 127.0.0.1, for the test
alone); a producer thread pushing steadily; and the sink where tests/apps/host_jobs.py records every
run, outside Redis. Used by tests/e2e/hosts/.
"""

from __future__ import annotations

import random
import sys
import threading
from collections import Counter
from pathlib import Path

import host_jobs
from line_sink import append_line

from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.netns_hosts import Host, NetnsHosts
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import Swarm, SwarmRunner

ORPHAN_THRESHOLD_S = 4.0
ORPHAN_CHECK_INTERVAL_S = 1.0
# Short everything, so a partition is declared within seconds: presence (whole seconds) must stay
# under the threshold, the heartbeat under the presence TTL (settings.py checks both).
HOST_ENV = {
    "COGWORKER_REQUIRE": "host_jobs",
    "COGWORKER_COUNT": "2",
    "COGWORKER_CONCURRENCY": "2",
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.5",
    "COGWORKER_PRESENCE_TTL_S": "2",
    "COGWORKER_ORPHAN_THRESHOLD_S": str(ORPHAN_THRESHOLD_S),
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": str(ORPHAN_CHECK_INTERVAL_S),
    "COGWORKER_REDIS_TIMEOUT_S": "1",
    "COGWORKER_POLL_INTERVAL_S": "0.5",
}
PUSH_INTERVAL_S = 0.05  # 20 jobs/s; the hosts together run ~25 jobs/s of 0.1-0.8 s
BOOT_TIMEOUT_S = 90.0  # three swarms booting at once on a loaded 2-core machine


class Sink:
    """The run file: `S|E|F <tag> <host> <pid>` lines from the jobs, `# <note>` marks from the test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def mark(self, note: str) -> None:
        append_line(str(self.path), f"# {note}")

    def lines(self) -> list[list[str]]:
        return [line.split() for line in self.path.read_text().splitlines() if line.strip()]

    def count(self, kind: str, *, until: str | None = None) -> Counter[str]:
        """Tag -> how many `kind` lines (S: runs started, E: runs ended), up to the mark `until`."""
        found: Counter[str] = Counter()
        for parts in self.lines():
            if until is not None and parts[:2] == ["#", until]:
                break
            if parts[0] == kind:
                found[parts[1]] += 1
        return found

    def hosts_of(self, tag: str, kind: str = "S") -> list[str]:
        return [p[2] for p in self.lines() if p[0] == kind and p[1] == tag]

    def stall_then_fail(self, host: str, on: bool) -> None:
        """On: runs on `host` that reach their end wait there; off: they go on, and fail."""
        flag = Path(f"{self.path}.stall-{host}")
        if on:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)


class Producer(threading.Thread):
    """Pushes `host_jobs.ran` steadily from this process; keeps the tags of the pushes that returned."""

    def __init__(self, sink: Sink) -> None:
        super().__init__(name="producer", daemon=True)
        self.sink = sink
        self.accepted: list[str] = []
        self.failed = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._rng = random.Random(17)
        self._n = 0

    def run(self) -> None:
        while not self._halt.wait(PUSH_INTERVAL_S):
            self.push_one()

    def push_one(self) -> None:
        with self._lock:
            tag = f"j{self._n}"
            self._n += 1
            seconds = round(self._rng.uniform(0.1, 0.8), 2)
        try:
            host_jobs.ran.perform_async(str(self.sink.path), tag, seconds)
        except Exception:
            # Redis down, restarting, paused: this push did not return, so it is not counted.
            self.failed += 1
            return
        with self._lock:
            self.accepted.append(tag)

    def burst(self, count: int) -> None:
        """`count` pushes at once, beside the steady ones: a backlog on the queue."""
        for _ in range(count):
            self.push_one()

    def taken(self) -> list[str]:
        with self._lock:
            return list(self.accepted)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


class ManyHosts:
    def __init__(self, tmp_path: Path, count: int = 3) -> None:
        self.netns = NetnsHosts(count)
        try:
            self.redis = RedisServer(bind_also=self.netns.redis_addresses)
            self.runner = SwarmRunner(self.redis.url, tmp_path)
            self.runner.__enter__()
            self.sink = Sink(tmp_path / "runs.txt")
            self.swarms = [self._start(host) for host in self.netns.hosts]
            cw_client.configure(load_settings(redis_url=self.redis.url, redis_timeout_s=2))
            self.producer = Producer(self.sink)
            self.control = self.redis.client()
        except BaseException:
            self.close()
            raise

    @property
    def hosts(self) -> list[Host]:
        return self.netns.hosts

    def _start(self, host: Host) -> Swarm:
        url = f"redis://{host.redis_address}:{self.redis.port}/0"
        command = host.command([sys.executable, "-m", "supervisor.main"])
        return self.runner.start(redis_url=url, command=command, HOSTS_TEST_HOST=host_name(host), **HOST_ENV)

    def boot(self) -> None:
        """Every swarm ready, the producer pushing, and every host has run jobs (a few each)."""
        for swarm in self.swarms:
            swarm.wait_ready(timeout=BOOT_TIMEOUT_S)
        self.producer.start()
        names = [host_name(h) for h in self.hosts]
        wait_until(
            lambda: all(
                sum(1 for p in self.sink.lines() if p[0] == "E" and p[2] == name) >= 5 for name in names
            ),
            timeout=60,
            interval=0.1,
            message="every host to run a job",
        )

    def identities(self, host: Host) -> list[str]:
        """The identities of the children running on `host` now."""
        swarm = self.swarms[host.index]
        ids = swarm.identities()
        return [ids[pid] for pid in swarm.current_children().values()]

    def in_progress(self, host: Host) -> list[str]:
        """Tags on `host`'s in-progress lists, read from Redis."""
        found = []
        for identity in self.identities(host):
            for raw in self.control.lrange(keys.in_progress(identity), 0, -1):
                found.append(host_jobs_tag(raw))
        return found

    def registered(self) -> set[str]:
        return {str(m) for m in self.control.smembers(keys.PROCESSES)}

    def all_ran(self, tags: list[str]) -> bool:
        ended = self.sink.count("E")
        return all(ended[t] for t in tags)

    def close(self) -> None:
        if getattr(self, "producer", None) is not None and self.producer.is_alive():
            self.producer.stop()
        try:
            if getattr(self, "runner", None) is not None:
                self.runner.__exit__(None, None, None)
        finally:
            self.netns.close()
            if getattr(self, "redis", None) is not None:
                self.redis.close()
            if getattr(self, "control", None) is not None:
                self.control.close()


def host_name(host: Host) -> str:
    return f"h{host.index}"


def host_jobs_tag(raw: str) -> str:
    job = codec.loads_dict(raw) or {}
    args = job.get("args") or ["", "?"]
    return str(args[1])
