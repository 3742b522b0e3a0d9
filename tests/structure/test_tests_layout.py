"""The tests keep the map tests/README.md draws.

Every test module lives in one of the folders it describes (unit/, e2e/, structure/), never loose at
the top of tests/ or among the helpers, and no test module imports another: what two test modules
share belongs in tests/support/.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import TESTS

TEST_FOLDERS = ("unit", "e2e", "structure")
# Not test suites: job modules for child processes, the benchmark, systemd scripts.
NOT_TESTS = ("apps", "bench", "systemd")


def found_test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if p.relative_to(TESTS).parts[0] not in NOT_TESTS)


def is_test_module(name: str) -> bool:
    return name.startswith("tests.") and name.rpartition(".")[2].startswith("test_")


def imported_test_modules(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            found += [name for name in names if is_test_module(name)]
    return found


def test_every_test_module_is_in_a_mapped_folder() -> None:
    loose = [
        str(p.relative_to(TESTS))
        for p in found_test_modules()
        if p.relative_to(TESTS).parts[0] not in TEST_FOLDERS
    ]
    assert found_test_modules(), "no test module found"
    assert not loose, f"test modules outside {TEST_FOLDERS} (see tests/README.md): {loose}"


def test_no_test_module_imports_another() -> None:
    wrong = [
        f"{p.relative_to(TESTS)}: {name}" for p in found_test_modules() for name in imported_test_modules(p)
    ]
    assert not wrong, f"test modules importing test modules (move what they share to tests/support/): {wrong}"


def test_the_import_check_finds_test_modules() -> None:
    assert is_test_module("tests.unit.api.test_client")
    assert not is_test_module("tests.support.swarm")
    assert not is_test_module("tests.support")
