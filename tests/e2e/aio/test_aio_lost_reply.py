"""The lost-reply matrix for awaitable pushes (tests/e2e/lost_reply/test_client_writes.py does it for
the sync push): each push's write has its reply lost after Redis ran it, or its command dropped
before it ran, by the RESP proxy between this test's job API and a real Redis, and a real
`cogworker run` worker (straight on Redis) runs what was written.

- lost: the push returns its jid (it finds its job written) and the job runs exactly once; a unique
  job's claim stands until that run, so a retried push is a duplicate;
- dropped: the push raises a ConnectionError, nothing runs, what the chain took is given back, and
  pushing again runs the job once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import matrix_jobs
import pytest
import redis

import cogworker.aio
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support import matrix
from tests.support.matrix import MODES, Stack
from tests.support.redis_server import wait_until

JOB_WRITES = ("EVALSHA", "EVAL")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with matrix.stack(worker_through_proxy=False) as made:
        yield made


@pytest.fixture
def m(stack: Stack) -> Iterator[Stack]:
    """One case: the job API talks through the proxy; the worker runs the jobs past it."""
    cw_client.configure(load_settings(redis_url=stack.proxy.url, redis_timeout_s=2))
    stack.proxy.clear()
    yield stack
    stack.end_case()


def pushed(mode: str, push: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Await `push` with its write faulted: a lost reply returns; a dropped write raises."""
    if mode == "lost":
        return asyncio.run(push())
    with pytest.raises(redis.ConnectionError) as caught:
        asyncio.run(push())
    assert not isinstance(caught.value, cogworker.PushOutcomeUnknown)  # known not written
    return None


@pytest.mark.parametrize("mode", MODES)
def test_push(m: Stack, mode: str) -> None:
    tag = f"aio-push-{mode}"
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)
    jid = pushed(mode, lambda: matrix_jobs.mark.aio.perform_async(tag))
    m.proxy.wait_fired(rule)
    if mode == "lost":
        assert isinstance(jid, str)
        m.wait_ran(tag)
        return
    wait_until(m.settled, timeout=10, message="nothing written")
    assert m.ran(tag) == 0
    asyncio.run(matrix_jobs.mark.aio.perform_async(tag))  # pushed again: it runs once
    m.wait_ran(tag)


@pytest.mark.parametrize("mode", MODES)
def test_unique_push(m: Stack, mode: str) -> None:
    tag = f"aio-unique-{mode}"
    rule = m.arm(mode, command=JOB_WRITES, arg=tag)
    jid = pushed(mode, lambda: matrix_jobs.unique_mark.aio.perform_async(tag))
    m.proxy.wait_fired(rule)
    if mode == "dropped":
        assert m.r.keys(keys.unique("*")) == []  # given back: the push can be made again
        assert asyncio.run(matrix_jobs.unique_mark.aio.perform_async(tag)) is not None
    else:
        assert isinstance(jid, str)
    m.wait_ran(tag)  # once, either way (end_case checks nothing else is left)


@pytest.mark.parametrize("mode", MODES)
def test_push_bulk(m: Stack, mode: str) -> None:
    tags = [f"aio-bulk-{mode}-{n}" for n in range(3)]
    rule = m.arm(mode, command=JOB_WRITES, arg=tags[0])
    pushed(mode, lambda: cogworker.aio.push_bulk(matrix_jobs.mark, [(tag,) for tag in tags]))
    m.proxy.wait_fired(rule)
    if mode == "dropped":
        wait_until(m.settled, timeout=10, message="nothing written")
        assert all(m.ran(tag) == 0 for tag in tags)
        asyncio.run(cogworker.aio.push_bulk(matrix_jobs.mark, [(tag,) for tag in tags]))
    for tag in tags:
        m.wait_ran(tag)
