"""cogworker against a real Redis Cluster (3 masters, 3 replicas), reached by a redis+cluster:// URL and a
hash-tagged key prefix: a first push from a fresh interpreter configured only by env, a real
`cogworker-swarm` (two children) running every kind of job (sync, retried by the poller, scheduled,
unique with status, periodic, one that SIGKILLs its child and is requeued), the ops CLI and the metrics
scrape reading the cluster; a killed worker's jobs recovered by another as orphans; and a bad cluster
setting refused with exit 78 before anything starts."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.web import create_app
from tests.support import metrics
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.daemon_env import run_cogworker as run
from tests.support.redis_cluster import PREFIX, SLOT, RedisCluster
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import SwarmRunner
from tests.support.tls_redis import APP_COMMANDS
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def tags(path: Path) -> set[str]:
    return {line.split()[0] for line in lines(path)}


def owner_keys(redis_cluster: RedisCluster) -> list[str]:
    """Every key on the master that owns the deployment's slot (SLOT)."""
    owner, _ = redis_cluster.owner(SLOT)
    with contextlib.closing(redis_cluster.client(owner)) as node:
        return list(node.keys("*"))


@pytest.mark.parametrize("form", ["redis+cluster URL", "COGWORKER_REDIS_CLUSTER=true"])
def test_a_first_push_from_env_alone_lands_in_the_deployments_slot(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster, form: str
) -> None:
    env = redis_cluster.env()
    if form == "COGWORKER_REDIS_CLUSTER=true":
        # A plain URL naming one node (a replica, even): the flag makes it a seed.
        env.update(
            COGWORKER_REDIS_URL=f"redis://127.0.0.1:{redis_cluster.ports[4]}/0",
            COGWORKER_REDIS_CLUSTER="true",
        )
    done = run(
        env,
        code="""
        import cogworker, cluster_jobs
        print(cluster_jobs.note.perform_async("/dev/null", "first"))
        print(len(cogworker.push_bulk(cluster_jobs.note, [("/dev/null", "a"), ("/dev/null", "b")])))
        """,
    )
    assert done.returncode == 0, done.stderr
    jid, count = done.stdout.split()
    queued = [json.loads(raw) for raw in cluster.lrange(f"{PREFIX}queue:default", 0, -1)]
    assert jid in [job["jid"] for job in queued] and int(count) == 2 and len(queued) == 3
    # Every key it wrote is in the one slot, on the master that owns it.
    written = owner_keys(redis_cluster)
    assert written and all(key.startswith(PREFIX) for key in written)
    assert {cluster.keyslot(key) for key in written} == {SLOT}


