"""Every Python example on the docs site (docs/**/*.md) and in README.md is code the suite runs: each
```python block sits right under a `<!-- from PATH ... -->` comment, appears as written in the file
PATH, and PATH is a test module, or an app (tests/apps/, docs/examples/) that a test imports or starts.
So an example can't drift from what the tests execute. Shell blocks are exempt."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import ROOT, TESTS

SOURCED = re.compile(r"<!-- from (\S+)[^>]*-->")
FENCE = re.compile(r"^(\s*)```(\S*)")


def python_blocks(page: Path) -> list[tuple[int, str | None, str]]:
    """(line number, the PATH of the comment above it or None, the block's text) for each ```python
    block, an indented one (in a list or an admonition) with its indent taken off."""
    lines = page.read_text().splitlines(keepends=True)
    blocks = []
    n = 0
    while n < len(lines):
        fence = FENCE.match(lines[n])
        if fence is None:
            n += 1
            continue
        indent, language = fence.groups()
        end = next(i for i in range(n + 1, len(lines)) if lines[i].strip() == "```")
        if language == "python":
            above = SOURCED.fullmatch(lines[n - 1].strip()) if n else None
            body = "".join(line.removeprefix(indent) for line in lines[n + 1 : end])
            blocks.append((n + 1, above.group(1) if above else None, body))
        n = end + 1
    return blocks


@cache
def suite_sources() -> tuple[str, ...]:
    """Every test module and support file (where an app is imported, started or named), this one
    left out: it names example paths only to check them."""
    files = [*TESTS.rglob("test_*.py"), *(TESTS / "support").rglob("*.py"), TESTS / "conftest.py"]
    return tuple(f.read_text() for f in files if f.resolve() != Path(__file__).resolve())


def is_run(path: str) -> bool:
    parts = Path(path).parts
    if parts[0] == "tests" and parts[-1].startswith("test_"):
        return True  # a test module: collected
    if parts[:2] == ("tests", "apps"):
        name = parts[2].removesuffix(".py")  # the module, or the package the file is in
        return any(re.search(rf"\b{re.escape(name)}\b", text) for text in suite_sources())
    if parts[:2] == ("docs", "examples"):
        # One test module names the examples' folder, the page's folder in it, and the file.
        page, stem = parts[2], Path(parts[-1]).stem
        return any(
            ('"docs" / "examples"' in text or "docs/examples" in text)
            and f'"{page}"' in text
            and re.search(rf"\b{re.escape(stem)}\b", text) is not None
            for text in suite_sources()
        )
    return False


def problems(page: Path) -> list[str]:
    found = []
    for line, path, body in python_blocks(page):
        where = f"{page.relative_to(ROOT)}:{line}"
        if path is None:
            found.append(f"{where}: a python block without a <!-- from PATH --> comment right above it")
        elif not (ROOT / path).is_file():
            found.append(f"{where}: {path} doesn't exist")
        elif body not in (ROOT / path).read_text():
            found.append(f"{where}: the example is not in {path} as written")
        elif not is_run(path):
            found.append(f"{where}: no test imports or starts {path}")
    return found


SITE_PAGES = sorted((ROOT / "docs").rglob("*.md"))


@pytest.mark.parametrize("page", SITE_PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_example_on_a_page_is_code_the_suite_runs(page: Path) -> None:
    assert problems(page) == []


def test_every_example_in_the_readme_is_code_the_suite_runs() -> None:
    assert problems(ROOT / "README.md") == []


def test_the_check_sees_the_examples() -> None:
    blocks = [block for page in SITE_PAGES for block in python_blocks(page)]
    assert len(blocks) >= 20
    assert is_run("docs/examples/quickstart/jobs.py") and not is_run("docs/examples/nowhere/x.py")
