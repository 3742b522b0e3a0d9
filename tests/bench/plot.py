"""Draws a Curve as PNGs, one per metric, with matplotlib (in .bench-venv only, never the project's)."""

from __future__ import annotations

from pathlib import Path

from curve import Curve

# The same colour for a system in every picture; variants of a system share its colour's family.
COLOURS = {
    "cogworker": "#1f77b4",
    "Sidekiq + YJIT": "#d62728",
    "Sidekiq": "#ff9896",
    "Dramatiq": "#2ca02c",
    "arq": "#9467bd",
    "SAQ": "#8c564b",
}


def _colour(series: str) -> str | None:
    for name in sorted(COLOURS, key=len, reverse=True):
        if series.startswith(name):
            return COLOURS[name]
    return None


def draw(curve: Curve, directory: Path, stem: str) -> list[Path]:
    """Writes <directory>/<stem>-<curve.name>-<metric.key>.png for each metric; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server
    import matplotlib.pyplot as plt

    xs = curve.xs()
    categorical = any(isinstance(x, str) for x in xs)
    written: list[Path] = []
    for metric in curve.metrics:
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
        for series in curve.series_names():
            pairs = [(x, curve.value(series, x, metric.key)) for x in xs]
            pairs = [(x, y) for x, y in pairs if y is not None]
            if not pairs:
                continue
            positions = [xs.index(x) if categorical else x for x, _ in pairs]
            dashed = series != series.split(" (")[0] or series.endswith(" strict")
            ax.plot(
                positions,
                [y for _, y in pairs],
                marker="o",
                label=series,
                color=_colour(series),
                linestyle="--" if dashed else "-",
            )
        if categorical:
            # Many categories (a grid such as processes x threads) would print over each other.
            ax.set_xticks(range(len(xs)), [str(x) for x in xs], rotation=45 if len(xs) > 8 else 0)
        elif curve.x_log:
            ax.set_xscale("log")
        if metric.log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(curve.x_label)
        ax.set_ylabel(f"{metric.label} ({metric.unit})")
        ax.set_title(f"{curve.title}: {metric.label}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / f"{stem}-{curve.name}-{metric.key}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
