"""The fault-injecting RESP proxy (tests/support/resp_proxy.py) against a real redis-server: what it
forwards untouched (RESP2, RESP3, pipelines, pub/sub, large values), and each fault it injects."""

from __future__ import annotations

import hashlib
import socket

import demo_jobs  # type: ignore[import-not-found]
import pytest
import redis

from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import scripts
from cogworker.store.batch_scripts import text as batch_text
from cogworker.store.connection import connect
from tests.support.redis_server import RedisServer, wait_until
from tests.support.resp_proxy import RespProxy
from tests.support.resp_wire import encode_command
from tests.support.workers import WorkerPool


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def test_commands_and_pipelines_pass_untouched(resp_proxy: RespProxy, protocol: int) -> None:
    client = resp_proxy.client(protocol=protocol)
    big = "x" * 3_000_000  # many reads on both sides: frames split across socket reads
    assert client.set("big", big)
    assert client.get("big") == big
    client.hset("h", mapping={"a": "1", "b": "2"})
    assert client.hgetall("h") == {"a": "1", "b": "2"}
    pipe = client.pipeline(transaction=False)
    for n in range(497):
        pipe.incr(f"n{n % 7}")
    assert pipe.execute()[-7:] == [71, 71, 71, 71, 71, 71, 71]
    with client.pipeline() as multi:  # MULTI/EXEC: QUEUED replies, then one array
        multi.set("m", "1").incr("m")
        assert multi.execute() == [True, 2]
    assert resp_proxy.faults == []


def test_resp3_hello_and_its_map_reply(resp_proxy: RespProxy) -> None:
    client = resp_proxy.client(protocol=3)
    hello = client.execute_command("HELLO", "3")
    assert hello["proto"] == 3
    assert client.execute_command("PING") in ("PONG", True)


def test_a_lost_reply_ran_and_the_client_sees_the_connection_break(
    resp_proxy: RespProxy, private_redis: RedisServer, protocol: int
) -> None:
    client = resp_proxy.client(protocol=protocol)
    rule = resp_proxy.lose_reply(command="INCRBY")
    with pytest.raises(redis.ConnectionError):
        client.incr("counter")
    assert private_redis.client().get("counter") == "1"
    assert rule.fired == 1
    (fault,) = resp_proxy.faults
    assert (fault.action, fault.command, fault.args, fault.reply) == (
        "lose",
        "INCRBY",
        (b"counter", b"1"),
        b":1\r\n",
    )
    # Fired once (count=1): the next INCR, on a new connection, is answered.
    assert client.incr("counter") == 2


def test_a_lost_reply_in_a_pipeline_runs_what_came_before_and_sends_nothing_after(
    resp_proxy: RespProxy, private_redis: RedisServer, protocol: int
) -> None:
    client = resp_proxy.client(protocol=protocol)
    resp_proxy.lose_reply(command="INCRBY", arg="b")
    pipe = client.pipeline(transaction=False)
    pipe.incr("a").incr("b").incr("c")
    with pytest.raises(redis.ConnectionError):
        pipe.execute()
    direct = private_redis.client()
    assert (direct.get("a"), direct.get("b"), direct.get("c")) == ("1", "1", None)


def test_a_dropped_command_never_runs_nor_do_those_after_it(
    resp_proxy: RespProxy, private_redis: RedisServer, protocol: int
) -> None:
    client = resp_proxy.client(protocol=protocol)
    rule = resp_proxy.drop_command(command="incrby", arg="b")
    pipe = client.pipeline(transaction=False)
    pipe.incr("a").incr("b").incr("c")
    with pytest.raises(redis.ConnectionError):
        pipe.execute()
    direct = private_redis.client()
    assert (direct.get("a"), direct.get("b"), direct.get("c")) == ("1", None, None)
    assert rule.fired == 1 and resp_proxy.faults[0].action == "drop"
    resp_proxy.drop_command(command="SET")
    with pytest.raises(redis.ConnectionError):
        client.set("never", "1")
    assert direct.exists("never") == 0


