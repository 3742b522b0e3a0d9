"""`cogworker queues` and `cogworker queue pause|resume|clear` against a real Redis."""

from __future__ import annotations

import io
import json
import time

import pytest
import redis

from tests.support.cli_runner import CLI, FakeTerminal, cli_fixture  # noqa: F401


def push(r: redis.Redis, queue: str, jid: str, enqueued_at: float) -> None:
    job = {"class": "demo_jobs.record", "args": [jid], "jid": jid, "queue": queue, "enqueued_at": enqueued_at}
    r.lpush(f"cogworker:queue:{queue}", json.dumps(job))
    r.sadd("cogworker:queues", queue)


def test_queues_lists_size_and_latency_of_the_job_popped_next(cli: CLI, r: redis.Redis) -> None:
    now = time.time()
    push(r, "default", "old", now - 120)
    push(r, "default", "new", now - 1)
    push(r, "mail", "m", now - 5)
    data = cli("queues", "--json").json()
    assert [q["name"] for q in data] == ["default", "mail"]
    assert data[0]["size"] == 2
    assert 119 < data[0]["latency_s"] < 130  # the right end: the oldest job, popped next
    assert 4 < data[1]["latency_s"] < 15
    text = cli("queues").out.splitlines()
    assert text[0].split() == ["QUEUE", "SIZE", "LATENCY", "PAUSED"]
    assert text[1].split()[:2] == ["default", "2"]
    assert text[1].split()[2].startswith("2m0")


def test_pause_and_resume(cli: CLI, r: redis.Redis) -> None:
    assert cli("queue", "pause", "mail").out.strip() == "queue mail paused"
    assert r.sismember("cogworker:paused", "mail")
    assert cli("queue", "pause", "mail").out.strip() == "queue mail was already paused"
    assert cli("queues", "--json").json() == [{"name": "mail", "size": 0, "latency_s": None, "paused": True}]
    assert cli("queue", "resume", "mail", "--json").json() == {
        "queue": "mail",
        "paused": False,
        "changed": True,
    }
    assert not r.sismember("cogworker:paused", "mail")
    assert cli("queue", "resume", "mail").out.strip() == "queue mail was not paused"


@pytest.mark.parametrize("name", ["mail ", "a b", "a:b", "a,b", "tab\there", "bad\udcffname"])
def test_pause_refuses_a_name_no_worker_can_read(cli: CLI, r: redis.Redis, name: str) -> None:
    refused = cli("queue", "pause", name)
    assert refused.code == 2
    assert (
        refused.err.startswith("cogworker: not a queue name: ")
        and "a queue name is a non-empty" in refused.err
    )
    assert r.smembers("cogworker:paused") == set()


def test_resume_takes_a_name_an_older_version_paused(cli: CLI, r: redis.Redis) -> None:
    r.sadd("cogworker:paused", "a b")
    assert cli("queue", "resume", "a b").out.strip() == "queue a b resumed"
    assert r.smembers("cogworker:paused") == set()


def test_clear_asks_refuses_without_a_terminal_and_takes_yes(
    cli: CLI, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        push(r, "default", f"j{i}", time.time())
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # piped input is not a terminal
    refused = cli("queue", "clear", "default")
    assert refused.code == 2
    assert refused.err.strip() == (
        "cogworker: Delete all 3 job(s) waiting in queue default? "
        "Refusing without a terminal to ask on: pass --yes"
    )
    monkeypatch.setattr("sys.stdin", FakeTerminal("no\n"))
    assert cli("queue", "clear", "default").code == 1
    assert r.llen("cogworker:queue:default") == 3
    monkeypatch.setattr("sys.stdin", FakeTerminal("y\n"))
    cleared = cli("queue", "clear", "default")
    assert cleared.code == 0
    assert "queue default cleared: 3 job(s) deleted" in cleared.out
    assert r.exists("cogworker:queue:default") == 0
    assert not r.sismember("cogworker:queues", "default")
    push(r, "default", "x", time.time())
    assert cli("queue", "clear", "default", "--yes", "--json").json() == {"queue": "default", "removed": 1}


def test_queue_needs_an_action_and_a_name(cli: CLI) -> None:
    assert cli("queue").code == 2
    assert cli("queue", "pause").code == 2


def test_clear_counts_and_deletes_the_queues_suspects_too(cli: CLI, r: redis.Redis) -> None:
    """A job orphaned twice waits on the queue's suspects list (worker/recovering/recovery.py): still a job
    waiting in that queue."""
    push(r, "default", "waiting", time.time())
    r.rpush("cogworker:suspects:default", json.dumps({"class": "demo_jobs.record", "jid": "suspect"}))
    assert cli("queue", "clear", "default", "--yes", "--json").json() == {"queue": "default", "removed": 2}
    assert r.exists("cogworker:queue:default", "cogworker:suspects:default") == 0
