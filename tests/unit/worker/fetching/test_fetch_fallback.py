"""The runtime fallback to basic fetch (cogworker/worker/fetching/fetch_fallback.py), against a real
Redis: what Redis words as a refusal; jobs fetched onto the in-progress list before the fallback are
acknowledged, filed and given back on that list, each once, while jobs basic fetch popped are
settled on none; an acknowledgement sent again after its reply was lost, or after it never ran,
takes nothing off twice."""

from __future__ import annotations

import pytest
import redis

from cogworker import codec
from cogworker.api import payload, retry
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.store.connection import connect
from cogworker.store.redis_context import RedisContext
from cogworker.worker.fetching.basic_fetch import BasicFetch
from cogworker.worker.fetching.fetch import Work, refused
from cogworker.worker.fetching.fetch_fallback import FallbackFetch, StillListed
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.settling.settle import Settler
from tests.support.redis_server import RedisServer

IDENTITY = "test:fallback:1"


def raw_job(tag: str) -> str:
    return codec.dumps(payload.build("demo_jobs.record", [tag], {}, queue="default", retry=True))


@pytest.mark.parametrize(
    "text",
    [
        "ERR Unknown Redis command called from script script: 06f4..., on @user_script:1.",
        "Unknown Redis command called from Lua script",
        "ERR unknown command 'blmove', with args beginning with: 'q' 'ip'",
        "ERR The user executing the script can't run this command or subcommand script: 06f4...",
        "NOPERM this user has no permissions to run the 'blmove' command",
    ],
)
def test_a_command_renamed_away_or_denied_to_the_acl_user_is_a_refusal(text: str) -> None:
    assert refused(text) and refused(redis.ResponseError(text))


@pytest.mark.parametrize(
    "text",
    [
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "NOPERM this user has no permissions to access one of the keys used as arguments",
        "ERR The user executing the script can't access at least one of the keys mentioned",
    ],
)
def test_a_key_of_the_wrong_type_a_full_memory_or_a_denied_key_is_not(text: str) -> None:
    assert not refused(text)


def fallen_back(
    server: RedisServer, listed_raws: list[str]
) -> tuple[redis.Redis, FallbackFetch, Settler, StillListed]:
    """A worker's fetcher and settler right after a fallback, with `listed_raws` on its list."""
    settings = load_settings(redis_url=server.url)
    ctx = RedisContext.build(settings)
    blocking = connect(settings, extra_timeout_s=2.0)
    listed = ReliableFetch(ctx.client, blocking, ctx.scripts, IDENTITY, settings.queue_spec)
    r = server.client()
    if listed_raws:
        r.lpush(listed.in_progress_key, *listed_raws)
    still = StillListed(listed.in_progress_key, listed_raws)
    settler = Settler(ctx, listed.in_progress_key)
    settler.use_basic_fetch(still)
    fetcher = FallbackFetch(BasicFetch(ctx.client, blocking, settings.queue_spec), listed, still)
    return r, fetcher, settler, still


def test_acks_of_jobs_fetched_before_come_off_the_list_once_and_others_are_counted(
    private_redis: RedisServer,
) -> None:
    a, b, popped = raw_job("a"), raw_job("b"), raw_job("popped")
    r, fetcher, _settler, still = fallen_back(private_redis, [a, b])
    result = fetcher.fetch(0, [(a, "ja"), (popped, "jp")])
    assert result.acked == 2 and result.works == []
    assert r.lrange(keys.in_progress(IDENTITY), 0, -1) == [b]
    assert r.get(keys.STAT_PROCESSED) == "2"
    # The same ack again (its reply was lost after it ran): the entry is gone, nothing counted twice.
    still.put_back([a])
    assert fetcher.fetch(0, [(a, "ja")]).acked == 0
    assert r.get(keys.STAT_PROCESSED) == "2"
    fetcher.close()


def test_an_ack_that_never_ran_is_sent_to_the_list_again(private_redis: RedisServer) -> None:
    a = raw_job("a")
    r, fetcher, _settler, _still = fallen_back(private_redis, [a])
    private_redis.stop()
    with pytest.raises(redis.ConnectionError):
        fetcher.fetch(0, [(a, "ja")])
    private_redis.start()  # without persistence: the list is made again, as it was
    r.lpush(keys.in_progress(IDENTITY), a)
    assert fetcher.fetch(0, [(a, "ja")]).acked == 1  # the copy was put back: to the list, not counted blind
    assert r.llen(keys.in_progress(IDENTITY)) == 0 and r.get(keys.STAT_PROCESSED) == "1"
    fetcher.close()


def test_an_unstarted_job_fetched_before_goes_back_from_the_list(private_redis: RedisServer) -> None:
    listed_raw, popped = raw_job("listed"), raw_job("popped")
    r, fetcher, _settler, _still = fallen_back(private_redis, [listed_raw])
    assert fetcher.give_back(Work("default", listed_raw))
    assert fetcher.give_back(Work("default", popped))
    assert r.llen(keys.in_progress(IDENTITY)) == 0
    assert r.lrange(keys.queue("default"), 0, -1) == [listed_raw, popped]
    fetcher.close()


def test_a_failure_of_a_job_fetched_before_is_filed_off_the_list_and_one_popped_after_on_none(
    private_redis: RedisServer,
) -> None:
    listed_raw, popped = raw_job("listed"), raw_job("popped")
    r, fetcher, settler, _still = fallen_back(private_redis, [listed_raw])
    for raw in (listed_raw, popped):
        assert settler.file(raw, retry.on_failure(codec.loads(raw), ValueError("no")))
    assert r.zcard(keys.RETRY) == 2 and r.get(keys.STAT_FAILED) == "2"
    assert r.llen(keys.in_progress(IDENTITY)) == 0
    fetcher.close()
