"""Each public entry point as the first call of a fresh interpreter configured only by environment
variables, the way a new user's script starts. The suite's fixtures call `configure()` first, which
hid a deadlock: `push_bulk` as the first call took the client's lock and then, reading the settings,
`configure()` took it again and never returned.

Every case runs in a subprocess with a timeout (a hang is a failure, not a stuck suite) and checks
what reached Redis, not only the exit code.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from tests.support.daemon_env import clean_env
from tests.support.first_call import TIMEOUT_S, first_call
from tests.support.redis_server import RedisServer


def queued(r: redis.Redis, queue: str = "default") -> list[dict]:
    return [json.loads(raw) for raw in r.lrange(f"cogworker:queue:{queue}", 0, -1)]


def scheduled(r: redis.Redis) -> list[dict]:
    return [json.loads(raw) for raw in r.zrange("cogworker:schedule", 0, -1)]


def test_perform_async(r: redis.Redis, redis_server: RedisServer) -> None:
    jid = first_call("from demo_jobs import record; print(record.perform_async('a'))", redis_server.url)
    assert [(j["jid"], j["args"]) for j in queued(r)] == [(jid, ["a"])]


def test_perform_in(r: redis.Redis, redis_server: RedisServer) -> None:
    jid = first_call("from demo_jobs import record; print(record.perform_in(60, 'a'))", redis_server.url)
    assert [j["jid"] for j in scheduled(r)] == [jid]


def test_perform_at(r: redis.Redis, redis_server: RedisServer) -> None:
    code = "import time; from demo_jobs import record; print(record.perform_at(time.time() + 60, 'a'))"
    jid = first_call(code, redis_server.url)
    assert [j["jid"] for j in scheduled(r)] == [jid]


def test_set_then_perform_async(r: redis.Redis, redis_server: RedisServer) -> None:
    code = "from demo_jobs import record; print(record.set(queue='firstq').perform_async('a'))"
    jid = first_call(code, redis_server.url)
    assert [j["jid"] for j in queued(r, "firstq")] == [jid]


def test_push_bulk(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import json, cogworker
        from demo_jobs import record
        print(json.dumps(cogworker.push_bulk(record, [("a",), ("b",)])))
    """
    jids = json.loads(first_call(code, redis_server.url))
    assert sorted(j["jid"] for j in queued(r)) == sorted(jids)


def test_status(r: redis.Redis, redis_server: RedisServer) -> None:
    r.hset("cogworker:status:j1", mapping={"status": "working"})
    out = first_call("import cogworker; print(cogworker.status('j1'))", redis_server.url)
    assert out == "working"


def test_status_all_push(r: redis.Redis, redis_server: RedisServer) -> None:
    """With COGWORKER_STATUS_ALL the status middleware reads the settings inside the push."""
    code = "import cogworker; from demo_jobs import record; print(cogworker.push_bulk(record, [('a',)])[0])"
    jid = first_call(code, redis_server.url, COGWORKER_STATUS_ALL="true")
    assert r.hget(f"cogworker:status:{jid}", "status") == "queued"
    assert [j["jid"] for j in queued(r)] == [jid]


def test_fake_testing_mode(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker.testing
        from demo_jobs import record
        with cogworker.testing.fake():
            record.perform_async("a")
            import cogworker
            cogworker.push_bulk(record, [("b",)])
            print(len(record.jobs))
            record.drain()
    """
    assert first_call(code, redis_server.url) == "2"
    # drain() ran both jobs in this process (they write to Redis themselves); nothing was queued.
    assert sorted(tag.split()[0] for tag in r.lrange("test:ran", 0, -1)) == ["a", "b"]
    assert r.keys("cogworker:*") == []


def test_inline_testing_mode(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker, cogworker.testing
        from demo_jobs import record
        with cogworker.testing.inline():
            cogworker.push_bulk(record, [("a",)])
            record.perform_async("b")
    """
    first_call(code, redis_server.url)
    assert [tag.split()[0] for tag in r.lrange("test:ran", 0, -1)] == ["a", "b"]
    assert r.keys("cogworker:*") == []


def test_configure_then_push_bulk(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker
        from demo_jobs import record
        cogworker.configure()
        print(cogworker.push_bulk(record, [("a",)])[0])
    """
    jid = first_call(code, redis_server.url)
    assert [j["jid"] for j in queued(r)] == [jid]


@pytest.mark.parametrize("how", ["perform_async", "push_bulk"])
def test_two_threads_push_at_once_as_their_first_act(
    r: redis.Redis, redis_server: RedisServer, how: str
) -> None:
    code = f"""
        import threading, cogworker
        from demo_jobs import record
        start = threading.Barrier(2)

        def push(tag):
            start.wait()
            for i in range(20):
                if {how!r} == "push_bulk":
                    cogworker.push_bulk(record, [(f"{{tag}}{{i}}",)])
                else:
                    record.perform_async(f"{{tag}}{{i}}")

        threads = [threading.Thread(target=push, args=(t,)) for t in "xy"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """
    first_call(code, redis_server.url)
    assert len(queued(r)) == 40


def test_cli_status_as_the_first_command(r: redis.Redis, redis_server: RedisServer) -> None:
    r.lpush(
        "cogworker:queue:default", json.dumps({"class": "demo_jobs.record", "jid": "j", "queue": "default"})
    )
    r.sadd("cogworker:queues", "default")
    clean = clean_env()
    clean["COGWORKER_REDIS_URL"] = redis_server.url
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "status", "--json"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert "default" in done.stdout


def test_a_time_limit_and_job_timeout(r: redis.Redis, redis_server: RedisServer) -> None:
    """`timeout_s` at `.set` and `cogworker.JobTimeout` as a fresh interpreter's first use."""
    code = """
        import cogworker
        from demo_jobs import record
        assert issubclass(cogworker.JobTimeout, Exception)
        print(record.set(timeout_s=1.5).perform_async('a'))
    """
    jid = first_call(code, redis_server.url)
    assert [(j["jid"], j["timeout_s"]) for j in queued(r)] == [(jid, 1.5)]


def test_on_death_and_a_job_with_retry_filters(r: redis.Redis, redis_server: RedisServer) -> None:
    """The hooks and the filters are code: registering them and pushing a job declared with them
    must neither touch Redis early nor try to put them in the payload."""
    code = """
        import cogworker

        @cogworker.on_death
        def notify(job, death: cogworker.Death):
            pass

        try:
            cogworker.on_death("not a function")
        except TypeError as exc:
            print(exc)

        @cogworker.job(name="first.filtered", retry=4, retry_on=(ConnectionError,), retry_in=lambda c, e: 5)
        def filtered():
            pass

        print(filtered.perform_async())
    """
    refused, jid = first_call(code, redis_server.url).splitlines()
    assert refused == "on_death takes a function fn(job, death), not str"
    [payload] = queued(r)
    assert payload["jid"] == jid and payload["retry"] == 4
    assert not {"retry_on", "retry_in", "discard_on"} & set(payload)


def test_deploy_mark(r: redis.Redis, redis_server: RedisServer) -> None:
    first_call("import cogworker; cogworker.deploy_mark('v9', at=1_800_000_000.0, by='ci')", redis_server.url)
    [(member, score)] = r.zrange("cogworker:metrics:marks", 0, -1, withscores=True)
    assert score == 1_800_000_000.0
    assert json.loads(member) == {"at": 1_800_000_000.0, "label": "v9", "by": "ci"}
