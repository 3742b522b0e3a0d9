"""A mixed fleet on one Redis, in the Sidekiq mode with bare keys (COGWORKER_SIDEKIQ_COMPAT=6): Debian's
Sidekiq 6 reading the Ruby queue and a `cogworker-swarm` reading the Python queue, each pushing the
other's jobs (tests/apps/sidekiq_fleet_jobs.py and .rb). The tests in tests/e2e/sidekiq/ start one,
push both ways, and read what every jid did and what is left in Redis."""

from __future__ import annotations

import contextlib
from pathlib import Path

import sidekiq_fleet_jobs as jobs

import cogworker
from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support.paths import APP_DIR
from tests.support.redis_server import RedisServer, wait_until
from tests.support.sidekiq import SidekiqProcess, ruby
from tests.support.swarm import Swarm, SwarmRunner

PEER_APP = APP_DIR / "sidekiq_peer.rb"
RUBY_JOBS = APP_DIR / "sidekiq_fleet_jobs.rb"
# What the Ruby job writes through Sidekiq's connection: under the namespace, when there is one.
RUBY_WRITTEN = (jobs.RB_ATTEMPTS, jobs.RB_DONE, jobs.GRADUATED_BY_RUBY)

# Sidekiq::Client.push_bulk with the class named by a string, as a Ruby app pushes a job it can't load:
# Sidekiq's own defaults apply (retry: true). Prints the jids, in order.
PUSH_FOR_PYTHON = """
args = (0...%(n)d).map { |n| [n, n %% %(fail_every)d == 0, %(work_s)r] }
jids = Sidekiq::Client.push_bulk("class" => "%(name)s", "queue" => "%(queue)s", "args" => args)
print JSON.generate(jids)
"""


def fails_first(n: int, fail_every: int) -> bool:
    """Whether job `n` fails its first attempt (the Ruby push above decides it the same way)."""
    return n % fail_every == 0


