"""`/jobs/<jid>` (TestClient, real Redis) shows the backtrace filed with a job waiting in retry or
dead, whole and root cause first, behind a summary; a job scheduled (no failure) shows none."""

from __future__ import annotations

import html
import re

import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker.api import backtrace
from cogworker.api.retry import on_failure
from cogworker.store import keys
from tests.support.set_entries import job


def failed_with_a_cause() -> dict[str, object]:
    try:
        try:
            {}["total"]
        except KeyError as exc:
            raise RuntimeError("invoice unreadable") from exc
    except RuntimeError as error:
        return on_failure(job("chained", retry=5), error, now=1000.0).payload


def test_a_retrying_jobs_page_shows_its_backtrace_root_cause_first(
    client: TestClient, r: redis.Redis
) -> None:
    r.zadd(keys.RETRY, {codec.dumps(failed_with_a_cause()): 2000.0})
    r.zadd(keys.SCHEDULE, {codec.dumps(job("later")): 3000.0})
    page = client.get("/jobs/chained").text
    shown = re.search(
        r'<details class="job-backtrace"><summary>([^<]*)</summary><pre>(.*?)</pre>', page, re.DOTALL
    )
    assert shown is not None
    lines = html.unescape(shown[2]).split("\n")
    assert shown[1] == f"Backtrace ({len(lines)} lines, root cause first)"
    assert lines.index("KeyError: 'total'") < lines.index(backtrace.CAUSE)
    assert lines[-1] == "RuntimeError: invoice unreadable"
    assert "job-backtrace" not in client.get("/jobs/later").text
