"""The shape rules of cogworker/ and supervisor/ that no linter checks.

A module may use the private names (`_x`) of modules in its own package (its folder), never those of
another package: reaching across a folder for a private name ties two parts of the tree together
through a detail one of them may change. No source file grows past 400 lines, and every module says
what it is for in its docstring.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SOURCE_PACKAGES = ("cogworker", "supervisor")
MAX_LINES = 400


def source_files() -> list[Path]:
    return sorted(
        p for top in SOURCE_PACKAGES for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts
    )


def module_name(relative: Path) -> str:
    parts = relative.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules() -> dict[str, bool]:
    """Every module of the source tree -> whether it is a package (an `__init__.py`)."""
    return {module_name(p.relative_to(ROOT)): p.name == "__init__.py" for p in source_files()}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def package_of(module: str, modules: dict[str, bool]) -> str:
    """The package a name defined in `module` belongs to: the package itself for an `__init__`."""
    return module if modules.get(module) else module.rpartition(".")[0]


def imported_modules(tree: ast.Module, modules: dict[str, bool]) -> dict[str, str]:
    """Local name -> source module, for every module of the tree this one binds to a name."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    bound[alias.asname or alias.name.partition(".")[0]] = (
                        alias.name if alias.asname else alias.name.partition(".")[0]
                    )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def imported_private_names(tree: ast.Module, module: str, modules: dict[str, bool]) -> Iterator[str]:
    """`from a.b import _x` where a.b's package is not this module's."""
    own = package_of(module, modules)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules):
            continue
        source = node.module
        foreign = package_of(source, modules) != own
        for alias in node.names:
            if foreign and is_private(alias.name) and f"{source}.{alias.name}" not in modules:
                yield f"line {node.lineno}: from {source} import {alias.name}"
            elif is_private(alias.name) and f"{source}.{alias.name}" in modules and source != own:
                yield f"line {node.lineno}: from {source} import {alias.name} (a private module)"


def used_private_attributes(tree: ast.Module, module: str, modules: dict[str, bool]) -> Iterator[str]:
    """`other_module._x` where other_module, bound by an import, is in another package."""
    own = package_of(module, modules)
    bound = imported_modules(tree, modules)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain: list[str] = []
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if not (isinstance(value, ast.Name) and value.id in bound):
            continue
        target = ".".join([bound[value.id], *chain])
        if target in modules and package_of(target, modules) != own:
            yield f"line {node.lineno}: {target}.{node.attr}"


def private_reaches(source: str, module: str, modules: dict[str, bool]) -> list[str]:
    tree = ast.parse(source)
    return [*imported_private_names(tree, module, modules), *used_private_attributes(tree, module, modules)]


def test_no_module_uses_a_private_name_of_another_package() -> None:
    modules = source_modules()
    wrong = []
    for path in source_files():
        module = module_name(path.relative_to(ROOT))
        wrong += [f"{path.relative_to(ROOT)} {r}" for r in private_reaches(path.read_text(), module, modules)]
    assert not wrong, "private names used across packages:\n" + "\n".join(wrong)


MODULES = {
    "pkg": True,
    "pkg.a": False,
    "pkg.b": False,
    "pkg.sub": True,
    "pkg.sub.c": False,
    "pkg.sub._hidden": False,
}


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("pkg.a", "from pkg.b import _x", []),  # same package
        ("pkg.a", "from pkg import _x", []),  # the package's own __init__
        ("pkg.sub.c", "from pkg.sub import _x", []),
        ("pkg.sub.c", "from pkg.a import _x", ["line 1: from pkg.a import _x"]),
        ("pkg.a", "from pkg.sub.c import _x", ["line 1: from pkg.sub.c import _x"]),
        ("pkg.a", "from pkg.sub import _x", ["line 1: from pkg.sub import _x"]),
        ("pkg.a", "from pkg.sub import _hidden", ["line 1: from pkg.sub import _hidden (a private module)"]),
        ("pkg.a", "from pkg.sub.c import __all__, x", []),
        ("pkg.a", "from pkg.sub import c\nc._x = 1", ["line 2: pkg.sub.c._x"]),
        ("pkg.a", "import pkg.sub.c as c\nprint(c._y)", ["line 2: pkg.sub.c._y"]),
        ("pkg.a", "import pkg.sub.c\nprint(pkg.sub.c._y)", ["line 2: pkg.sub.c._y"]),
        ("pkg.a", "from pkg import b\nb._x()", []),
        ("pkg.a", "self._x = 1", []),
    ],
)
def test_the_private_name_check_tells_own_package_from_another(
    module: str, source: str, found: list[str]
) -> None:
    assert private_reaches(source, module, MODULES) == found


def test_no_source_file_is_over_the_line_limit() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in source_files()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, f"source files over {MAX_LINES} lines: {long}"


def test_every_module_has_a_docstring() -> None:
    missing = [
        str(p.relative_to(ROOT))
        for p in source_files()
        if ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert not missing, f"modules without a docstring: {missing}"