def test_a_swarm_runs_every_kind_of_job_and_the_cli_and_metrics_read_the_cluster(
    redis_cluster: RedisCluster,
    cluster: redis.RedisCluster,
    swarms: SwarmRunner,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, ticks = tmp_path / "ran.txt", tmp_path / "ticks.txt"
    port = free_port()
    swarm = swarms.start(
        **{**env, "COGWORKER_REQUIRE": "cluster_jobs,tick_periodic"},
        COGWORKER_METRICS_PORT=str(port),
        COGWORKER_POLL_INTERVAL_S="0.3",
        COGWORKER_PERIODIC_CHECK_INTERVAL_S="0.3",
        COGWORKER_QUEUES="default,other",  # two queues: an idle fetcher waits on the wake-up channel
        TICK_FILE=str(ticks),
    )
    swarm.wait_ready(timeout=30)
    cw_client.configure(load_settings())
    import cluster_jobs

    for i in range(10):
        cluster_jobs.note.perform_async(str(out), f"s{i}")
    cogworker.push_bulk(cluster_jobs.note, [(str(out), f"b{i}") for i in range(20)])
    cluster_jobs.note.perform_in(1, str(out), "later")  # the poller moves it from the schedule
    cluster_jobs.fail_first.perform_async(str(out), "r")  # the poller brings the retry back
    cluster_jobs.die_first.perform_async(str(out), "k")  # the fork server requeues it
    unique = cluster_jobs.unique_note.perform_async(str(out), "u")
    assert unique is not None
    expected = {f"s{i}" for i in range(10)} | {f"b{i}" for i in range(20)}
    expected |= {"later", "retried-r", "recovered-k", "unique-u"}
    wait_until(lambda: tags(out) >= expected, timeout=40, message=f"every job:\n{swarm.tail()}")
    assert tags(out) == expected
    assert swarm.wait_event("child_jobs_requeued")[0]["moved"] >= 1
    wait_until(lambda: cogworker.status(unique) == "complete", timeout=15, message="the unique job's status")
    wait_until(lambda: lines(ticks), timeout=15, message="a periodic tick")
    swarm.wait_ready(timeout=30)  # the child the job killed is replaced

    status = run(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert len(report["processes"]) == 2
    queues = run(env, "queues", "--json")
    assert queues.returncode == 0, queues.stderr
    assert {q["name"] for q in json.loads(queues.stdout)} >= {"default"}
    periodic = run({**env, "COGWORKER_REQUIRE": "cluster_jobs,tick_periodic"}, "periodic", "list")
    assert periodic.returncode == 0 and "tick_periodic.tick" in periodic.stdout, periodic.stderr
    doctor = run(env, "doctor", "--json")
    assert doctor.stdout, doctor.stderr
    assert {c["name"] for c in json.loads(doctor.stdout)["checks"]}

    samples = metrics.scrape(port)
    assert metrics.value(samples, "cogworker_redis_up") == 1.0
    assert metrics.value(samples, "cogworker_queue_size", queue="default") == 0.0
    assert metrics.value(samples, "cogworker_set_size", set="retry") == 0.0

    with TestClient(create_app(load_settings())) as ui:
        page = ui.get("/")
        assert page.status_code == 200 and "default" in page.text

    # Everything cogworker wrote is in the deployment's one slot.
    written = owner_keys(redis_cluster)
    assert {cluster.keyslot(key) for key in written} == {SLOT}
    assert swarm.stop() == 0, swarm.tail(120)
    assert not swarm.events("redis_outage_started")


def test_a_killed_workers_jobs_are_recovered_as_orphans_by_another(
    cluster: redis.RedisCluster, workers: WorkerPool, env: dict[str, str], tmp_path: Path
) -> None:
    quick = {**env, **QUICK_RECOVERY}
    out = tmp_path / "ran.txt"
    cw_client.configure(load_settings())
    import cluster_jobs

    for i in range(4):
        cluster_jobs.slow_note.perform_async(str(out), f"j{i}", 1.0)
    victim = workers.start(COGWORKER_CONCURRENCY="4", **quick)
    wait_until(
        lambda: sum(line.startswith("started-") for line in lines(out)) == 4,
        timeout=15,
        message="4 in flight",
    )
    victim.signal(signal.SIGKILL)
    victim.proc.wait(timeout=5)
    survivor = workers.start(**quick)
    wait_until(lambda: {f"j{i}" for i in range(4)} <= tags(out), timeout=30, message="every job to run again")
    assert survivor.events_named("requeued_orphans")[0]["moved"] == 4
    wait_until(
        lambda: cluster.keys(f"{PREFIX}inprogress:*") == [], timeout=10, message="no in-progress list left"
    )


def test_an_acl_user_with_the_documented_commands_and_cluster_slots_is_refused_nothing(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster, workers: WorkerPool, tmp_path: Path
) -> None:
    # The docs' list for one Redis (docs/deployment/redis.md), plus the one command cluster mode adds.
    redis_cluster.add_user("app", "Cluster-app-pw-7", APP_COMMANDS + " cluster|slots")
    url = redis_cluster.url().replace("://", "://app:Cluster-app-pw-7@", 1)
    env = redis_cluster.env(
        COGWORKER_REDIS_URL=url, COGWORKER_HEARTBEAT_INTERVAL_S="0.3", COGWORKER_POLL_INTERVAL_S="0.3"
    )
    out = tmp_path / "ran.txt"
    worker = workers.start(**env)
    worker.identity()
    pushed = run(
        env,
        code=f"""
        import cluster_jobs
        cluster_jobs.note.perform_async({str(out)!r}, "acl")
        cluster_jobs.fail_first.perform_async({str(out)!r}, "r")
        cluster_jobs.unique_note.perform_async({str(out)!r}, "u")
        """,
    )
    assert pushed.returncode == 0, pushed.stderr
    expected = {"acl", "retried-r", "unique-u"}
    wait_until(lambda: tags(out) >= expected, timeout=20, message=f"the jobs:\n{worker.log_text()[-2000:]}")
    status = run(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert worker.stop() == 0
    assert redis_cluster.refused("app") == []
    assert "Cluster-app-pw-7" not in status.stdout + status.stderr + worker.log_text()


# One per kind of check (the prefix, the URL, the flag); tests/unit/test_cluster_url.py has the rest.
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"COGWORKER_KEY_PREFIX": "cogworker:"}, "hash tag"),
        ({"COGWORKER_REDIS_URL": "redis+cluster://127.0.0.1:7000/1"}, "database"),
        ({"COGWORKER_REDIS_URL": "unix:///tmp/redis.sock", "COGWORKER_REDIS_CLUSTER": "true"}, "cluster"),
    ],
)
def test_a_bad_cluster_setting_exits_78_before_anything_starts(
    redis_cluster: RedisCluster, extra: dict[str, str], says: str
) -> None:
    done = run({**redis_cluster.env(), **extra}, "run")
    assert done.returncode == 78, done.stderr
    assert says in done.stderr