def test_a_reply_held_past_the_timeout_after_the_command_ran(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    client = resp_proxy.client(socket_timeout=0.5)
    resp_proxy.delay_reply(30, command="LPUSH")
    with pytest.raises(redis.TimeoutError):
        client.lpush("q", "job")
    assert private_redis.client().lrange("q", 0, -1) == ["job"]


def test_a_short_hold_keeps_the_order_of_replies(resp_proxy: RespProxy) -> None:
    client = resp_proxy.client()
    rule = resp_proxy.delay_reply(0.3, command="INCRBY", count=None)
    pipe = client.pipeline(transaction=False)
    pipe.incr("a").set("b", "x").incr("a")
    assert pipe.execute() == [1, True, 2]
    assert rule.fired == 2


def test_count_skip_and_argument_matching(resp_proxy: RespProxy, private_redis: RedisServer) -> None:
    client = resp_proxy.client()
    rule = resp_proxy.lose_reply(command="INCRBY", arg="hit", skip=1, count=2)
    assert client.incr("miss") == 1  # another argument: not a match
    assert client.incr("hit") == 1  # skipped
    for _ in range(2):
        with pytest.raises(redis.ConnectionError):
            client.incr("hit")
    assert client.incr("hit") == 4  # count reached
    assert (rule.seen, rule.fired) == (3, 2)
    resp_proxy.wait_fired(rule, 2, timeout=5)


def test_a_condition_on_the_reply(resp_proxy: RespProxy) -> None:
    client = resp_proxy.client()
    rule = resp_proxy.lose_reply(command="RPOP", reply_contains="job")
    assert client.rpop("empty") is None  # a nil reply: passes, the rule stays armed
    client.lpush("q", "job-1")
    with pytest.raises(redis.ConnectionError):
        client.rpop("q")
    assert rule.fired == 1


def test_scripts_are_named_by_their_lua_file(resp_proxy: RespProxy, private_redis: RedisServer) -> None:
    client = resp_proxy.client()
    direct = private_redis.client()
    direct.set("unique:x", "jid-1")
    owned_delete = client.register_script(scripts.source("owned_delete"))
    rule = resp_proxy.lose_reply(script="owned_delete")
    # redis-py sends EVALSHA, gets NOSCRIPT (which never counts), loads the script, sends it again.
    with pytest.raises(redis.ConnectionError):
        owned_delete(keys=["unique:x"], args=["jid-1"], client=client)
    assert direct.exists("unique:x") == 0
    assert rule.fired == 1 and resp_proxy.faults[0].scripts == ("owned_delete",)
    # A script built from several files, cached by Redis before the proxy saw its text, is still
    # named: by every file it contains.
    sha = direct.script_load(batch_text("batch_close"))
    names = resp_proxy.scripts.names("EVALSHA", [b"EVALSHA", sha.encode()])
    assert names == {"batch_lib", "batch_close"}
    # EVAL's text is learnt as it passes.
    rule = resp_proxy.lose_reply(script="?" + hashlib.sha1(b"return 7").hexdigest()[:10])
    with pytest.raises(redis.ConnectionError):
        client.eval("return 7", 0)
    assert rule.fired == 1


def test_pubsub_passes_through(resp_proxy: RespProxy, private_redis: RedisServer, protocol: int) -> None:
    pubsub = resp_proxy.client(protocol=protocol).pubsub()
    pubsub.subscribe("wake")
    direct = private_redis.client()
    wait_until(lambda: direct.publish("wake", "default") == 1, timeout=10, message="the subscription")
    message = wait_until(lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1), timeout=10)
    assert message["data"] == "default"
    pubsub.close()


def test_cogworker_clients_do_not_retry_after_a_lost_reply(
    resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    """A retry of a command whose reply was lost would run it twice; cogworker's clients don't."""
    client = connect(load_settings(redis_url=resp_proxy.url, redis_timeout_s=5))
    resp_proxy.lose_reply(command="INCRBY", count=2)
    with pytest.raises(redis.ConnectionError):
        client.incr("once")
    with pytest.raises(redis.ConnectionError):
        client.pipeline(transaction=False).incr("twice").execute()
    direct = private_redis.client()
    assert (direct.get("once"), direct.get("twice")) == ("1", "1")
    assert [name for _, name, _ in resp_proxy.forwarded].count("INCRBY") == 2


def test_kick_closes_every_connection(resp_proxy: RespProxy) -> None:
    with socket.create_connection(("127.0.0.1", resp_proxy.port), timeout=10) as sock:
        sock.sendall(encode_command("PING"))
        assert sock.recv(100) == b"+PONG\r\n"
        assert resp_proxy.kick() == 1
        assert sock.recv(100) == b""
    # redis-py's pool finds a kicked idle connection closed and connects again.
    client = resp_proxy.client()
    assert client.ping()
    resp_proxy.kick()
    assert client.ping()


def test_a_worker_and_a_client_work_through_the_proxy(
    resp_proxy: RespProxy, private_redis: RedisServer, workers: WorkerPool
) -> None:
    """The traffic of a real `cogworker run` (its fetch script, pub/sub wake-ups, heartbeats) and of
    the job API passes through, and the scripts it runs are named."""
    cw_client.configure(load_settings(redis_url=resp_proxy.url))
    worker = workers.start(resp_proxy.url)
    assert demo_jobs.record.perform_async("through") is not None
    direct = private_redis.client()
    wait_until(lambda: direct.lrange("test:ran", 0, -1), timeout=60, message="the job to run")
    ran = {name for _, _, names in resp_proxy.forwarded for name in names}
    assert "fetch" in ran
    assert worker.stop() == 0
