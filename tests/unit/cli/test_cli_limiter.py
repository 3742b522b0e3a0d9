"""`cogworker limiter list` and `cogworker limiter show NAME` against a real Redis, with limiters in use
by this process (text and --json), and the exit code for a name not in use."""

from __future__ import annotations

import os

import redis

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.redis_server import RedisServer


def test_list_and_show_limiters_in_use(cli: CLI, redis_server: RedisServer, r: redis.Redis) -> None:
    assert cli("limiter", "list").out.strip() == "(no limiter in use)"
    assert cli("limiter", "list", "--json").json() == []
    cw_client.configure(load_settings(redis_url=redis_server.url))
    stripe = cogworker.limiter.concurrent("stripe-42", 3, lease_s=30)
    github = cogworker.limiter.window("github", 5000, per=3600)
    sms = cogworker.limiter.bucket("sms", 1, per=60, burst=5)
    with stripe, stripe, github, sms:
        text = cli("limiter", "list").out
        assert "stripe-42  concurrent  2/3 held (leases of 30 s)" in text
        assert "1/5000 in this 3600 s window" in text and "1.0/5 tokens taken (1 per 60 s)" in text
        data = {s["name"]: s for s in cli("limiter", "list", "--json").json()}
        assert (data["stripe-42"]["in_use"], data["stripe-42"]["limit"], data["stripe-42"]["per_s"]) == (
            2,
            3,
            30,
        )
        assert data["github"]["resets_in_s"] <= 3600 and data["sms"]["burst"] == 5
        shown = cli("limiter", "show", "stripe-42")
        assert shown.code == 0 and "HOST" in shown.out and str(os.getpid()) in shown.out
        [state] = cli("limiter", "show", "stripe-42", "--json").json()
        assert [h["pid"] for h in state["holders"]] == [str(os.getpid())] * 2
        assert all(h["jid"] is None and 0 < h["lease_left_s"] <= 30 for h in state["holders"])
        assert "resets in" in cli("limiter", "show", "github").out
    r.set(keys.limiter("window", "odd"), "x")  # another type under the limiters' prefix: left out
    assert "odd" not in cli("limiter", "list").out
    missing = cli("limiter", "show", "nope")
    assert missing.code == 1 and "no limiter named 'nope'" in missing.err
