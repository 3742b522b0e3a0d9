"""One line of `cogworker doctor` (ops/doctor.py, ops/doctor_cluster.py): a check's name, its level and
what it found, with the details listed under it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Level = Literal["OK", "WARN", "FAIL"]
LEVELS: tuple[Level, ...] = ("OK", "WARN", "FAIL")

SHOWN = 10  # details listed per check; the rest are counted


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    level: Level
    message: str
    details: list[str] = field(default_factory=list)


def listed(items: list[str]) -> list[str]:
    return items[:SHOWN] + ([f"... and {len(items) - SHOWN} more"] if len(items) > SHOWN else [])


def worst(levels: list[Level]) -> Level:
    return max(levels, key=LEVELS.index, default="OK")
