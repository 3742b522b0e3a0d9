"""A real swarm (`cogworker-swarm`: supervisor, fork server, two children) against the TLS-only Redis
as the ACL user: sync and async jobs, a child SIGKILLed by its job and its job requeued by the fork
server over TLS, the metrics scrape reading Redis over TLS; and the password found nowhere an operator
or an attacker with `ps` could look: the log, every process title, `cogworker status` and `doctor`
(text and --json), the metrics."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support import metrics
from tests.support.daemon_env import run_cogworker as cli
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import SwarmRunner, titles
from tests.support.tls_redis import APP_PASSWORD, TlsRedis

pytestmark = pytest.mark.slow

# How the password could show, raw or as it sits in the URL.
FORMS = (APP_PASSWORD, quote(APP_PASSWORD, safe=""))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_swarm_runs_recovers_and_is_scraped_over_tls_without_showing_the_password(
    tls_redis: TlsRedis, admin: redis.Redis, swarms: SwarmRunner, tmp_path: Path
) -> None:
    port = free_port()
    env = tls_redis.env(
        COGWORKER_REQUIRE="tls_jobs", COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_HOST="127.0.0.1"
    )
    swarm = swarms.start(**env)
    swarm.wait_ready(timeout=30)
    out = tmp_path / "ran.txt"

    # The test pushes as the ACL user over TLS too, from the settings alone.
    cw_client.configure(load_settings(**{k.removeprefix("COGWORKER_").lower(): v for k, v in env.items()}))
    import tls_jobs

    for i in range(10):
        tls_jobs.note.perform_async(str(out), f"s{i}")
        tls_jobs.anote.perform_async(str(out), f"a{i}")
    tls_jobs.die_first.perform_async(str(out), "k")
    expected = {f"s{i}" for i in range(10)} | {f"async-a{i}" for i in range(10)} | {"recovered-k"}
    # At least once: jobs the killed child had fetched alongside the killer (done or not) run again.
    wait_until(lambda: {line.split()[0] for line in lines(out)} == expected, timeout=30, message="every job")
    died_pid = int(Path(f"{out}.k.died").read_text())
    recovered_pid = int(next(line for line in lines(out) if line.startswith("recovered-k")).split()[1])
    assert died_pid != recovered_pid
    # The fork server requeued the killed child's job at once (over its own TLS connection).
    requeued = swarm.wait_event("child_jobs_requeued")
    assert requeued[0]["moved"] >= 1
    swarm.wait_ready(timeout=30)  # the replacement child

    text = metrics.scrape_text(port)
    samples = metrics.parse(text)
    assert metrics.value(samples, "cogworker_redis_up") == 1.0
    assert metrics.value(samples, "cogworker_queue_size", queue="default") == 0.0
    assert metrics.value(samples, "cogworker_set_size", set="retry") == 0.0

    status = cli(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert len(json.loads(status.stdout)["processes"]) == 2
    shown = {
        "status": cli(env, "status"),
        "status --json": status,
        "doctor": cli(env, "doctor"),
        "doctor --json": cli(env, "doctor", "--json"),
    }
    outputs = {name: done.stdout + done.stderr for name, done in shown.items()}
    outputs["metrics"] = text
    outputs.update({f"title {i}": title for i, title in enumerate(titles(swarm.pid))})
    assert len([k for k in outputs if k.startswith("title")]) >= 4  # supervisor, fork server, 2 children
    assert swarm.stop() == 0
    outputs["swarm log"] = swarm.log_path.read_text(errors="replace")
    assert all(form in tls_redis.url() or form == APP_PASSWORD for form in FORMS)  # the grep can match
    leaked = [name for name, text in outputs.items() if any(form in text for form in FORMS)]
    assert leaked == []
