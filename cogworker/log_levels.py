"""COGWORKER_LOG_LEVELS: levels per standard-library logger, read without importing `logging` or
structlog (settings.py checks it in every process, an app's pushes included)."""

from __future__ import annotations

LEVEL_NAMES = ("debug", "info", "warning", "error", "critical")

EXAMPLE = "urllib3=warning,myapp.jobs=debug"


def parse_log_levels(text: str) -> dict[str, str]:
    """`urllib3=warning,myapp.jobs=debug` as {logger name: level name}. Raises ValueError naming the
    part that isn't `logger=level`."""
    levels: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, equals, level = (piece.strip() for piece in part.partition("="))
        if not equals or not name or any(c.isspace() for c in name):
            raise ValueError(f"{part!r} is not logger=level (for example {EXAMPLE})")
        if level.lower() not in LEVEL_NAMES:
            raise ValueError(f"{part!r}: the level must be one of {', '.join(LEVEL_NAMES)}, not {level!r}")
        if name in levels:
            raise ValueError(f"logger {name!r} is listed twice")
        levels[name] = level.lower()
    return levels
