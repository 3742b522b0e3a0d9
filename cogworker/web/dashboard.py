"""`/`: the counters, the live and history charts, Redis's vitals and the queue latency headline."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.ops import stats
from cogworker.web.render import page
from cogworker.web.state import state_of

CHART_HEIGHT = 120
CHART_WIDTH = 720


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    processed_y: float
    processed_h: float
    failed_y: float
    failed_h: float
    day: stats.Day


def bars(history: list[stats.Day]) -> list[Bar]:
    """The history chart as SVG geometry (drawn server-side: it needs no script)."""
    top = max([d.processed + d.failed for d in history] + [1])
    width = CHART_WIDTH / max(len(history), 1)
    found = []
    for index, day in enumerate(history):
        processed_h = CHART_HEIGHT * day.processed / top
        failed_h = CHART_HEIGHT * day.failed / top
        found.append(
            Bar(
                x=index * width,
                width=max(width - 1, 1),
                processed_y=CHART_HEIGHT - processed_h - failed_h,
                processed_h=processed_h,
                failed_y=CHART_HEIGHT - failed_h,
                failed_h=failed_h,
                day=day,
            )
        )
    return found


def dashboard(request: Request) -> Response:
    client = state_of(request).client
    days = stats.clamp_days(request.query_params.get("days", 30))
    history = stats.history(client, days)
    queues = queue_ops.queue_infos(client)
    latencies = [q for q in queues if q.latency_s is not None]
    slowest = max(latencies, key=lambda q: q.latency_s or 0.0) if latencies else None
    return page(
        request,
        "dashboard.html",
        "Dashboard",
        totals=stats.totals(client),
        history=history,
        bars=bars(history),
        chart_width=CHART_WIDTH,
        chart_height=CHART_HEIGHT,
        days=days,
        day_choices=(7, 30, 90, 180),
        vitals=stats.redis_vitals(client),
        sets={name: set_ops.size(client, name) for name in set_ops.SETS},
        queue_count=len(queues),
        enqueued=sum(q.size for q in queues),
        slowest=slowest,
        unserved=process_ops.unserved_count(client, queues),
    )
