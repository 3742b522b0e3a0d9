"""Jobs and callbacks for the batch tests (api/batch.py). Every member records its end in Redis
(`test:finished:<bid>`) before its worker acknowledges it, and every callback records its own run
(`test:callbacks`) with what its batch said at that moment, so a test can tell a callback that ran
twice or before its members had all ended."""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any

import redis

import cogworker
from cogworker import job


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


def _finished(bid: str | None, tag: str) -> None:
    if bid is not None:
        _redis().sadd(f"test:finished:{bid}", tag)


def _bid() -> str | None:
    current = cogworker.current_batch()
    return current.bid if current is not None else None


@job(retry=False)
def ok(tag: str) -> None:
    _finished(_bid(), tag)


@job(retry=False)
def noop(tag: str) -> None:
    """Nothing: what a member's own acknowledgement costs, against a plain job's."""


@job(retry=3, retry_in=lambda count, exc: 0)
def flaky(tag: str) -> None:
    """Fails on its first run, succeeds on its second."""
    if _redis().incr(f"test:tries:{tag}") == 1:
        raise ValueError(f"first try of {tag}")
    _finished(_bid(), tag)


@job(retry=False)
def dies(tag: str) -> None:
    _redis().rpush("test:died", tag)
    raise RuntimeError(f"{tag} dies")


@job(retry=False)
def blocks(tag: str) -> None:
    """Waits (up to a minute) for `test:release`: a test kills its worker meanwhile."""
    client = _redis()
    client.rpush("test:started", f"{tag}:{os.getpid()}")
    deadline = time.monotonic() + 60
    while not client.exists("test:release") and time.monotonic() < deadline:
        time.sleep(0.02)
    _finished(_bid(), tag)


@job(retry=False)
def spawns(tag: str, count: int) -> None:
    """Adds `count` members to its own batch, then ends."""
    current = cogworker.current_batch()
    assert current is not None
    with current.jobs():
        cogworker.push_bulk(ok, [(f"{tag}-{i}",) for i in range(count)])
    _finished(current.bid, tag)


def _wait_for_release(seconds: float) -> None:
    client = _redis()
    deadline = time.monotonic() + seconds
    while not client.exists("test:release") and time.monotonic() < deadline:
        time.sleep(0.02)


@job(retry=False)
def adds_then_blocks(tag: str) -> None:
    """Adds a member to its own batch; its first run then stays inside the block (up to two minutes,
    or until `test:release`) for a test to kill its worker there. A later run adds and ends."""
    current = cogworker.current_batch()
    assert current is not None
    client = _redis()
    run = client.incr(f"test:tries:{tag}")
    with current.jobs():
        current.add(ok, f"{tag}-child-{run}")
        client.rpush("test:started", f"{tag}:{os.getpid()}")
        if run == 1:
            _wait_for_release(120)
    _finished(current.bid, tag)


def hold_open(label: str) -> None:
    """An app's process (`python -c`): opens a batch, pushes one member, records the bid in
    `test:app-bid` and stays inside the block until `test:release` (or two minutes)."""
    with cogworker.batch(label, on_success=on_success, on_complete=on_complete, callback_args=(label,)) as b:
        ok.perform_async(f"{label}-1")
        _redis().set("test:app-bid", b.bid)
        _wait_for_release(120)


@job(retry=False)
def gated(tag: str) -> None:
    """Waits for `test:go` (set once every gated member has started), so members end together."""
    client = _redis()
    client.incr("test:gated-started")
    deadline = time.monotonic() + 30
    while not client.exists("test:go") and time.monotonic() < deadline:
        time.sleep(0.001)
    _finished(_bid(), tag)


def _record_callback(bid: str, label: str, kind: str) -> None:
    status = cogworker.batch_status(bid)
    client = _redis()
    record: dict[str, Any] = {
        "bid": bid,
        "label": label,
        "kind": kind,
        "finished": client.scard(f"test:finished:{bid}"),
        "member_of": _bid(),
    }
    if status is not None:
        record |= {"total": status.total, "pending": status.pending, "failed": status.failed,
                   "dead": status.dead, "complete": status.complete}  # fmt: skip
    client.rpush("test:callbacks", json.dumps(record))
    _finished(_bid(), f"callback:{bid}:{kind}")


@job(retry=False, queue="callbacks")
def on_success(bid: str, label: str) -> None:
    _record_callback(bid, label, "success")


@job(retry=False, queue="callbacks")
def on_complete(bid: str, label: str) -> None:
    _record_callback(bid, label, "complete")


@job(retry=False)
def on_death(bid: str, label: str) -> None:
    _record_callback(bid, label, "death")
