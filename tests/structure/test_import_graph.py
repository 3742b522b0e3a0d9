"""The source tree's import graph has no cycle, counting imports inside functions too.

A cycle is what made the job API need workarounds (a hook filled in by the package `__init__`, a
module class that refused to bind submodules); this keeps it from coming back.

The worker's layering is checked here too: its rooms (fetching/, running/, settling/, recovering/,
loops/) never import the process-level modules at the top of cogworker/worker/ that assemble them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

PACKAGE = ROOT / "cogworker"
# The supervisor imports from cogworker, so a cycle could also run across the two packages.
SOURCE_PACKAGES = (PACKAGE, ROOT / "supervisor")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every cogworker module `path` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
    return {name for name in found if name in modules}


def import_graph(*packages: Path) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (the cogworker package when none is given)."""
    paths = {module_name(p): p for package in packages or (PACKAGE,) for p in package.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path of module names, or None (depth-first search with colours)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == "open":
                return [*stack[stack.index(child) :], child]
            if child not in state and (cycle := visit(child)) is not None:
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "cogworker.api.client" in graph  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_supervisor_and_cogworker_together_have_no_import_cycle() -> None:
    graph = import_graph(*SOURCE_PACKAGES)
    assert "supervisor.swarm" in graph and "cogworker.api.client" in graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


# The worker's process-level modules assemble its parts; the rooms below them (fetching/, running/,
# settling/, recovering/, loops/) never reach back up to the process that holds them.
WORKER = "cogworker.worker"
WORKER_ROOMS = ("fetching", "running", "settling", "recovering", "loops", "metrics")


def test_the_worker_rooms_never_import_the_process_level_modules() -> None:
    graph = import_graph()
    rooms = {f"{WORKER}.{room}" for room in WORKER_ROOMS}
    assert rooms <= set(graph), f"a worker room is missing: {sorted(rooms - set(graph))}"
    process_level = {m for m in graph if m.rpartition(".")[0] == WORKER and m not in rooms}
    assert f"{WORKER}.launcher" in process_level and f"{WORKER}.manager" in process_level
    wrong = [
        f"{module} imports {sorted(graph[module] & process_level)}"
        for module in sorted(graph)
        if module.startswith(tuple(f"{room}." for room in rooms)) and graph[module] & process_level
    ]
    assert not wrong, "worker rooms importing the process-level modules:\n" + "\n".join(wrong)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
