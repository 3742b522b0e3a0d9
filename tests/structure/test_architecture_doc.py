"""docs/architecture.md stays true to the tree.

Every path it names in backticks exists, every test it names as `tests/file.py::test_name` exists,
every module and package of `cogworker/` and `supervisor/` has its line in the module map, every Lua
script the package ships has its own entry under "Lua scripts" (and no entry outlives its script),
and every section a comment cites (`docs/architecture.md, "A child dies"`) is a heading of the
document. Move a module, rename a test or add a script, and one of these fails naming the line to fix.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import re
from importlib import resources
from pathlib import Path

import pytest


def _repo_root() -> Path:
    """The checkout's root, wherever in tests/ this file ends up."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    raise RuntimeError(f"no pyproject.toml above {here}")


ROOT = _repo_root()
DOC = ROOT / "docs" / "architecture.md"
SOURCE_PACKAGES = ("cogworker", "supervisor")
# A path in backticks, rooted at a top-level folder of the repository, optionally `::test_name`.
NAMED_PATH = re.compile(r"`((?:cogworker|supervisor|tests|deploy|systemd|docs)/[^`\s:]*)((?:::\w+)*)`")
RUN_MODULE = re.compile(r"python -m ([\w.]+)")
# `docs/architecture.md, "Section"`, `docs/architecture.md ("One", "Two" and "Three")`.
CITATION = re.compile(r"architecture\.md[\s,(:;§-]*(?:sections?\s+)?\"([^\"]+)\"")
MORE_CITED = re.compile(r"\s*(?:,\s*and|,|and)\s*\"([^\"]+)\"")
# `"A child dies" in docs/architecture.md`, `"Key layout" and "Lua scripts" in docs/architecture.md`.
CITED_BEFORE = re.compile(
    r"((?:\"[^\"]{1,80}\"(?:\s*(?:,\s*and|,|and)\s*)?)+)\s+(?:sections?\s+)?(?:in|of)\s+(?:the\s+)?(?:docs/)?architecture\.md"
)
QUOTED = re.compile(r"\"([^\"]+)\"")
ANCHOR = re.compile(r"architecture\.md#([\w-]+)")
# A class named in backticks, maybe with one of its methods: `Recovery`, `Recovery.requeue_dead`.
NAMED_CLASS = re.compile(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:\.(\w+))?`")


def doc_text() -> str:
    return DOC.read_text()


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every Markdown heading outside code blocks."""
    found: list[tuple[int, str]] = []
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := re.match(r"(#{1,6})\s+(.+?)\s*$", line)):
            found.append((len(match.group(1)), match.group(2)))
    return found


def section(text: str, title: str) -> str:
    """The body of the `## title` section, up to the next heading of its level."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match is not None, f"docs/architecture.md has no '## {title}' section"
    return match.group(1)


def slug(title: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    title = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return title.replace(" ", "-")


def named_paths(text: str) -> list[tuple[str, list[str]]]:
    return [(m.group(1), [n for n in m.group(2).split("::") if n]) for m in NAMED_PATH.finditer(text)]


def function_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def source_classes() -> dict[str, set[str]]:
    """Class name -> the names defined in its body, over every module of cogworker/ and supervisor/."""
    classes: dict[str, set[str]] = {}
    for top in SOURCE_PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    members = classes.setdefault(node.name, set())
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                            members.add(item.name)
    return classes


def lua_scripts() -> set[str]:
    """Every .lua file shipped in the cogworker package, wherever its folder lives."""
    package = Path(str(resources.files("cogworker")))
    return {path.name for path in package.rglob("*.lua")}


def source_modules() -> list[str]:
    """Every module and package folder of cogworker/ and supervisor/, as paths from the root."""
    found: list[str] = []
    for top in SOURCE_PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT)
            if path.name == "__init__.py":
                found.append(f"{relative.parent}/")
            elif path.name != "__main__.py":
                found.append(str(relative))
    return found


def citing_files() -> list[Path]:
    # The README and the docs site's pages cite it as the code does (the user guide moved there).
    files = [ROOT / "README.md", ROOT / "deploy" / "RUNBOOK.md", *(ROOT / "docs").rglob("*.md")]
    for top in (*SOURCE_PACKAGES, "tests"):
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".lua", ".md")]
    this = Path(__file__).resolve()
    return [p for p in files if p.is_file() and p not in (DOC, this) and "__pycache__" not in p.parts]


