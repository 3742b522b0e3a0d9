"""`cogworker.batch`, `cogworker.current_batch` and `cogworker.batch_status` as the first call of a
fresh interpreter configured only by environment variables, in a subprocess with a timeout."""

from __future__ import annotations

import json

import redis

from cogworker.store import keys
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer


def test_a_batch_as_the_first_call(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker, batch_jobs
        print(cogworker.current_batch())
        with cogworker.batch("first", on_complete=batch_jobs.on_complete, callback_args=("x",)) as b:
            batch_jobs.ok.perform_async("a")
            cogworker.push_bulk(batch_jobs.ok, [("b",), ("c",)])
        status = cogworker.batch_status(b.bid)
        print(b.bid, status.total, status.pending, status.state)
    """
    out = first_call(code, redis_server.url, COGWORKER_REQUIRE="batch_jobs").splitlines()
    assert out[0] == "None"
    bid, total, pending, state = out[1].split()
    assert (total, pending, state) == ("3", "3", "running")
    assert {json.loads(raw)["bid"] for raw in r.lrange(keys.queue("default"), 0, -1)} == {bid}


def test_batch_status_as_the_first_call_under_a_prefix(r: redis.Redis, redis_server: RedisServer) -> None:
    code = """
        import cogworker
        with cogworker.batch("prefixed") as b:
            pass
        print(b.bid, cogworker.batch_status(b.bid).state)
    """
    out = first_call(code, redis_server.url, COGWORKER_REQUIRE="", COGWORKER_KEY_PREFIX="other:")
    bid, state = out.split()
    assert state == "complete"
    assert r.exists(f"other:batch:{bid}") == 1 and r.exists(keys.batch(bid)) == 0
