"""A job's own standard-library log lines, from a real `cogworker run` and a real swarm child: each is
a JSON line with the job's jid, job and queue, its level, a timestamp and its process's fields, from
the app's logger and a library's, in an `async def` job and a thread started with copy_context();
COGWORKER_LOG_LEVELS is honoured; on the console a failure's traceback follows its line."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import logging_jobs
import pytest
import redis

from cogworker.api import client
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import WorkerPool

APP = {
    "COGWORKER_REQUIRE": "logging_jobs",
    "COGWORKER_LOG_LEVEL": "info",
    "COGWORKER_LOG_LEVELS": "logging_jobs.verbose=debug, vendorlib.chatty=error",
}

# message -> (level, logger) of every line `logs_everything` must write for tag "t".
EXPECTED = {
    "app info t": ("info", "logging_jobs"),
    "app warning t": ("warning", "logging_jobs"),
    "app exception t": ("error", "logging_jobs"),
    "library info t": ("info", "vendorlib.client"),
    "library warning t": ("warning", "vendorlib.client"),
    "library exception t": ("error", "vendorlib.client"),
    "verbose debug t": ("debug", "logging_jobs.verbose"),
    "chatty error t": ("error", "vendorlib.chatty"),
    "thread warning t": ("warning", "logging_jobs"),
}
DROPPED = ("app debug t", "chatty warning t")


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def lines_of(events: list[dict[str, Any]], jid: str) -> dict[str, dict[str, Any]]:
    return {e["event"]: e for e in events if e.get("jid") == jid and "logger" in e}


def check_job_lines(found: dict[str, dict[str, Any]], jid: str, pid: int) -> None:
    for message, (level, logger) in EXPECTED.items():
        line = found[message]
        assert (line["jid"], line["job"], line["queue"]) == (jid, "logging_jobs.logs_everything", "default")
        assert (line["level"], line["logger"], line["pid"]) == (level, logger, pid), line
        assert datetime.fromisoformat(line["timestamp"]).utcoffset() is not None  # ISO 8601, UTC
    for message in ("app exception t", "library exception t"):
        assert found[message]["exception"].startswith("Traceback (most recent call last):")
    assert "ValueError: app error t" in found["app exception t"]["exception"]
    assert "KeyError: 'library error t'" in found["library exception t"]["exception"]
    assert found["library info t"]["endpoint"] == "/v1/charge"  # an `extra=` field
    assert not set(DROPPED) & set(found)


def traceback_under(lines: list[str], at: int) -> list[str]:
    """The traceback printed under the console line `lines[at]`: up to the next timestamped line."""
    block = []
    for line in lines[at + 1 :]:
        if re.match(r"\d{4}-\d\d-\d\dT", line):
            break
        block.append(line)
    assert block and block[0] == "Traceback (most recent call last):", lines[at : at + 3]
    return block


def test_a_jobs_stdlib_lines_are_json_lines_with_its_fields(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = logging_jobs.logs_everything.perform_async("t")
    worker = workers.start(**APP)
    found = wait_until(
        lambda: len(got := lines_of(worker.events(), jid)) >= len(EXPECTED) and got,
        timeout=20,
        message=f"the job's lines:\n{worker.log_text()[-3000:]}",
    )
    check_job_lines(found, jid, worker.pid)
    assert found["app info t"]["identity"] == worker.identity()
    assert worker.stop() == 0
    # cogworker's lines and the job's share one stream, and none of them is bare text.
    assert [line for line in worker.log_text().splitlines() if not line.startswith("{")] == []


def test_an_async_jobs_stdlib_lines_carry_its_fields(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = logging_jobs.logs_async.perform_async("a")
    worker = workers.start(**APP)
    found = wait_until(
        lambda: len(got := lines_of(worker.events(), jid)) >= 2 and got,
        timeout=20,
        message=f"the async job's lines:\n{worker.log_text()[-3000:]}",
    )
    for message, level in (("async info a", "info"), ("async library warning a", "warning")):
        assert found[message]["job"] == "logging_jobs.logs_async"
        assert (found[message]["queue"], found[message]["level"]) == ("default", level)
    assert worker.stop() == 0


def test_a_failed_job_carries_its_traceback_in_json(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = logging_jobs.fails.perform_async("j")
    worker = workers.start(**APP)
    [failed] = wait_until(
        lambda: [e for e in worker.events_named("job_fail") if e.get("jid") == jid],
        timeout=20,
        message="job_fail",
    )
    assert failed["level"] == "warning" and failed["error"] == "ValueError: failing j"
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert failed["exception"].rstrip().endswith("ValueError: failing j")
    assert 'raise ValueError(f"failing {tag}")' in failed["exception"]
    assert worker.stop() == 0


def test_the_console_format_prints_tracebacks_under_the_line(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    logging_jobs.fails.perform_async("c")
    logging_jobs.logs_everything.perform_async("t")
    worker = workers.start(**{**APP, "COGWORKER_LOG_FORMAT": "console"})
    wait_until(
        lambda: "ValueError: failing c" in (text := worker.log_text()) and "thread warning t" in text,
        timeout=20,
        message="the console lines",
    )
    assert worker.stop() == 0
    lines = worker.log_text().splitlines()
    [fail_at] = [i for i, line in enumerate(lines) if "job_fail" in line]
    assert "[warning" in lines[fail_at] and "job=logging_jobs.fails" in lines[fail_at]
    failure = traceback_under(lines, fail_at)
    assert failure[-1] == "ValueError: failing c"
    assert 'raise ValueError(f"failing {tag}")' in [line.strip() for line in failure]
    assert not any("locals" in line.lower() for line in failure)  # plain: no frame's variables
    [app_at] = [i for i, line in enumerate(lines) if "app exception t" in line]
    assert "[logging_jobs]" in lines[app_at] and "job=logging_jobs.logs_everything" in lines[app_at]
    assert traceback_under(lines, app_at)[-1] == "ValueError: app error t"
    assert not any("app debug t" in line or "chatty warning t" in line for line in lines)


def test_a_swarm_childs_job_lines_carry_its_fields(
    r: redis.Redis, configured: object, swarms: SwarmRunner
) -> None:
    swarm = swarms.start(COGWORKER_COUNT="1", **APP)
    swarm.wait_ready()
    jid = logging_jobs.logs_everything.perform_async("t")
    found = wait_until(
        lambda: len(got := lines_of(swarm.events(), jid)) >= len(EXPECTED) and got,
        timeout=20,
        message=f"the job's lines:\n{swarm.tail(60)}",
    )
    [child] = swarm.current_children().values()
    check_job_lines(found, jid, child)
    assert found["app info t"]["slot"] == 0
    assert found["app info t"]["identity"] == swarm.identities()[child]
    assert swarm.stop() == 0


@pytest.mark.parametrize("preload", ["false", "true"])
def test_an_apps_own_logging_configuration_stands_in_a_swarm(
    r: redis.Redis, configured: object, swarms: SwarmRunner, preload: str
) -> None:
    """An app that configures the root logger when it is imported keeps its handler and format in
    every worker, whether it was imported in the worker or, preloaded, in the fork server."""
    swarm = swarms.start(COGWORKER_COUNT="1", COGWORKER_REQUIRE="logging_own_app", COGWORKER_PRELOAD=preload)
    swarm.wait_ready()
    # Pushed by name: importing the app here would configure this test process's logging.
    client.push("logging_own_app.says", ["p"], {}, queue="default", options={})
    wait_until(
        lambda: "own says p" in swarm.tail(200), timeout=20, message=f"the app's line:\n{swarm.tail()}"
    )
    assert swarm.stop() == 0
    said = [line for line in swarm.tail(400).splitlines() if "own says p" in line]
    assert said == ["OWN-FORMAT WARNING logging_own_app own says p"]
    assert swarm.events("job_done")  # cogworker's own lines are still there, as JSON


def test_the_logging_pages_example(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    """docs/guide/logging.md's job (docs/examples/logging/invoices.py), run by a real worker."""
    page = ROOT / "docs" / "examples" / "logging"
    sys.path.insert(0, str(page))
    try:
        import invoices
    finally:
        sys.path.remove(str(page))
        sys.modules.pop("invoices", None)
    jid = invoices.send_invoice.perform_async(7)
    worker = workers.start(
        PYTHONPATH=os.pathsep.join([str(page), os.environ["PYTHONPATH"]]),
        COGWORKER_REQUIRE="invoices",
        COGWORKER_LOG_LEVEL="info",
    )
    found = wait_until(
        lambda: len(got := {e["event"]: e for e in worker.events() if e.get("jid") == jid}) >= 5 and got,
        timeout=20,
        message=f"the example's lines:\n{worker.log_text()[-3000:]}",
    )
    assert set(found) == {
        "job_start",
        "sending invoice 7",
        "invoice_rendered",
        "could not archive invoice 7",
        "job_done",
    }
    for line in found.values():
        assert (line["job"], line["queue"], line["pid"]) == ("invoices.send_invoice", "default", worker.pid)
    assert (found["sending invoice 7"]["logger"], found["sending invoice 7"]["level"]) == ("invoices", "info")
    assert (found["invoice_rendered"]["invoice_id"], found["invoice_rendered"]["pages"]) == (7, 2)
    archived = found["could not archive invoice 7"]
    assert archived["level"] == "error"
    assert archived["exception"].rstrip().endswith("ConnectionError: archive store unreachable")
    assert worker.stop() == 0
