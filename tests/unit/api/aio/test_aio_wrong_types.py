"""Awaitable pushes meeting keys of the wrong type, as the sync push does (api/aio_features.py): a
unique claim's key that isn't a string fails the push with WrongTypeKey naming it and writes nothing;
a status key that isn't a hash leaves the push standing (statuses are best-effort), and both are
handed to the key guard."""

from __future__ import annotations

import asyncio

import pytest
import redis

import cogworker
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.store.key_guard import WrongTypeKey
from cogworker.store.locks import unique_digest


@cogworker.job(name="aio_wrong.unique", unique="until_executed")
def once(n: int) -> None: ...


@cogworker.job(name="aio_wrong.tracked", status=True)
def tracked(n: int) -> None: ...


def test_a_unique_key_of_another_type_fails_the_push_naming_it(r: redis.Redis, configured: Settings) -> None:
    payload = once.build((1,), {})
    key = keys.unique(unique_digest(payload))
    r.hset(key, "not", "a claim")
    with pytest.raises(WrongTypeKey) as raised:
        asyncio.run(once.aio.send(payload))
    assert key in str(raised.value)
    assert r.llen(keys.queue("default")) == 0  # nothing pushed without its claim
    assert r.type(key) == "hash"  # left for the key guard, which a human reads


def test_a_status_key_of_another_type_leaves_the_push_standing(r: redis.Redis, configured: Settings) -> None:
    payload = tracked.build((2,), {})
    key = keys.status(str(payload["jid"]))
    r.rpush(key, "not a status")
    assert asyncio.run(tracked.aio.send(payload)) == payload["jid"]
    assert r.llen(keys.queue("default")) == 1
    assert key in r.smembers(keys.GUARD_REQUESTS)  # handed to the key guard to move aside
    assert r.type(key) == "list"
