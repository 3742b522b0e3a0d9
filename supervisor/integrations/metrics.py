"""Prometheus metrics for the swarm, served over HTTP by background threads (metrics_server.py).

The supervisor feeds an instance from its event loop: every child message (`observe_status`), the
children it starts and reaps, restarts by reason, jobs it recovered. Each of those calls only
updates counters under a short lock, so the loop never waits on a scrape. Queue sizes and latencies
are read from Redis by a collector at scrape time (metrics_redis.py), and one read serves every
scrape for REDIS_CACHE_S. MetricsHooks, at the end, is what feeds it from the loop's hook points.

Children report job counts as deltas in their status messages (one a second), per (queue, job):

    {"event": "status", "busy": 3, "threads": 10, ..., "quiet": false,
     "jobs": [{"queue": "default", "job": "app.send_email",
               "processed": 12, "failed": 1, "retried": 1, "dead": 0,
               "duration": {"sum_s": 3.52, "buckets": {"0.1": 9, "0.5": 3, "+Inf": 1}}}]}

`processed` finished without error; `failed` raised (or was unreadable); of those, `retried` were
filed in retry and `dead` in dead; `expired` and `cancelled` ended without running to an end of
their own (they have no duration), and `limited` were put back in the schedule set by a full rate
limiter (api/limit_jobs.py; counted per put-back, no duration). Those are counters, kept here;
`duration`, the histogram of every finished job's time, is metrics_durations.py's.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cogworker.store import shards
from supervisor.children.child import Child, ExitOutcome
from supervisor.config import SwarmConfig
from supervisor.integrations.hooks import SwarmHooks
from supervisor.integrations.metrics_durations import JobDurations
from supervisor.integrations.metrics_redis import RedisCollector
from supervisor.integrations.metrics_server import MAX_CONNECTIONS, REQUEST_TIMEOUT_S, MetricsServer

RECOVERY_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
CHILD_STATES = ("booting", "ready", "quiet", "stopping")
RESTART_REASONS = ("crash", "signal", "memory", "stuck", "hung", "straggler", "restart", "exit", "boot_error")
JOB_COUNTS = ("processed", "failed", "retried", "dead", "expired", "cancelled", "limited")
# Label sets are bounded: past COGWORKER_METRICS_MAX_JOB_LABELS job classes, further classes are
# counted as job="(other)", and past this many (queue, job) pairs (many queues), new pairs are too
# (a bug pushing generated job names must not grow the supervisor's memory and every scrape).
MAX_JOB_SERIES = 1000
OTHER_JOB = "(other)"
# The one job label with COGWORKER_METRICS_JOB_LABELS=off: a series per queue, whatever the class.
ALL_JOBS = "(all)"
MAX_LABEL_CHARS = 200
SCRAPE_TIMEOUT_S = 0.5
# Scrapes within this long of a Redis read share it: 20 concurrent scrapes are one read (issue 13, E3).
# Queue sizes and latencies may be this stale, which no scrape interval notices.
REDIS_CACHE_S = 1.0


def _count(value: Any) -> int | None:
    """A non-negative whole number from a message, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _label(value: Any) -> str | None:
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL_CHARS:
        return None
    return value


@dataclass(slots=True)
class _Child:
    state: str = "booting"
    busy: int = 0
    threads: int = 0
    redis_down: bool = False


