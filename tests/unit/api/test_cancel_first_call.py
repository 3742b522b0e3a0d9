"""`cogworker.cancel`, `cogworker.current_job` and `cogworker.JobCancelled` as the first call of a
fresh interpreter configured only by environment variables (see test_first_call.py for why), each
in a subprocess with a timeout, checking what reached Redis."""

from __future__ import annotations

import redis

from cogworker.store import keys
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer


def test_cancel_as_the_first_call(r: redis.Redis, redis_server: RedisServer) -> None:
    r.lpush(
        keys.queue("default"), '{"class":"demo_jobs.record","args":["a"],"jid":"first01","queue":"default"}'
    )
    r.sadd(keys.QUEUES, "default")  # as a push registers it
    out = first_call("import cogworker; print(cogworker.cancel('first01').case)", redis_server.url)
    assert out == "queued"
    assert r.llen(keys.queue("default")) == 0
    assert r.get(keys.stat("cancelled")) == "1"


def test_cancel_of_an_unknown_jid_as_the_first_call(r: redis.Redis, redis_server: RedisServer) -> None:
    out = first_call("import cogworker; print(cogworker.cancel('nobody01').case)", redis_server.url)
    assert out == "not_found"
    assert r.zscore(keys.CANCELS, "nobody01") is not None


def test_current_job_and_job_cancelled_as_the_first_names_used(redis_server: RedisServer) -> None:
    code = """
        import cogworker
        try:
            cogworker.current_job()
        except RuntimeError as exc:
            print("outside:", exc)
        print(issubclass(cogworker.JobCancelled, Exception), cogworker.CurrentJob.__name__)
    """
    out = first_call(code, redis_server.url).splitlines()
    assert out[0].startswith("outside: cogworker.current_job() is only available while a job runs")
    assert out[1] == "True CurrentJob"
