"""One curve of `make bench --only <curve>`: how a figure grows with the size of the work, per system.

A curve module (curves/<name>.py) measures points and returns Curve records; bench.py prints each as
tables (one per metric), keeps its raw points in the run's JSON, and draws it (plot.py) beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

X = float | int | str  # a size on the x axis, or a category ("weighted", "strict")


@dataclass(frozen=True)
class Metric:
    key: str  # the figure's key in Point.figures
    label: str  # the axis and table label, e.g. "worker CPU per job"
    unit: str  # "jobs/s", "µs", "B", "ms", "%"
    better: str = ""  # "↑" higher is better, "↓" lower is better
    log: bool = False  # a log-scale y axis


@dataclass(frozen=True)
class Target:
    """A target the issue named, judged on this run's figures."""

    text: str  # "per-job cost flat within 10 % from 10k to 1M"
    met: bool | None  # None: not judged (a point is missing)
    detail: str  # the figures that judged it


@dataclass(frozen=True)
class Point:
    series: str  # "cogworker", "Sidekiq + YJIT", "Dramatiq", "cogworker strict"
    x: X
    figures: dict[str, float | None]


@dataclass
class Curve:
    name: str  # file stem: "backlog", "backlog-bytes"
    title: str
    x_label: str
    metrics: list[Metric]
    x_log: bool = False
    points: list[Point] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def add(self, series: str, x: X, **figures: float | None) -> None:
        self.points.append(Point(series, x, dict(figures)))

    def series_names(self) -> list[str]:
        return list(dict.fromkeys(p.series for p in self.points))

    def xs(self) -> list[X]:
        return list(dict.fromkeys(p.x for p in self.points))

    def value(self, series: str, x: X, key: str) -> float | None:
        """The figure of (series, x); a repeated point (several rounds) gives its median."""
        found = sorted(
            v
            for p in self.points
            if p.series == series and p.x == x and (v := p.figures.get(key)) is not None
        )
        if not found:
            return None
        middle = len(found) // 2
        return found[middle] if len(found) % 2 else (found[middle - 1] + found[middle]) / 2

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def text_tables(curve: Curve) -> str:
    """One table per metric: a row per x, a column per series (medians of repeated points)."""
    names = curve.series_names()
    blocks = [f"{curve.title}"]
    for metric in curve.metrics:
        head = [f"{metric.label} ({metric.unit}) {metric.better}".strip(), *names]
        rows = [[str(x), *(_fmt(curve.value(n, x, metric.key)) for n in names)] for x in curve.xs()]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = [
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in [head, *rows]
        ]
        blocks.append("\n".join(lines))
    for target in curve.targets:
        verdict = {True: "met", False: "MISSED", None: "not judged"}[target.met]
        blocks.append(f"  target {verdict}: {target.text} ({target.detail})")
    blocks.extend(f"  {note}" for note in curve.notes)
    return "\n\n".join(blocks)
