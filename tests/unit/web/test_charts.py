"""web/charts.py: "nice" value ticks, UTC time and day ticks, failures on their own scale, gaps
left as gaps, deploy markers placed in time, and a table with the chart's own numbers."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from cogworker.web import charts


@pytest.mark.parametrize(
    ("top", "count", "whole", "expected"),
    [
        (0, 4, True, [0, 1]),
        (1, 4, True, [0, 1]),
        (7, 4, True, [0, 2, 4, 6, 8]),
        (1234, 4, True, [0, 500, 1000, 1500]),
        (0.3, 4, False, [0, 0.1, 0.2, 0.3]),
        (5, 2, True, [0, 5]),
        (48_000, 4, True, [0, 20_000, 40_000, 60_000]),
    ],
)
def test_nice_ticks(top: float, count: int, whole: bool, expected: list[float]) -> None:
    assert charts.nice_ticks(top, count, whole) == expected


@pytest.mark.parametrize("top", [0.013, 0.7, 3, 9.99, 10, 11, 99, 101, 4321, 7.5e6, 123_456_789])
def test_every_step_is_one_two_or_five_times_a_power_of_ten_and_covers_the_top(top: float) -> None:
    ticks = charts.nice_ticks(top, 4, whole=False)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1, 2, 5)
    assert ticks[0] == 0 and ticks[-1] >= top and ticks[-2] < top
    assert 2 <= len(ticks) <= 6


def test_count_labels() -> None:
    assert [charts.count_label(v) for v in (0, 950, 1200, 15_000, 2_500_000, 0.5)] == [
        "0",
        "950",
        "1,200",
        "15k",
        "2.5M",
        "0.5",
    ]


def test_minute_ticks_fall_on_round_utc_times_and_name_the_zone() -> None:
    first = int(dt.datetime(2026, 12, 3, 23, 3, tzinfo=dt.UTC).timestamp() // 60)
    hour = charts.minute_axis(first, 60)
    assert [label for _, label in hour.ticks] == ["23:10", "23:20", "23:30", "23:40", "23:50", "4 Dec"]
    assert hour.caption == "time (UTC)" and hour.slot_labels[0] == "2026-12-03 23:03"
    eight = charts.minute_axis(first, 480)
    assert len(eight.ticks) == 8 and all(
        label.endswith(":00") or label == "4 Dec" for _, label in eight.ticks
    )


def test_day_ticks_end_on_the_last_day() -> None:
    days = [(dt.date(2026, 11, 4) + dt.timedelta(days=i)).isoformat() for i in range(30)]
    axis = charts.day_axis(days)
    assert axis.ticks[-1] == (29, "3 Dec") and len(axis.ticks) <= 8
    assert axis.caption == "day (UTC)"


def test_a_one_percent_failure_rate_fills_its_own_panel() -> None:
    axis = charts.minute_axis(29_000_000, 60)
    processed = [500.0] * 60
    failed = [5.0 if i % 2 else 0.0 for i in range(60)]
    chart = charts.chart(
        "c",
        "Runs",
        axis,
        [
            charts.PanelSpec("processed", [charts.Layer("line-processed", "processed", processed)]),
            charts.PanelSpec(
                "failed", [charts.Layer("bar-failed", "failed", failed, bars=True)], height=60, ticks=2
            ),
        ],
    )
    small = chart.panels[1]
    assert len(small.rects) == 30
    assert all(rect.height == pytest.approx(60) for rect in small.rects)  # 5 of 500, the panel's top
    assert [t.label for t in small.y_ticks] == ["0", "5"]
    assert small.x_ticks and not chart.panels[0].x_ticks  # the time axis under the last panel only
    assert chart.table.rows[1] == [axis.slot_labels[1], "500", "5"]
    assert chart.table.headings == ["time (UTC)", "processed", "failed"]


def test_a_gap_breaks_the_line_instead_of_joining_across_it() -> None:
    axis = charts.minute_axis(29_000_000, 6)
    chart = charts.chart(
        "c",
        "t",
        axis,
        [charts.PanelSpec("ms", [charts.Layer("line-mean", "mean", [1, 2, None, None, 3, 4])])],
    )
    d = chart.panels[0].paths[0].d
    assert d.count("M") == 2 and d.count("L") == 2
    assert chart.table.rows[2][1] == "\u2013"


def test_deploy_markers_sit_at_their_time_and_outside_ones_are_dropped() -> None:
    axis = charts.minute_axis(29_000_000, 60)
    chart = charts.chart(
        "c",
        "t",
        axis,
        [charts.PanelSpec("n", [charts.Layer("line-processed", "n", [1.0] * 60)])],
        markers=[(30.5, "v1.2", "v1.2 at 12:30:30 UTC"), (-3, "old", "old"), (75, "future", "future")],
    )
    assert [m.label for m in chart.markers] == ["v1.2"]
    assert chart.markers[0].x == pytest.approx(charts.LEFT + charts.PLOT_WIDTH * 30.5 / 60, abs=0.1)
