"""A real `cogworker run` worker fails a job whose error has a cause (`raise X from exc`): the retry
entry's backtrace (api/backtrace.py) names the root cause, the sentence that joins the two, and the
job's and the standard library's frames, with no cogworker frame and no caret line."""

from __future__ import annotations

import json
import os
import re

import chained_failure_jobs
import redis

import cogworker
from cogworker.api.backtrace import CAUSE, lines_of
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool


def test_the_retry_entry_keeps_the_root_cause_without_cogworker_frames(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = chained_failure_jobs.import_invoice.perform_async("{not json")
    workers.start(COGWORKER_REQUIRE="chained_failure_jobs")
    wait_until(lambda: r.zcard("cogworker:retry") == 1, timeout=20, message="the job in retry")
    entry = json.loads(r.zrange("cogworker:retry", 0, -1)[0])
    assert entry["jid"] == jid and entry["error_class"] == "RuntimeError"
    lines = lines_of(entry)
    assert lines is not None
    text = "\n".join(lines)
    # Root cause first, then Python's sentence, then the error the job raised.
    root = next(i for i, line in enumerate(lines) if line.startswith("json.decoder.JSONDecodeError:"))
    assert lines.index(CAUSE) > root
    assert lines[-1] == "RuntimeError: invoice '{not json' could not be imported"
    assert "in read_total\n    document: dict[str, Any] = json.loads(text)" in text
    assert re.search(r'File ".*/json/decoder\.py", line \d+, in decode', text)  # a library's frame
    assert "in import_invoice" in text and "in load_invoice" in text
    files = re.findall(r'File "([^"]+)"', text)
    package = os.path.dirname(os.path.realpath(cogworker.__file__)) + os.sep
    assert files and not [f for f in files if os.path.realpath(f).startswith(package)]
    assert not [line for line in lines if re.fullmatch(r"\s*[\^~]+\s*", line)]
    assert "error_backtrace" in entry and "backtrace" not in entry
