"""`cogworker chain show CID [--json]`: a running, a complete and a dead chain in text and JSON, a
group step with its batch, an
unknown chain's exit code, and the verb as the first command of a fresh interpreter configured only
by environment variables."""

from __future__ import annotations

import json
import subprocess
import sys

import chain_jobs
import redis

import cogworker
from cogworker.settings import Settings, load_settings
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.daemon_env import clean_env
from tests.support.inproc import Runner
from tests.support.redis_server import RedisServer


def test_a_running_chain_in_text_and_json(r: redis.Redis, configured: Settings, cli: CLI) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.step.s("b"))
    assert pushed is not None
    text = cli("chain", "show", pushed.id)
    assert text.code == 0
    lines = text.out.splitlines()
    assert lines[0] == f"chain {pushed.id}: running, 0 of 2 steps done"
    assert any(pushed.first_jid in line and "queued" in line for line in lines)
    assert any(pushed.jids[1] in line and "pending" in line for line in lines)
    shown = cli("chain", "show", pushed.id, "--json").json()
    assert shown["state"] == "running" and [s["jid"] for s in shown["steps"]] == list(pushed.jids)


def test_a_dead_chain_shows_its_error(
    r: redis.Redis, redis_server: RedisServer, configured: Settings, cli: CLI
) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"), chain_jobs.doomed.s("b"))
    assert pushed is not None
    runner = Runner(load_settings(redis_url=redis_server.url, require="chain_jobs"))
    while runner.run_next():
        pass
    text = cli("chain", "show", pushed.id)
    assert text.code == 0
    assert text.out.splitlines()[:3][0] == f"chain {pushed.id}: dead, 1 of 2 steps done"
    assert "error: ValueError: b is doomed" in text.out
    shown = cli("chain", "show", pushed.id, "--json").json()
    assert [s["state"] for s in shown["steps"]] == ["done", "dead"]


def test_a_group_step_shows_its_members_and_its_batch(
    r: redis.Redis, redis_server: RedisServer, configured: Settings, cli: CLI
) -> None:
    pushed = cogworker.chain(cogworker.group(chain_jobs.step.s("a"), chain_jobs.step.s("b")))
    assert pushed is not None
    runner = Runner(load_settings(redis_url=redis_server.url, require="chain_jobs"))
    assert runner.run_next()
    text = cli("chain", "show", pushed.id)
    assert text.code == 0
    assert any(pushed.jids[0] in line and "group of 2, 1 ended" in line for line in text.out.splitlines())
    shown = cli("chain", "show", pushed.id, "--json").json()
    assert shown["steps"][0]["bid"] == pushed.jids[0] and shown["steps"][0]["batch"]["done"] == 1


def test_an_unknown_chain_exits_1(r: redis.Redis, cli: CLI) -> None:
    done = cli("chain", "show", "nope")
    assert done.code == 1
    assert "no chain nope" in done.err


def test_chain_show_as_the_first_command_of_a_fresh_interpreter(
    r: redis.Redis, redis_server: RedisServer, configured: Settings
) -> None:
    pushed = cogworker.chain(chain_jobs.step.s("a"))
    assert pushed is not None
    runner = Runner(load_settings(redis_url=redis_server.url, require="chain_jobs"))
    assert runner.run_next()
    clean = clean_env(COGWORKER_REDIS_URL=redis_server.url)
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "chain", "show", pushed.id, "--json"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["state"], shown["done"], shown["total"]) == ("complete", 1, 1)
    assert shown["completed_at"] is not None
