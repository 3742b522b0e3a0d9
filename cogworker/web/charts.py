"""Charts as SVG geometry, drawn by `templates/charts.html` (no script, no third-party files).

A chart is a stack of panels sharing one time axis, each with its own value scale: failures get a
small panel of their own, so one failure a minute next to five hundred successes is a full bar
rather than a pixel. Value ticks are "nice" (1, 2 or 5 x 10^n); time ticks fall on round UTC minutes,
hours or days and the axis says "UTC". A deploy marker is a labelled vertical line through every
panel. Every chart carries its numbers as a table too (the template puts it in a <details>), for a
screen reader and for anyone who wants the figures.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

WIDTH = 720
LEFT = 72  # room for the value labels ("60 ms" in a phone's larger text)
RIGHT = 20  # room for half of the last time label
PLOT_WIDTH = WIDTH - LEFT - RIGHT
AXIS_H = 40  # room under the last panel for the time labels and the axis's caption
BOTTOM_PAD = 6  # under the other panels: room for the "0" label's descent
TIME_STEPS_MIN = (1, 2, 5, 10, 15, 30, 60, 120, 180, 240, 360, 720, 1440)
DAY_STEPS = (1, 2, 7, 14, 28)

Format = Callable[[float], str]


def nice_step(span: float, count: int) -> float:
    """The 1/2/5 x 10^n step that divides `span` into at most about `count` parts."""
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 5, 10):
        if multiple * magnitude >= raw * (1 - 1e-9):
            return float(multiple * magnitude)
    return float(10 * magnitude)  # not reached: 10 x magnitude is always >= raw


def nice_ticks(top: float, count: int = 4, whole: bool = False) -> list[float]:
    """Ticks from 0 to the first nice value at or above `top` (counts: `whole` keeps steps >= 1)."""
    top = top if top > 0 and math.isfinite(top) else 1.0
    step = nice_step(top, count)
    if whole:
        step = max(step, 1.0)
    steps = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(steps + 1)]


def count_label(value: float) -> str:
    """A value label: 950, 1,200, 15k, 2.5M, 0.5."""
    if value >= 1e6:
        return f"{value / 1e6:.3g}M"
    if value >= 1e4:
        return f"{value / 1e3:.3g}k"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.3g}"


def percent_label(value: float) -> str:
    return f"{value * 100:.3g} %"


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # x or y, in the panel's SVG units
    label: str


@dataclass(frozen=True, slots=True)
class Path:
    css: str
    label: str
    d: str


@dataclass(frozen=True, slots=True)
class Rect:
    css: str
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True, slots=True)
class Marker:
    x: float
    label: str
    title: str


@dataclass(frozen=True, slots=True)
class Panel:
    label: str  # what its scale measures, e.g. "failed per minute"
    height: float  # the SVG's height (the plot, plus the time axis under the last panel)
    plot_top: float
    plot_bottom: float
    y_ticks: list[Tick]
    paths: list[Path] = field(default_factory=list)
    rects: list[Rect] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    x_caption: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    caption: str
    headings: list[str]
    rows: list[list[str]]


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    panels: list[Panel]
    legend: list[tuple[str, str]]  # (css class, label)
    markers: list[Marker]
    table: Table
    width: int = WIDTH
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT


@dataclass(frozen=True, slots=True)
class Layer:
    """One series in a panel: drawn as a line (None values break it) or as bars."""

    css: str
    label: str
    values: Sequence[float | None]
    bars: bool = False


@dataclass(frozen=True, slots=True)
class PanelSpec:
    label: str
    layers: list[Layer]
    height: float = 150
    fmt: Format = count_label
    whole: bool = True  # counts: no tick between 0 and 1
    ticks: int = 4


@dataclass(frozen=True, slots=True)
class Axis:
    """The shared horizontal axis: one slot per value, and where its ticks go."""

    slots: int
    ticks: list[tuple[int, str]]  # (slot index, label)
    caption: str
    slot_labels: list[str]  # each slot's label, for the tables and the bars' titles
    per: str  # what one slot is: "minute", "day"


def minute_axis(first_minute: int, count: int) -> Axis:
    """Per-minute slots starting at `first_minute` (epoch / 60), ticked at round UTC times."""
    step = next((s for s in TIME_STEPS_MIN if count / s <= 8), TIME_STEPS_MIN[-1])
    ticks = []
    for index in range(count):
        minute = first_minute + index
        if minute % step == 0:
            moment = dt.datetime.fromtimestamp(minute * 60, dt.UTC)
            text = (
                f"{moment.day} {moment:%b}" if moment.hour == 0 and moment.minute == 0 else f"{moment:%H:%M}"
            )
            ticks.append((index, text))
    labels = [
        f"{dt.datetime.fromtimestamp((first_minute + i) * 60, dt.UTC):%Y-%m-%d %H:%M}" for i in range(count)
    ]
    return Axis(count, ticks, "time (UTC)", labels, "minute")


def day_axis(days: Sequence[str]) -> Axis:
    """Per-day slots (ISO dates, UTC), ticked every 1, 2, 7, 14 or 28 days from the last one."""
    step = next((s for s in DAY_STEPS if len(days) / s <= 8), DAY_STEPS[-1])
    ticks = []
    for index, day in enumerate(days):
        if (len(days) - 1 - index) % step == 0:
            moment = dt.date.fromisoformat(day)
            ticks.append((index, f"{moment.day} {moment:%b}"))
    return Axis(len(days), ticks, "day (UTC)", list(days), "day")


def _slot_x(axis: Axis, index: float) -> float:
    return LEFT + PLOT_WIDTH * index / max(axis.slots, 1)


def _panel(spec: PanelSpec, axis: Axis, last: bool) -> Panel:
    top_pad = 14.0  # room for a marker's label and the top tick's text
    plot_bottom = top_pad + spec.height
    finite = [v for layer in spec.layers for v in layer.values if v is not None and math.isfinite(v)]
    values = nice_ticks(max(finite, default=0.0), spec.ticks, spec.whole)
    top = values[-1]

    def y(value: float) -> float:
        return plot_bottom - spec.height * value / top

    slot = PLOT_WIDTH / max(axis.slots, 1)
    paths, rects = [], []
    for layer in spec.layers:
        if layer.bars:
            for index, value in enumerate(layer.values):
                if value:
                    rects.append(
                        Rect(
                            layer.css,
                            round(_slot_x(axis, index) + slot * 0.1, 2),
                            round(y(value), 2),
                            round(max(slot * 0.8, 0.6), 2),
                            round(plot_bottom - y(value), 2),
                            f"{axis.slot_labels[index]}: {spec.fmt(value)} {layer.label}",
                        )
                    )
            continue
        parts, pen_down = [], False
        for index, value in enumerate(layer.values):
            if value is None:
                pen_down = False
                continue
            parts.append(f"{'L' if pen_down else 'M'}{_slot_x(axis, index + 0.5):.1f} {y(value):.1f}")
            pen_down = True
        paths.append(Path(layer.css, layer.label, "".join(parts)))
    x_ticks = [Tick(round(_slot_x(axis, i + 0.5), 1), text) for i, text in axis.ticks] if last else []
    return Panel(
        label=spec.label,
        height=plot_bottom + (AXIS_H if last else BOTTOM_PAD),
        plot_top=top_pad,
        plot_bottom=plot_bottom,
        y_ticks=[Tick(round(y(v), 1), spec.fmt(v)) for v in values],
        paths=paths,
        rects=rects,
        x_ticks=x_ticks,
        x_caption=axis.caption if last else "",
    )


def chart(
    chart_id: str,
    title: str,
    axis: Axis,
    specs: list[PanelSpec],
    markers: Sequence[tuple[float, str, str]] = (),
) -> Chart:
    """A chart of `specs` panels over `axis`. `markers` are (slot position, label, title): a
    position between slots is allowed (a deploy at 12:03:30 sits halfway through 12:03)."""
    panels = [_panel(spec, axis, index == len(specs) - 1) for index, spec in enumerate(specs)]
    layers = [layer for spec in specs for layer in spec.layers]
    formats = [spec.fmt for spec in specs for _ in spec.layers]
    rows = []
    for index, slot_label in enumerate(axis.slot_labels):
        cells = [slot_label]
        for layer, fmt in zip(layers, formats, strict=True):
            value = layer.values[index]
            cells.append("\u2013" if value is None else fmt(value))
        rows.append(cells)
    table = Table(
        f"{title}, one row per {axis.per} (UTC)", [axis.caption] + [la.label for la in layers], rows
    )
    legend = [(layer.css, layer.label) for layer in layers]
    found_markers = [
        Marker(round(_slot_x(axis, position), 1), label, marker_title)
        for position, label, marker_title in markers
        if 0 <= position <= axis.slots
    ]
    return Chart(chart_id, title, panels, legend, found_markers, table)
