"""A failure's backtrace in the payload (cogworker/api/backtrace.py): stored under `error_backtrace` in
Sidekiq 6's encoding, byte for byte what Sidekiq's retry code writes and read back by Sidekiq's own API
(Debian's `ruby-sidekiq`, run in a subprocess); the `backtrace` field left to Sidekiq's option; entries
filed before the change (a plain list under `backtrace`) still read."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import pytest

import cogworker
from cogworker import codec
from cogworker.api import backtrace
from cogworker.api.death import call_hooks, notice
from cogworker.api.retry import on_failure
from tests.support.sidekiq import ruby

JOB: dict[str, Any] = {"class": "BridgeJob", "jid": "j" * 24, "queue": "default", "args": [1], "retry": 3}
# Sidekiq's encoder and its API's reader, with nothing of Redis: `redis_url` is never connected to.
COMPRESS = "lines = JSON.parse(STDIN.read); print Sidekiq::JobRetry.new.send(:compress_backtrace, lines)"
READ = "print JSON.generate(Sidekiq::JobRecord.new(STDIN.read).error_backtrace)"
NO_REDIS = "redis://127.0.0.1:1/0"


def failed_with(message: str, job: dict[str, Any] | None = None) -> dict[str, Any]:
    try:
        raise ValueError(message)
    except ValueError as exc:
        return on_failure(dict(job or JOB), exc, now=1000.0).payload


def test_a_failure_stores_error_backtrace_and_no_backtrace_field() -> None:
    filed = failed_with("nope")
    assert "backtrace" not in filed
    lines = backtrace.decode(filed["error_backtrace"])
    assert lines is not None and lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: nope"
    assert backtrace.lines_of(filed) == lines


def test_the_encoding_is_sidekiqs_byte_for_byte() -> None:
    lines = [f'  File "app/jobs/{n}.py", line {n}, in run — ünïcode' for n in range(40)]
    assert backtrace.encode(lines) == ruby(COMPRESS, NO_REDIS, stdin=codec.dumps(lines))


def test_sidekiqs_api_reads_a_cogworker_filing() -> None:
    filed = failed_with("read me")
    assert codec.loads(ruby(READ, NO_REDIS, stdin=codec.dumps(filed))) == backtrace.lines_of(filed)


def test_sidekiqs_encodings_are_read() -> None:
    lines = ["app.rb:3:in `perform'", "sidekiq/processor.rb:196:in `execute_job'"]
    written_by_ruby = ruby(COMPRESS, NO_REDIS, stdin=codec.dumps(lines))
    assert "\n" in written_by_ruby  # Sidekiq 6's Base64 has line breaks
    assert backtrace.decode(written_by_ruby) == lines
    # Sidekiq 7 writes strict Base64, without them.
    strict = base64.b64encode(zlib.compress(codec.dumps(lines).encode())).decode()
    assert backtrace.decode(strict) == lines
    # Sidekiq's API reads a plain list too (its oldest format).
    assert backtrace.lines_of({"error_backtrace": lines}) == lines


def test_the_job_keeps_sidekiqs_backtrace_option() -> None:
    for option in (True, False, 5):
        filed = failed_with("x", {**JOB, "backtrace": option})
        assert filed["backtrace"] is option
        assert backtrace.lines_of(filed) == backtrace.decode(filed["error_backtrace"])


def test_an_entry_filed_before_the_change_is_read_and_its_list_goes_at_the_next_failure() -> None:
    old = {**JOB, "backtrace": ["Traceback (most recent call last):", "ValueError: first"], "retry_count": 0}
    assert backtrace.lines_of(old) == ["Traceback (most recent call last):", "ValueError: first"]
    again = failed_with("second", old)
    assert "backtrace" not in again  # the old record, or Sidekiq's retry code would crash on it
    assert (backtrace.lines_of(again) or [])[-1] == "ValueError: second"
    assert again["retry_count"] == 1


@pytest.mark.parametrize(
    "stored",
    [
        "not base64 at all!",
        base64.b64encode(b"not zlib").decode(),
        base64.b64encode(zlib.compress(b'{"not": "a list"}')).decode(),
        base64.b64encode(zlib.compress(b"not json")).decode(),
        # A bomb: 8 MB of zeros in 8 kB; never inflated whole.
        base64.b64encode(zlib.compress(b"[" + b" " * 8_000_000 + b"]")).decode(),
    ],
)
def test_a_field_that_is_no_backtrace_reads_as_none(stored: str) -> None:
    assert backtrace.decode(stored) is None
    assert backtrace.lines_of({"error_backtrace": stored}) is None


def test_no_backtrace_reads_as_none() -> None:
    assert backtrace.lines_of(None) is None
    assert backtrace.lines_of({"backtrace": True}) is None
    assert backtrace.lines_of({"error_backtrace": ""}) is None


def test_an_on_death_hook_gets_the_lines() -> None:
    filed = failed_with("dead now", {**JOB, "retry": 0})
    seen: list[cogworker.Death] = []
    assert call_hooks(notice("failed", codec.dumps(filed)), [lambda job, death: seen.append(death)]) == 0
    assert seen[0].backtrace[-1] == "ValueError: dead now"


def test_the_option_takes_what_sidekiq_takes(configured: object) -> None:
    for good in (True, False, 0, 10):
        cogworker.job(name=f"ok{good}", backtrace=good)(lambda: None)
    for bad in (["a"], {"lines": 3}, -1, "yes"):
        with pytest.raises(TypeError, match="backtrace must be"):
            cogworker.job(name="bad", backtrace=bad)(lambda: None)
