"""The job duration histogram of the swarm's metrics (metrics.py), per (queue, job), added from the
buckets children send.

A child reports each (queue, job)'s finished jobs with their durations, as a delta:

    "duration": {"sum_s": 3.52, "buckets": {"0.1": 9, "0.5": 3, "+Inf": 1}}

`duration` covers every finished job: `buckets` counts jobs per bucket, not cumulatively, keyed by
the bucket's upper bound in seconds (DURATION_BUCKETS_S; the first bound the duration is <= to,
"+Inf" past the last), and `sum_s` is their total time. Buckets keep the message small whatever the
throughput and still give quantiles; a bound the supervisor does not know is counted in its next
larger bucket, so children and supervisor may disagree on bounds without the histogram ever
claiming a job was faster than it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from prometheus_client.core import HistogramMetricFamily

from cogworker.worker.settling.job_stats import DURATION_BUCKETS_S, format_bound


class JobDurations:
    """Job durations per (queue, job), added in buckets: prometheus_client's Histogram only takes
    one observation at a time, and a child sends counts. Read and written under the metrics lock."""

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS_S) -> None:
        self.bounds = (*bounds, math.inf)
        self.series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def slot_of(self, key: str) -> int | None:
        """The index of the bucket a child's bound `key` is counted in; None when it is no bound."""
        try:
            bound = math.inf if key == "+Inf" else float(key)
        except ValueError:
            return None
        if math.isnan(bound):
            return None
        for index, known in enumerate(self.bounds):
            if bound <= known:
                return index
        return len(self.bounds) - 1

    def add(self, labels: tuple[str, str], sum_s: float, buckets: Mapping[int, int]) -> None:
        counts, total = self.series.setdefault(labels, ([0] * len(self.bounds), [0.0]))
        for index, n in buckets.items():
            counts[index] += n
        total[0] += sum_s

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "cogworker_job_duration_seconds",
            "Time jobs took to run, by queue and job (every finished job: succeeded or failed).",
            labels=["queue", "job"],
        )
        for (queue, job), (counts, total) in sorted(self.series.items()):
            cumulative, running = [], 0
            for bound, n in zip(self.bounds, counts, strict=True):
                running += n
                cumulative.append((format_bound(bound), float(running)))
            family.add_metric([queue, job], cumulative, total[0])
        return family
