"""The curves `make bench` measures: each module here is one `--only <name>`, found by its name.

A curve module defines:
    TITLE: str                                   what it measures, one line (for --help)
    def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]
It starts and stops its own workers (ctx.start / ctx.stop), flushes the bench Redis itself, and picks
its sizes from ctx.plan.quick (a smoke run: the smallest sizes, one round).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from context import Context
    from curve import Curve

Run = Callable[["Context", Callable[[str], None]], "list[Curve]"]


def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name: str) -> ModuleType:
    module = importlib.import_module(f"curves.{name}")
    # Importing a submodule binds it as an attribute of this package: the load curve (curves/load.py)
    # would then stand where this function does, and the next curve's `curves.load(name)` would call
    # a module. Put the function back.
    globals()["load"] = load_curve
    return module


load_curve = load
