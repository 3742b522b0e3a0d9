"""README.md is the front door, on GitHub and on PyPI: short, every link absolute (PyPI renders it
away from the repository, where a relative link or image breaks), its Python quoted from the files
the quickstart test runs, and the commands it promises a fresh clone are the Makefile's.

What the README once held (the user guide, settings, deployment, benchmark figures) lives on the
documentation site now, where docs/ pages and their own tests keep it true."""

from __future__ import annotations

import re
import tomllib

from tests.support.paths import ROOT

README = ROOT / "README.md"
MAX_LINES = 200
# [text](target) and ![alt](target); <https://...> autolinks are absolute by construction.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SOURCED_BLOCK = re.compile(r"<!-- from (\S+) -->\n```python\n(.*?)```", re.S)
ANY_PYTHON_BLOCK = re.compile(r"^```python$", re.M)
MAKE_TARGET = re.compile(r"^([a-z][\w-]*):", re.M)


def text() -> str:
    return README.read_text()


def test_the_readme_is_short() -> None:
    lines = len(text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; the detail belongs on the docs site"


def test_every_link_and_image_is_absolute() -> None:
    targets = LINK.findall(text())
    assert targets, "no link found: the pattern no longer matches the README's links"
    relative = [t for t in targets if not t.startswith("https://")]
    assert not relative, f"links PyPI can't follow (use https://cogworker-dev.github.io/...): {relative}"


def test_every_python_block_is_quoted_from_a_quickstart_file() -> None:
    readme = text()
    sourced = SOURCED_BLOCK.findall(readme)
    assert len(sourced) == len(ANY_PYTHON_BLOCK.findall(readme)), "a ```python block without <!-- from -->"
    assert {path for path, _ in sourced} == {
        "docs/examples/quickstart/jobs.py",
        "docs/examples/quickstart/web.py",
    }
    for path, block in sourced:
        assert block in (ROOT / path).read_text(), f"the README's block from {path} is not in it"


def test_the_develop_commands_are_make_targets() -> None:
    targets = set(MAKE_TARGET.findall((ROOT / "Makefile").read_text()))
    develop = text().split("## Develop", 1)[1]
    for command in ("make run", "make test"):
        assert command in develop, f"the Develop section lost `{command}`"
        assert command.split()[1] in targets, f"`{command}` is not a Makefile target"


def test_the_extras_named_are_the_packages_extras() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = re.search(r"with extras: ([\w, ]+)", text())
    assert named is not None, "the install line no longer lists the extras"
    listed = {name.strip() for name in named.group(1).split(",")}
    assert listed == extras - {"dev"}, f"README names extras {sorted(listed)}, pyproject has {sorted(extras)}"
