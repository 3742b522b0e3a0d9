"""The per-job counts workers send for Prometheus."""

from __future__ import annotations

from cogworker.worker.settling.job_stats import MAX_ENTRIES_PER_MESSAGE, JobCounts, bucket_key


def test_bucket_keys() -> None:
    assert bucket_key(0.0) == "0.005"
    assert bucket_key(0.005) == "0.005"
    assert bucket_key(0.3) == "0.5"
    assert bucket_key(99999) == "+Inf"


def test_counts_are_deltas_per_queue_and_job() -> None:
    counts = JobCounts()
    counts.add("q", "a", 0.001)
    counts.add("q", "a", 0.2)
    counts.add("q", "a", 2.0, failed=True)
    counts.add("q", "a", 0.01, failed=True, dead=True)
    counts.add("r", "b", 0.01)
    taken = {(e["queue"], e["job"]): e for e in counts.take()}
    a = taken[("q", "a")]
    assert (a["processed"], a["failed"], a["retried"], a["dead"]) == (2, 2, 1, 1)
    assert a["duration"]["buckets"] == {"0.005": 1, "0.25": 1, "2.5": 1, "0.01": 1}
    assert abs(a["duration"]["sum_s"] - 2.211) < 1e-9
    assert taken[("r", "b")]["processed"] == 1
    assert counts.take() == []


def test_a_message_carries_a_bounded_number_of_entries() -> None:
    counts = JobCounts()
    for i in range(MAX_ENTRIES_PER_MESSAGE + 5):
        counts.add("q", f"job{i}", 0.01)
    assert len(counts.take()) == MAX_ENTRIES_PER_MESSAGE
    assert len(counts.take()) == 5


def test_jobs_that_end_unrun_are_counted_by_outcome_with_no_duration() -> None:
    counts = JobCounts()
    counts.ended_unrun("q", "a", "expired")
    counts.ended_unrun("q", "a", "cancelled")
    counts.add("q", "a", 0.001)
    (entry,) = counts.take()
    assert (entry["processed"], entry["failed"], entry["expired"], entry["cancelled"]) == (1, 0, 1, 1)
    assert entry["duration"]["buckets"] == {"0.005": 1}  # only the job that ran took time
