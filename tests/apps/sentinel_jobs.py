"""Jobs for the Sentinel failover tests (tests/e2e/sentinel/). A run is recorded outside Redis (a
failover may lose what Redis holds): one line per run, `<time> <jid>`, appended to the file the job
names with O_APPEND, one write() each, so lines from both children never interleave."""

from __future__ import annotations

import time

from line_sink import append_line

from cogworker import current_job, job


def _line(sink: str, text: str) -> None:
    append_line(sink, f"{time.time():.4f} {text}")


@job
def mark(sink: str, pause_ms: int = 0) -> None:
    if pause_ms:
        # Gives the job a cost, so the swarm (not the producer) sets the pace of the run.
        time.sleep(pause_ms / 1000)
    _line(sink, current_job().jid)


@job
def batch_done(bid: str, sink: str) -> None:
    """A batch's callback (tests/e2e/sentinel/test_sentinel_batch.py): one line, `<time> callback <bid>`."""
    _line(sink, f"callback {bid}")