class _SwarmCollector(Collector):
    """Children by state, threads busy, and job durations: read under the metrics lock."""

    def __init__(self, metrics: SwarmMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        with self._metrics.lock:
            children = list(self._metrics.children.values())
            durations = self._metrics.durations.family()
        states = GaugeMetricFamily("cogworker_children", "Child processes by state.", labels=["state"])
        for state in CHILD_STATES:
            states.add_metric([state], sum(1 for c in children if c.state == state))
        yield states
        yield GaugeMetricFamily(
            "cogworker_busy_threads",
            "Job threads running a job, all children.",
            sum(c.busy for c in children),
        )
        yield GaugeMetricFamily(
            "cogworker_threads", "Job threads, all children.", sum(c.threads for c in children)
        )
        yield GaugeMetricFamily(
            "cogworker_children_redis_down",
            "Children that report Redis unreachable.",
            sum(1 for c in children if c.redis_down),
        )
        yield durations


class SwarmMetrics:
    """The swarm's metrics: its own registry, fed by the supervisor, served on
    COGWORKER_METRICS_HOST:COGWORKER_METRICS_PORT (off when the port is unset)."""

    def __init__(
        self,
        settings: SwarmConfig,
        *,
        scrape_timeout_s: float = SCRAPE_TIMEOUT_S,
        redis_cache_s: float = REDIS_CACHE_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.settings = settings
        # The supervisor's only reader of keys is the scrape: it must count this deployment's queues
        # and sets, not another app's sharing the Redis.
        shards.use_settings(settings)
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.children: dict[tuple[int, int | None], _Child] = {}
        self.durations = JobDurations()
        self._job_series: set[tuple[str, str]] = set()
        self._job_classes: set[str] = set()
        self._job_labels = settings.metrics_job_labels
        self._max_job_labels = settings.metrics_max_job_labels
        self._server: MetricsServer | None = None
        self._jobs = {
            name: Counter(
                f"cogworker_jobs_{name}",
                f"Jobs {text}, by queue and job.",
                ["queue", "job"],
                registry=self.registry,
            )
            for name, text in (
                ("processed", "that finished without error"),
                ("failed", "that raised (or could not be read)"),
                ("retried", "filed in the retry set after failing"),
                ("dead", "filed in the dead set"),
                ("expired", "not run: not started before their expires_in"),
                ("cancelled", "not run, or stopped, by cogworker.cancel"),
                ("limited", "put back in the scheduled set by a full rate limiter (not failed)"),
            )
        }
        self._restarts = Counter(
            "cogworker_child_restarts", "Children replaced, by reason.", ["reason"], registry=self.registry
        )
        for reason in RESTART_REASONS:
            self._restarts.labels(reason=reason)
        self._stuck = Counter(
            "cogworker_jobs_stuck",
            "Jobs stuck past their time limit and its grace, filed as failed by their child (then replaced).",
            registry=self.registry,
        )
        self._recovered = Counter(
            "cogworker_jobs_recovered",
            "Jobs the supervisor put back on their queues after a child died.",
            registry=self.registry,
        )
        self._recovery_seconds = Histogram(
            "cogworker_recovery_seconds",
            "From a child's death being noticed to its in-progress jobs being back on their queues.",
            buckets=RECOVERY_BUCKETS_S,
            registry=self.registry,
        )
        self._bad = Counter(
            "cogworker_metrics_bad_messages",
            "Child status messages (or parts of them) ignored because a field was malformed.",
            registry=self.registry,
        )
        self.registry.register(_SwarmCollector(self))
        self.registry.register(RedisCollector(settings, scrape_timeout_s, redis_cache_s))

    # Serving -----------------------------------------------------------------------------------
    def start(self) -> int | None:
        """Serve /metrics from daemon threads; returns the port bound (None: metrics are off)."""
        if self.settings.metrics_port is None or self._server is not None:
            return self.port
        self._server = MetricsServer(
            self.settings.metrics_host,
            self.settings.metrics_port,
            make_wsgi_app(self.registry),
            max_connections=self.max_connections,
            request_timeout_s=self.request_timeout_s,
        )
        self._server.start()
        return self.port

    @property
    def port(self) -> int | None:
        return self._server.port if self._server is not None else None

    @property
    def connections_accepted(self) -> int:
        """Connections the server has accepted so far (0 when not serving)."""
        return self._server.accepted if self._server is not None else 0

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def render(self) -> bytes:
        """The text a scrape returns."""
        return generate_latest(self.registry)

    # Fed by the supervisor (event loop thread) ----------------------------------------------
    def child_started(self, slot: int, pid: int | None = None) -> None:
        with self.lock:
            self.children[(slot, pid)] = _Child()

    def set_child_state(self, slot: int, state: str, pid: int | None = None) -> None:
        """booting, ready, quiet or stopping; e.g. `stopping` when the supervisor sends TERM."""
        if state not in CHILD_STATES:
            raise ValueError(f"state must be one of {', '.join(CHILD_STATES)}, not {state!r}")
        with self.lock:
            self.children.setdefault((slot, pid), _Child()).state = state

    def child_exited(self, slot: int, pid: int | None = None) -> None:
        with self.lock:
            self.children.pop((slot, pid), None)

    def child_restarted(self, reason: str) -> None:
        """A slot got a new child, for one of RESTART_REASONS (else counted as "other")."""
        self._restarts.labels(reason=reason if reason in RESTART_REASONS else "other").inc()

    def jobs_recovered(self, count: int, seconds: float) -> None:
        """The supervisor requeued a dead child's in-progress list: `count` jobs, `seconds` after it
        noticed the death."""
        self._recovered.inc(max(0, count))
        self._recovery_seconds.observe(max(0.0, seconds))

    def observe_status(self, slot: int, message: Mapping[str, Any], pid: int | None = None) -> None:
        """One message from a child: any event (`booted`, `ready`, `status`, `stopping`, `stopped`);
        a message without `event` is a status. Job counts (`jobs`) are taken from any event that
        carries them (a child's last counts may ride on `stopping` or `stopped`). Malformed fields
        are counted and skipped: nothing a child sends raises here."""
        event = message.get("event", "status")
        with self.lock:
            if event == "stuck":
                self._stuck.inc()
            if event == "stopped":  # about to exit: no longer one of the children by state
                self.children.pop((slot, pid), None)
            else:
                child = self.children.setdefault((slot, pid), _Child())
                if event == "booted":
                    child.state = "booting"
                elif event == "ready" and child.state != "stopping":
                    child.state = "ready"
                elif event == "stopping":
                    child.state = "stopping"
                elif event == "status":
                    self._apply_status(child, message)
            jobs = message.get("jobs")
            if jobs is None:
                return
            if not isinstance(jobs, list):
                self._bad.inc()
                return
            for entry in jobs:
                if not self._apply_job_counts(entry):
                    self._bad.inc()

    def _apply_status(self, child: _Child, message: Mapping[str, Any]) -> None:
        child.busy = _count(message.get("busy")) or 0
        child.threads = _count(message.get("threads")) or 0
        child.redis_down = message.get("redis") == "down"
        if child.state != "stopping":
            if message.get("booting"):
                child.state = "booting"
            else:
                child.state = "quiet" if message.get("quiet") else "ready"

    def _apply_job_counts(self, entry: Any) -> bool:
        """Called with the lock held. False when the entry is malformed (nothing of it is counted)."""
        if not isinstance(entry, Mapping):
            return False
        queue, job = _label(entry.get("queue")), _label(entry.get("job"))
        counts = {name: _count(entry.get(name, 0)) for name in JOB_COUNTS}
        duration = entry.get("duration")
        buckets: dict[int, int] = {}
        sum_s: float | None = 0.0
        if duration is not None:
            if not isinstance(duration, Mapping):
                return False
            raw, sum_s = duration.get("buckets"), _seconds(duration.get("sum_s"))
            if not isinstance(raw, Mapping) or sum_s is None:
                return False
            for key, n in raw.items():
                index, count = self.durations.slot_of(str(key)), _count(n)
                if index is None or count is None:
                    return False
                buckets[index] = buckets.get(index, 0) + count
        if queue is None or job is None or sum_s is None or any(v is None for v in counts.values()):
            return False
        labels = (queue, self._job_label(job))
        if labels not in self._job_series:
            if len(self._job_series) >= MAX_JOB_SERIES:
                labels = (queue, OTHER_JOB)
            self._job_series.add(labels)
        for name, n in counts.items():
            # Every counter of a pair exists from its first report (0 dead, not no series), so
            # rate() and ratios work before the first failure.
            self._jobs[name].labels(queue=labels[0], job=labels[1]).inc(n or 0)
        if buckets:
            self.durations.add(labels, sum_s, buckets)
        return True

    def _job_label(self, job: str) -> str:
        """The `job` label for a class: itself while fewer than the bound have been seen."""
        if not self._job_labels:
            return ALL_JOBS
        if job not in self._job_classes:
            if len(self._job_classes) >= self._max_job_labels:
                return OTHER_JOB
            self._job_classes.add(job)
        return job


class MetricsHooks(SwarmHooks):
    """Feeds SwarmMetrics from children's lines, exits, replacements and recoveries."""

    def __init__(self, metrics: SwarmMetrics) -> None:
        self.metrics = metrics

    def child_started(self, child: Child) -> None:
        self.metrics.child_started(child.slot, child.pid)

    def child_event(self, child: Child, event: str, fields: Mapping[str, Any]) -> None:
        self.metrics.observe_status(child.slot, {"event": event, **fields}, pid=child.pid)

    def child_exited(self, child: Child, outcome: ExitOutcome) -> None:
        self.metrics.child_exited(child.slot, child.pid)

    def child_replaced(self, slot: int, reason: str) -> None:
        self.metrics.child_restarted(reason)

    def jobs_requeued(self, identity: str, moved: int, seconds: float) -> None:
        self.metrics.jobs_recovered(moved, seconds)
