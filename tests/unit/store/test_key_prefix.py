"""COGWORKER_KEY_PREFIX: every key name follows it, a bad one stops every command with exit 78, and a
push configured only by the environment (a user's first call) writes under it and nowhere else."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

from cogworker.api import client
from cogworker.settings import ConfigError, load_settings
from cogworker.store import keys
from tests.support.first_call import first_call
from tests.support.key_names import BUILDERS, every_name
from tests.support.redis_server import RedisServer


def test_every_builder_is_listed_here() -> None:
    builders = {
        name
        for name, value in vars(keys).items()
        if callable(value) and getattr(value, "__module__", "") == keys.__name__
    }
    assert builders - {"use_prefix", "job_sets", "queue_name"} == set(BUILDERS)


@pytest.mark.parametrize("prefix", ["app1:", "{myapp}:", "x"])
def test_every_name_follows_the_prefix(prefix: str) -> None:
    keys.use_prefix(prefix)
    names = every_name()
    assert len(names) > 60
    assert [n for n in names if not n.startswith(prefix)] == []
    if prefix != keys.DEFAULT_PREFIX:
        assert [n for n in names if n.startswith(keys.DEFAULT_PREFIX)] == []
    assert keys.queue_name(keys.queue("reports")) == "reports"
    keys.use_prefix(keys.DEFAULT_PREFIX)
    assert keys.QUEUES == "cogworker:queues"


def test_the_default_is_cogworker() -> None:
    assert load_settings().key_prefix == "cogworker:"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "must not be empty"),
        ("my app:", "no whitespace"),
        (" ", "no whitespace"),
        ("app\t", "no whitespace"),
        ("app\x01:", "control characters"),
        ("{myapp:", "unbalanced hash tag"),
        ("myapp}:", "unbalanced hash tag"),
        ("}myapp{:", "unbalanced hash tag"),
        ("{a}{b}:", "unbalanced hash tag"),
        ("{}:", "empty hash tag"),
    ],
)
def test_a_bad_prefix_is_named(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv("COGWORKER_KEY_PREFIX", value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "COGWORKER_KEY_PREFIX" in str(err.value)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "argv",
    [["-m", "cogworker", "run"], ["-m", "supervisor.main"], ["-m", "cogworker", "status"]],
    ids=["run", "swarm", "status"],
)
def test_a_bad_prefix_exits_78_before_anything_starts(argv: list[str], redis_server: RedisServer) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    env.update(COGWORKER_REDIS_URL=redis_server.url, COGWORKER_REQUIRE="demo_jobs")
    env["COGWORKER_KEY_PREFIX"] = "{}:"
    env.pop("NOTIFY_SOCKET", None)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "COGWORKER_KEY_PREFIX='{}:'" in lines[0], done.stderr
    assert "READY" not in done.stdout + done.stderr


def test_configure_applies_the_prefix(r: redis.Redis, redis_server: RedisServer) -> None:
    client.configure(load_settings(redis_url=redis_server.url, key_prefix="{tenant}:"))
    assert keys.queue("default") == "{tenant}:queue:default"
    client.push("demo_jobs.record", ["a"], {}, queue="default", options={})
    assert keys.QUEUES == "{tenant}:queues"
    assert r.llen("{tenant}:queue:default") == 1
    # With the push's marker (what a lost reply's check reads: api/push_outcome.py), prefixed too.
    jid = json.loads(r.lindex("{tenant}:queue:default", 0))["jid"]
    assert sorted(r.keys("*")) == ["{tenant}:pushed:" + jid, "{tenant}:queue:default", "{tenant}:queues"]


def test_a_first_push_configured_by_the_environment_uses_the_prefix(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    code = """
        import cogworker, demo_jobs
        demo_jobs.record.perform_async("a")
        cogworker.push_bulk(demo_jobs.record, [("b",), ("c",)])
        demo_jobs.record.perform_at(4102444800, "later")
        print("ok")
    """
    assert first_call(code, redis_server.url, COGWORKER_KEY_PREFIX="app1:") == "ok"
    markers = [key for key in r.keys("*") if key.startswith("app1:pushed:")]
    assert len(markers) == 4  # one per job pushed, for a lost reply's check
    assert sorted(set(r.keys("*")) - set(markers)) == ["app1:queue:default", "app1:queues", "app1:schedule"]
    assert r.llen("app1:queue:default") == 3
