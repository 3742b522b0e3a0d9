"""`/`: the counters, the live and history charts, Redis's vitals and the queue latency headline.

The history chart is drawn here (web/charts.py: axes, day ticks, failures on their own scale, the
numbers as a table); the live chart is drawn in the browser by static/charts.js from the counters
each Live refresh brings, on the same plan.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.ops import stats
from cogworker.store import shards
from cogworker.web import charts
from cogworker.web.render import page
from cogworker.web.state import state_of


def history_chart(history: list[stats.Day]) -> charts.Chart:
    """Processed per day, and failed per day on a scale of its own (a 1 % failure rate is a tenth
    of the small panel's height at least, not a sliver of the processed bars)."""
    axis = charts.day_axis([day.day for day in history])
    return charts.chart(
        "history-chart",
        "Jobs per day",
        axis,
        [
            charts.PanelSpec(
                "processed per day",
                [charts.Layer("bar-processed", "processed", [d.processed for d in history], bars=True)],
            ),
            charts.PanelSpec(
                "failed per day (own scale)",
                [charts.Layer("bar-failed", "failed", [d.failed for d in history], bars=True)],
                height=60,
                ticks=2,
            ),
        ],
    )


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
        history_chart=history_chart(history),
        days=days,
        day_choices=(7, 30, 90, 180),
        vitals=stats.redis_vitals(client),
        # The sharded layout's sets are per partition: summed (one fan-out).
        sets=stats.job_set_sizes(client)
        if shards.is_sharded()
        else {name: set_ops.size(client, name) for name in set_ops.SETS},
        queue_count=len(queues),
        enqueued=sum(q.size for q in queues),
        slowest=slowest,
        unserved=process_ops.unserved_count(client, queues),
    )
