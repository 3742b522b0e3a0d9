"""What the worker and the client do with a whole payload, per job, countably.

The payload curve (tests/bench/curves/payload.py) profiles copies of a 1 MB argument; these are the
causes it found, each counted here: the fetcher decoded every payload to learn whether its job is
`async def` (a second whole decode beside the job thread's), and the push turned orjson's bytes into
text that redis-py then encoded again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from cogworker import codec, job
from cogworker.api import middleware, payload, push_write
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.running.processor import Stats, process
from cogworker.worker.settling.settle import Settler
from tests.support import components

BIG = "x" * 100_000
ME = "me:1:payload"


@job(queue="default")
def takes(data: str, **kwargs: Any) -> None:
    pass


def _decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = codec.loads_dict

    def counting(raw: str | bytes) -> dict[str, Any] | None:
        calls.append(len(raw))
        return real(raw)

    monkeypatch.setattr(codec, "loads_dict", counting)
    return calls


def test_the_class_of_a_pushed_job_is_read_without_decoding_its_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = payload.stored(takes.build((BIG,), {"note": "n"})).decode()
    decodes = _decodes(monkeypatch)
    assert codec.class_name(raw) == takes.name
    assert decodes == []


@pytest.mark.parametrize(
    "raw",
    [
        # Sidekiq's order: `class` after other keys.
        '{"retry":true,"queue":"default","args":[],"class":"NoopJob","jid":"j"}',
        # A duplicate key: the decoder's answer (the last) wins, as the job thread will read it.
        '{"class":"first","args":[],"class":"second"}',
        # An escaped name.
        '{"class":"a\\"b","args":[]}',
        # "class" as an argument further on.
        '{"class":"mod.f","args":["class"]}',
        # Not a string, not an object, not JSON.
        '{"class":7}',
        "[1]",
        '{"class":"trunc',
    ],
)
def test_any_other_payload_is_decoded_and_read_as_the_job_thread_reads_it(raw: str) -> None:
    decoded = codec.loads_dict(raw)
    expected = decoded.get("class") if decoded is not None else None
    assert codec.class_name(raw) == (expected if isinstance(expected, str) else None)


def test_a_push_sends_the_payload_as_the_bytes_orjson_wrote(configured: object) -> None:
    job_dict = takes.build((BIG,), {})
    _keys, args = push_write.plan([job_dict], "attempt")
    [sent] = [arg for arg in args if isinstance(arg, bytes | str) and len(arg) > len(BIG)]
    assert isinstance(sent, bytes)  # no text copy of it made on the way
    assert json.loads(sent)["args"] == [BIG]


def test_a_stored_job_differs_from_another_of_its_class_before_its_arguments() -> None:
    """An acknowledgement's LREM compares the payload with in-progress entries: two jobs of one class
    with the same large argument must differ within their first bytes, not after the argument."""
    first, second = (payload.stored(takes.build((BIG,), {})) for _ in range(2))
    differ_at = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert differ_at < 100 < len(BIG)


@pytest.mark.parametrize("old_style", [False, True])
def test_a_job_stored_with_or_without_an_empty_kwargs_runs_and_middleware_sees_it(
    r: redis.Redis, configured: Settings, old_style: bool
) -> None:
    """Stored without its empty `kwargs` now; an earlier version's payload (with it) still runs."""
    seen: list[Any] = []
    middleware.server_chain.add(lambda job, call_next: (seen.append(job["kwargs"]), call_next()))
    raw = payload.stored(takes.build(("now",), {})).decode()
    if old_style:
        raw = codec.dumps({**json.loads(raw), "kwargs": {}})
    in_progress = keys.in_progress(ME)
    r.lpush(in_progress, raw)
    settler = Settler(components.build(configured).ctx, in_progress)
    process(Work("default", raw), settler, Stats(), allowed=())
    assert seen == [{}]
    assert settler.take_acks() == [(raw, json.loads(raw)["jid"])]  # ran, and acked by its exact text