class Fleet:
    """Sidekiq (`sidekiq_threads` threads reading `ruby_queues`) and a swarm (`count` children of
    `concurrency` threads) on `server`, both in the mode for Sidekiq 6, with bare keys or under the
    redis-namespace `namespace`; `swarm_env` is added to the swarm's settings (or overrides them)."""

    def __init__(
        self,
        server: RedisServer,
        swarms: SwarmRunner,
        tmp_path: Path,
        count: int = 3,
        concurrency: int = 10,
        sidekiq_threads: int = 20,
        ruby_queues: tuple[str, ...] = (jobs.RB_QUEUE,),
        namespace: str = "",
        **swarm_env: str,
    ) -> None:
        self.url = server.url
        self.client = server.client()
        self.shared = f"{namespace}:" if namespace else ""
        self.ruby_env = {"SIDEKIQ_JOBS": str(RUBY_JOBS), "SIDEKIQ_NAMESPACE": namespace}
        self.sidekiq = SidekiqProcess(
            self.url,
            tmp_path / "sidekiq.log",
            app=PEER_APP,
            queues=ruby_queues,
            threads=sidekiq_threads,
            env=self.ruby_env,
        )
        env = {
            "COGWORKER_REQUIRE": "sidekiq_fleet_jobs",
            "COGWORKER_QUEUES": jobs.PY_QUEUE,
            "COGWORKER_COUNT": str(count),
            "COGWORKER_CONCURRENCY": str(concurrency),
            "COGWORKER_POLL_INTERVAL_S": "0.2",
            "COGWORKER_SIDEKIQ_COMPAT": "6",
            "COGWORKER_SIDEKIQ_NAMESPACE": namespace,
        }
        self.swarm_env = env | swarm_env
        self.swarm: Swarm = swarms.start(**self.swarm_env)
        try:
            self.swarm.wait_ready()
        except BaseException:
            # No fixture holds the fleet yet to end it: a swarm that never came up must not leave
            # Sidekiq running (the swarm itself is the runner's to end).
            self.close()
            raise
        # The job API in this process writes as the swarm does: the mode's keys.
        cw_client.configure(
            load_settings(redis_url=self.url, sidekiq_compat="6", sidekiq_namespace=namespace)
        )

    def restart_swarm(self, swarms: SwarmRunner) -> None:
        """A new swarm with the same settings, once the last one has stopped."""
        self.swarm = swarms.start(**self.swarm_env)
        self.swarm.wait_ready()

    def push_from_ruby(
        self, n: int, fail_every: int, work_s: float = 0.0, name: str = "FleetPythonJob"
    ) -> list[str]:
        """`n` Python jobs (`name`) pushed by Ruby's Sidekiq::Client, for cogworker to run."""
        script = PUSH_FOR_PYTHON % {
            "name": name,
            "n": n,
            "fail_every": fail_every,
            "work_s": work_s,
            "queue": jobs.PY_QUEUE,
        }
        jids = codec.loads(ruby(script, self.url, app=PEER_APP, env=self.ruby_env))
        assert len(set(jids)) == n
        return [str(jid) for jid in jids]

    def push_from_python(self, n: int, fail_every: int) -> list[str]:
        """`n` FleetRubyJob pushed by cogworker's job API, for Sidekiq to run."""
        jids = cogworker.push_bulk(jobs.fleet_ruby_job, [(i, fails_first(i, fail_every)) for i in range(n)])
        assert None not in jids and len(set(jids)) == n
        return [str(jid) for jid in jids]

    def key(self, name: str) -> str:
        """The key the jobs' `name` (sidekiq_fleet_jobs.py) is in: the Ruby job's under the namespace."""
        return self.shared + name if name in RUBY_WRITTEN else name

    def done(self, name: str) -> dict[str, int]:
        return {jid: int(count) for jid, count in self.client.hgetall(self.key(name)).items()}

    def graduated_by_ruby(self) -> set[str]:
        return {str(jid) for jid in self.client.smembers(self.key(jobs.GRADUATED_BY_RUBY))}

    def wait_all_done(self, py_jids: list[str], rb_jids: list[str], timeout: float = 60) -> None:
        def finished() -> bool:
            return self.client.hlen(jobs.PY_DONE) >= len(py_jids) and self.client.hlen(
                self.key(jobs.RB_DONE)
            ) >= len(rb_jids)

        wait_until(
            finished,
            timeout=timeout,
            interval=0.1,
            message=f"every job of both sides done; left: {self.leftovers()}\n"
            f"swarm:\n{self.swarm.tail()}\nsidekiq:\n{self.sidekiq.log_text()[-3000:]}",
        )

    def leftovers(self) -> dict[str, int]:
        """Every shared or cogworker key still holding a job, with how many: empty when nothing is left
        in the queues, the schedule/retry/dead sets, an in-progress list or Sidekiq's busy hashes."""
        r = self.client
        # Under the namespace, and bare too: a job written to the wrong one shows as left there.
        starts = {"", self.shared}
        queues = [f"{start}queue:{q}" for start in starts for q in (jobs.PY_QUEUE, jobs.RB_QUEUE)]
        sets = [start + name for start in starts for name in ("schedule", "retry", "dead")]
        found = {key: int(r.llen(key)) for key in queues} | {key: int(r.zcard(key)) for key in sets}
        for key in r.scan_iter(match="cogworker:inprogress:*", count=500):
            found[str(key)] = int(r.llen(key))
        for key in r.scan_iter(match="*:workers", count=500):
            found[str(key)] = int(r.hlen(key))
        return {key: n for key, n in found.items() if n}

    def stats(self) -> tuple[int, int]:
        """The shared counters (processed, failed), both sides' counts in one pair of keys."""
        processed, failed = self.client.mget(self.shared + "stat:processed", self.shared + "stat:failed")
        return int(processed or 0), int(failed or 0)

    def close(self) -> None:
        """Stop Sidekiq (killing its session if it doesn't stop) and close the client."""
        with contextlib.suppress(Exception):
            self.sidekiq.__exit__(None, None, None)
        self.client.close()
