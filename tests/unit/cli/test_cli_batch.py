"""`cogworker batch show BID [--json]` and `cogworker batch list`: a batch's counts, failures and
callbacks as text and JSON, exit code 1 for an unknown batch, hostile descriptions printed escaped,
and the verb as the first command of a fresh interpreter configured only by environment variables."""

from __future__ import annotations

import json
import subprocess
import sys

import batch_jobs as bj
import redis

import cogworker
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.batches import stuck_batch
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer


def a_batch_with_a_dead_member(r: redis.Redis, settings: Settings) -> str:
    from cogworker.api import retry

    with cogworker.batch("nightly\x1b[31m import", on_complete=bj.on_complete, callback_args=("x",)) as b:
        bj.dies.perform_async("a")
        bj.ok.perform_async("b")
    raw = r.lmove(keys.queue("default"), keys.in_progress("cli:1:x"), "RIGHT", "LEFT")
    settler = Settler(components.build(settings).ctx, keys.in_progress("cli:1:x"))
    settler.file(raw, retry.on_failure(json.loads(raw), RuntimeError("broken <b>")))
    return b.bid


def test_show_prints_counts_failures_and_callbacks(r: redis.Redis, configured: Settings, cli: CLI) -> None:
    bid = a_batch_with_a_dead_member(r, configured)
    done = cli("batch", "show", bid)
    assert done.code == 0, done.err
    assert f"batch {bid}: running" in done.out
    assert "members: 2 total, 1 pending, 1 done, 1 failed (1 dead)" in done.out
    assert "RuntimeError: broken <b>" in done.out
    assert "batch_jobs.on_complete" in done.out and "waiting" in done.out
    assert "\x1b" not in done.out  # a terminal escape in the description is printed escaped
    data = cli("batch", "show", bid, "--json").json()
    assert (data["total"], data["pending"], data["dead"], data["state"], data["complete"]) == (
        2,
        1,
        1,
        "running",
        False,
    )
    assert list(data["failures"].values()) == ["RuntimeError: broken <b>"]
    assert data["callbacks"][0]["kind"] == "complete"
    listed = cli("batch", "list", "--json").json()
    assert [entry["bid"] for entry in listed] == [bid]
    assert bid in cli("batch", "list").out


def test_an_unknown_batch_exits_1(r: redis.Redis, cli: CLI) -> None:
    done = cli("batch", "show", "0" * 24)
    assert done.code == 1
    assert "not found" in done.out
    assert cli("batch", "show", "0" * 24, "--json").json() == {"bid": "0" * 24, "found": False}
    assert "(no batches)" in cli("batch", "list").out


def test_batch_show_as_the_first_command(
    r: redis.Redis, redis_server: RedisServer, configured: Settings
) -> None:
    with cogworker.batch("first", on_complete=bj.on_complete, callback_args=("x",)) as b:
        bj.ok.perform_async("a")
    env = clean_env()
    env["COGWORKER_REDIS_URL"] = redis_server.url
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "batch", "show", b.bid, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pending"] == 1


def test_release_frees_a_batch_held_by_a_killed_app_and_a_second_release_changes_nothing(
    r: redis.Redis, redis_server: RedisServer, cli: CLI
) -> None:
    bid = stuck_batch(redis_server.url, "stuck")
    shown = cli("batch", "show", bid)
    assert "open: 1 block(s) still pushing" in shown.out and "held by a block's lease" in shown.out
    done = cli("batch", "release", bid)
    assert done.code == 0, done.err
    # Its member has not run (no worker here): the batch waits for it, held by nothing.
    assert done.out.strip() == f"batch {bid}: released 1 hold(s); now running"
    assert r.hget(keys.batch(bid), "holds") == "0" and r.zcard(keys.BATCH_LEASES) == 0
    # Run again, as after a lost reply: nothing more is released.
    again = cli("batch", "release", bid, "--json")
    assert again.code == 0
    assert again.json() == {"bid": bid, "found": True, "released": 0, "state": "running"}
    unknown = cli("batch", "release", "0" * 24)
    assert unknown.code == 1 and "not found" in unknown.out
