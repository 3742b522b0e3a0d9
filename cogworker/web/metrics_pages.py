"""`/metrics` (every job class over 1, 4 or 8 hours, sortable; the queues' latency; deploy markers)
and `/metrics/job/<class>` (one class's throughput, failures and execution time per minute, and its
histogram). The figures come from `ops/metrics.py`; the charts from `web/charts.py`."""

from __future__ import annotations

import datetime as dt
import weakref
from dataclasses import dataclass

import redis
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import metrics
from cogworker.ops import metrics_figures as figures
from cogworker.ops.metrics_cache import MinuteCache
from cogworker.web import charts
from cogworker.web.render import page, path_to
from cogworker.web.state import state_of

# Finished minutes already read, per Redis client (one per app: a host may mount two UIs).
_CACHES: weakref.WeakKeyDictionary[redis.Redis, MinuteCache] = weakref.WeakKeyDictionary()
# The latency chart draws the queues that waited longest; the table under it lists every queue.
CHART_QUEUES = 6
COLUMNS = (
    ("name", "Job class"),
    ("throughput", "Per minute"),
    ("processed", "Processed"),
    ("failed", "Failed"),
    ("failure_rate", "Failure rate"),
    ("p50", "p50"),
    ("p95", "p95"),
    ("p99", "p99"),
    ("total_ms", "Total time"),
)


@dataclass(frozen=True, slots=True)
class Heading:
    key: str
    label: str
    href: str
    sorted: str  # "ascending", "descending" or "" (for aria-sort)


def _cache(client: redis.Redis) -> MinuteCache:
    found = _CACHES.get(client)
    if found is None:
        found = _CACHES[client] = MinuteCache()
    return found


def _sort(request: Request) -> tuple[str, bool]:
    key = request.query_params.get("sort", "processed")
    key = key if key in figures.SORT_KEYS else "processed"
    descending = request.query_params.get("dir", "asc" if key == "name" else "desc") != "asc"
    return key, descending


def _headings(request: Request, hours: int, key: str, descending: bool) -> list[Heading]:
    found = []
    for column, label in COLUMNS:
        if column == key:
            next_dir = "asc" if descending else "desc"
            state = "descending" if descending else "ascending"
        else:
            next_dir, state = ("asc" if column == "name" else "desc"), ""
        href = path_to(request, "/metrics", range=hours, sort=column, dir=next_dir)
        found.append(Heading(column, label, href, state))
    return found


def _markers(marks: list[metrics.Mark], win: metrics.Window) -> list[tuple[float, str, str]]:
    return [
        (
            (mark.at - win.start_s) / 60,
            mark.label,
            f"{mark.label} at {dt.datetime.fromtimestamp(mark.at, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
            + (f" by {mark.by}" if mark.by else ""),
        )
        for mark in marks
    ]


def utc(epoch: float) -> str:
    """A time in UTC, zone printed: the charts' axes are UTC, so the page's text is too (one zone
    per screen), and it is plain text, which the page script leaves alone."""
    return f"{dt.datetime.fromtimestamp(epoch, dt.UTC):%Y-%m-%d %H:%M} UTC"


def _ms(value: float) -> str:
    return figures.format_ms(value) if value else "0"


def _queue_chart(overview: metrics.Overview) -> charts.Chart | None:
    if not overview.queues:
        return None
    slowest = sorted(overview.queues.items(), key=lambda item: -item[1].max_latency_ms)[:CHART_QUEUES]
    layers = [
        charts.Layer(f"series-{index}", name, [float(v) for v in series.latency_ms])
        for index, (name, series) in enumerate(slowest)
    ]
    spec = charts.PanelSpec("latency of the oldest waiting job", layers, height=110, fmt=_ms, whole=False)
    win = overview.window
    axis = charts.minute_axis(win.first, len(win.minutes))
    return charts.chart("queue-latency", "Queue latency", axis, [spec], _markers(overview.marks, win))


def metrics_index(request: Request) -> Response:
    hours = metrics.clamp_range(request.query_params.get("range", metrics.DEFAULT_RANGE_H))
    client = state_of(request).client
    overview = metrics.overview(client, hours, cache=_cache(client))
    key, descending = _sort(request)
    return page(
        request,
        "metrics.html",
        "Metrics",
        hours=hours,
        ranges=metrics.RANGES_H,
        rows=figures.sort_rows(overview.classes, key, descending),
        headings=_headings(request, hours, key, descending),
        sort=key,
        descending=descending,
        overview=overview,
        queue_chart=_queue_chart(overview),
        fmt_p=figures.format_percentile,
        fmt_ms=figures.format_ms,
        utc=utc,
    )


def _histogram_chart(row: figures.ClassRow) -> charts.Chart:
    used = [i for i, count in enumerate(row.histogram) if count]
    first = max(min(used, default=0) - 1, 0)
    last = min(max(used, default=first) + 1, figures.BUCKETS - 1)
    indexes = list(range(first, last + 1))
    labels = [figures.bucket_label(i) for i in indexes]
    step = max(1, (len(indexes) + 6) // 7)
    axis = charts.Axis(
        len(indexes),
        [(i, labels[i]) for i in range(0, len(indexes), step)],
        "execution time",
        labels,
        "bucket",
    )
    layer = charts.Layer("bar-processed", "runs", [float(row.histogram[i]) for i in indexes], bars=True)
    return charts.chart("histogram", "Execution time histogram", axis, [charts.PanelSpec("runs", [layer])])


def metrics_job(request: Request) -> Response:
    job_class = request.path_params["job_class"]
    hours = metrics.clamp_range(request.query_params.get("range", metrics.DEFAULT_RANGE_H))
    client = state_of(request).client
    detail = metrics.class_detail(client, job_class, hours, cache=_cache(client))
    win = detail.window
    axis = charts.minute_axis(win.first, len(win.minutes))
    markers = _markers(detail.marks, win)
    throughput = charts.chart(
        "throughput",
        "Runs per minute",
        axis,
        [
            charts.PanelSpec(
                "processed per minute", [charts.Layer("line-processed", "processed", detail.processed)]
            ),
            charts.PanelSpec(
                "failed per minute (own scale)",
                [charts.Layer("bar-failed", "failed", detail.failed, bars=True)],
                height=60,
                ticks=2,
            ),
        ],
        markers,
    )
    p95 = [None if p is None else p.ms for p in detail.p95_ms]
    timing = charts.chart(
        "timing",
        "Execution time per minute",
        axis,
        [
            charts.PanelSpec(
                "execution time",
                [
                    charts.Layer("line-mean", "mean", detail.mean_ms),
                    charts.Layer("line-p95", "p95 (estimated)", p95),
                ],
                fmt=_ms,
                whole=False,
            )
        ],
        markers,
    )
    return page(
        request,
        "metrics_job.html",
        job_class,
        hours=hours,
        ranges=metrics.RANGES_H,
        detail=detail,
        row=detail.row,
        charts=[throughput, timing, _histogram_chart(detail.row)] if detail.row.processed else [],
        fmt_p=figures.format_percentile,
        fmt_ms=figures.format_ms,
        utc=utc,
    )


ROUTES: list[BaseRoute] = [
    Route("/metrics", metrics_index, name="metrics"),
    Route("/metrics/job/{job_class:path}", metrics_job, name="metrics_job"),
]