def citations(text: str) -> list[str]:
    """Section titles cited after `architecture.md`, a comment's line breaks and markers undone."""
    flat = re.sub(r"\s*\n\s*(?:#|--)?\s*", " ", text)
    cited: list[str] = []
    for match in CITATION.finditer(flat):
        cited.append(match.group(1))
        rest = flat[match.end() :]
        while (more := MORE_CITED.match(rest)) is not None:
            cited.append(more.group(1))
            rest = rest[more.end() :]
    for match in CITED_BEFORE.finditer(flat):
        cited += QUOTED.findall(match.group(1))
    return cited


def test_every_named_path_exists() -> None:
    missing = [path for path, _ in named_paths(doc_text()) if not (ROOT / path).exists()]
    assert not missing, f"docs/architecture.md names paths that don't exist: {sorted(set(missing))}"


def test_every_named_test_exists() -> None:
    named = [(path, names) for path, names in named_paths(doc_text()) if names]
    assert named, "the Guarantees section names no test"
    missing = []
    for path, names in named:
        file = ROOT / path
        if not file.is_file() or not set(names) <= function_names(file):
            missing.append(f"{path}::{'::'.join(names)}")
    assert not missing, f"docs/architecture.md names tests that don't exist: {missing}"


def test_every_guarantee_names_a_test_that_proves_it() -> None:
    body = section(doc_text(), "Guarantees")
    for title, text in re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", body, flags=re.M | re.S):
        assert "::test_" in text, f"the guarantee {title!r} names no test"


def test_every_named_class_and_method_exists() -> None:
    classes = source_classes()
    wrong = []
    for match in NAMED_CLASS.finditer(doc_text()):
        name, member = match.groups()
        if hasattr(builtins, name) and member is None:
            continue
        if name not in classes or (member is not None and member not in classes[name]):
            wrong.append(match.group(0))
    assert not wrong, f"docs/architecture.md names classes or methods that don't exist: {sorted(set(wrong))}"


def test_every_module_run_with_dash_m_exists() -> None:
    for name in RUN_MODULE.findall(doc_text()):
        assert importlib.util.find_spec(name) is not None, f"`python -m {name}`: no such module"


def test_the_module_map_covers_every_module() -> None:
    mapped = {path for path, _ in named_paths(section(doc_text(), "Module map"))}
    unmapped = [module for module in source_modules() if module not in mapped]
    assert not unmapped, f"modules missing from the module map of docs/architecture.md: {unmapped}"


def test_every_lua_script_has_its_entry_and_no_entry_outlives_its_script() -> None:
    shipped = lua_scripts()
    assert shipped, "no .lua file found in the cogworker package"
    body = section(doc_text(), "Lua scripts")
    described = {title.strip("`") for level, title in headings(body) if level == 3}
    assert shipped - described == set(), (
        f"Lua scripts with no entry under 'Lua scripts': {shipped - described}"
    )
    assert described - shipped == set(), f"entries under 'Lua scripts' with no script: {described - shipped}"


def test_every_cited_section_is_a_heading() -> None:
    titles = {title.lower() for _, title in headings(doc_text())}
    anchors = {slug(title) for title in titles}
    wrong = []
    for path in citing_files():
        text = path.read_text(errors="replace")
        wrong += [f"{path.relative_to(ROOT)}: {c!r}" for c in citations(text) if c.lower() not in titles]
        wrong += [f"{path.relative_to(ROOT)}: #{a}" for a in ANCHOR.findall(text) if a not in anchors]
    assert not wrong, f"citations of docs/architecture.md sections that don't exist: {wrong}"


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ('# see docs/architecture.md, "A child dies".', ["A child dies"]),
        ('(docs/architecture.md, "Life of a job" and "Guarantees")', ["Life of a job", "Guarantees"]),
        (
            'docs/architecture.md ("Key layout", "Lua scripts", and "Guarantees")',
            ["Key layout", "Lua scripts", "Guarantees"],
        ),
        (
            '# docs/architecture.md,\n    # "Whole-host deaths: the heartbeat path"',
            ["Whole-host deaths: the heartbeat path"],
        ),
        ('# order ("A child dies" in docs/architecture.md).', ["A child dies"]),
        (
            '"""Loop (issue 13; "The supervisor loop never waits\non another process" in architecture.md',
            ["The supervisor loop never waits on another process"],
        ),
        ('See "Key layout" and "Lua scripts" in docs/architecture.md.', ["Key layout", "Lua scripts"]),
        ("the design is in docs/architecture.md.", []),
    ],
)
def test_citations_are_read_across_comment_lines_and_lists(text: str, cited: list[str]) -> None:
    assert citations(text) == cited
