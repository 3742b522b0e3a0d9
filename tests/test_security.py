"""What someone who can write to Redis, or read the logs, must not get.

- A payload names a job; it must not make a worker import whatever module it names (the module's
  top-level code would run in the worker). Only registered jobs and modules under COGWORKER_REQUIRE
  (and their submodules) resolve; anything else is an unknown job, filed without an import.
- The Redis password never appears in an error message, a log line or a command's output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import demo_jobs
import pytest
import redis

from cogworker import codec
from cogworker.jobs import JobNotFound, resolve
from tests.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.redis_server import wait_until
from tests.workers import WorkerPool

NOT_REGISTERED = "not a registered job; add its module to COGWORKER_REQUIRE"


def raw_job(name: str, jid: str) -> str:
    return codec.dumps(
        {"class": name, "args": [], "kwargs": {}, "jid": jid, "queue": "default", "retry": False}
    )


def test_a_payload_cannot_make_a_worker_import_a_module(
    r: redis.Redis, configured: object, workers: WorkerPool, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    for jid, name in (("side", "marker_on_import.x"), ("zen", "this.x"), ("runner", "unittest.__main__.x")):
        r.lpush("cogworker:queue:default", raw_job(name, jid))
    demo_jobs.record.perform_async("behind")
    worker = workers.start(MARKER_ON_IMPORT=str(marker))
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the job behind them")
    wait_until(lambda: r.zcard("cogworker:dead") == 3, timeout=10, message="three unknown jobs in dead")
    dead = {d["jid"]: d for d in map(json.loads, r.zrange("cogworker:dead", 0, -1))}
    assert set(dead) == {"side", "zen", "runner"}
    for entry in dead.values():
        assert entry["error_class"] == "cogworker.jobs.JobNotFound"
        assert NOT_REGISTERED in entry["error_message"]
    assert not marker.exists()
    assert "Zen of Python" not in worker.log_text()


def test_jobs_under_a_required_module_resolve_and_nothing_else_is_imported() -> None:
    assert resolve("required_pkg.lazy_jobs.hello", allowed=("required_pkg",)).func("x") == "hello x"
    # A registered job resolves whatever is allowed: the process imported it on purpose.
    assert resolve(demo_jobs.record.name, allowed=()) is demo_jobs.record
    for name, allowed in (
        ("marker_on_import.x", ("marker",)),  # a prefix of the name, not a parent module
        ("marker_on_import.x", ("required_pkg",)),
        ("marker_on_import.x", ()),
        ("required_pkg..x", ("required_pkg",)),
        ("x", ("x",)),
    ):
        with pytest.raises(JobNotFound, match=NOT_REGISTERED):
            resolve(name, allowed=allowed)
    assert "marker_on_import" not in sys.modules


def test_cli_enqueue_warns_that_workers_would_refuse_a_job_outside_require(
    cli: CLI, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REQUIRE", "demo_jobs")
    out = cli("enqueue", "billing_app.jobs.charge", "[1]")
    assert out.code == 0
    assert "'billing_app.jobs' is not under COGWORKER_REQUIRE here" in out.err
    assert cli("enqueue", "demo_jobs.record", '["x"]').err == ""
