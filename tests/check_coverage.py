"""The per-module coverage floor that `make coverage` enforces.

Reads the JSON report coverage.py wrote and [tool.cogworker.coverage] in pyproject.toml: every module
must be covered at `min_module_percent` or more, unless it is listed under `exceptions` with the reason
its remaining code cannot be reached by the suite. A listed module must say the same in a comment at
its top (the word "coverage" in its first lines), so a reader of the module learns it too.

Usage: python tests/check_coverage.py .coverage-data/coverage.json
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HEADER_LINES = 15


def load_policy() -> tuple[float, dict[str, str]]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cogworker"]["coverage"]
    return float(table["min_module_percent"]), dict(table.get("exceptions", {}))


def module_percents(report: dict[str, Any]) -> dict[str, float]:
    return {path: float(data["summary"]["percent_covered"]) for path, data in report["files"].items()}


def problems(percents: dict[str, float], floor: float, exceptions: dict[str, str]) -> list[str]:
    found = []
    for path, percent in sorted(percents.items(), key=lambda item: item[1]):
        if percent < floor and path not in exceptions:
            found.append(f"{path}: {percent:.0f} % is under {floor:.0f} % and not listed with a reason")
    for path in sorted(exceptions):
        if path not in percents:
            found.append(f"{path}: listed as an exception but not measured (moved or removed?)")
        elif not _header_mentions_coverage(ROOT / path):
            found.append(f"{path}: listed as an exception but its top comment does not say why")
    return found


def _header_mentions_coverage(path: Path) -> bool:
    head = path.read_text().splitlines()[:HEADER_LINES]
    return any("coverage" in line.lower() for line in head)


def main(argv: list[str]) -> int:
    report = json.loads(Path(argv[1]).read_text())
    floor, exceptions = load_policy()
    percents = module_percents(report)
    found = problems(percents, floor, exceptions)
    for path in sorted(exceptions):
        if percents.get(path, 0.0) >= floor:
            print(f"note: {path} is at {percents[path]:.0f} % now; its exception can go")
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print(f"coverage: every module at {floor:.0f} % or more, or listed with a reason ({len(exceptions)})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
