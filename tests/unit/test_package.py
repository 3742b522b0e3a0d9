"""The package's top level (cogworker/__init__.py): the public names it loads on first use are
still listed by dir(), so tab completion and help() see them, and listing them loads nothing; the
version is the distribution's (cogworker-redis), and both commands print it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import cogworker

LISTED = """
import json, sys, cogworker
names = dir(cogworker)
print(json.dumps({"dir": names, "loaded": sorted(m for m in sys.modules if m.startswith("cogworker.api."))}))
"""


def test_dir_lists_every_public_name_before_any_is_used() -> None:
    # A fresh interpreter, so that no lazy name has been loaded into the module's namespace yet.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LISTED)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    missing = sorted(set(cogworker.__all__) - set(seen["dir"]))
    assert not missing, f"dir(cogworker) omits {missing}"
    assert seen["dir"] == sorted(seen["dir"])
    # Listing the names must not import the job machinery they stand for.
    assert "cogworker.api.periodic" not in seen["loaded"]
    assert "cogworker.api.batch" not in seen["loaded"]


def test_dir_still_lists_what_the_module_holds_itself() -> None:
    names = dir(cogworker)
    assert {"__version__", "__getattr__", "__name__", "periodic", "limiter"} <= set(names)


def test_the_version_has_one_source() -> None:
    # pyproject.toml reads it from cogworker.__version__ (dynamic); the installed metadata agrees.
    assert metadata.version("cogworker-redis") == cogworker.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|(a|b|rc)\d+)?", cogworker.__version__)


@pytest.mark.parametrize("command", ["cogworker", "cogworker-swarm"])
def test_both_commands_print_the_version(command: str, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / command  # the console script, as a user runs it
    done = subprocess.run(
        [str(script), "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{command} {cogworker.__version__}\n"


def test_the_extras_need_no_more_than_they_install() -> None:
    # `otel` installs opentelemetry-api only (the app's SDK exports), `django` no database driver:
    # the package itself must not import the SDK or a driver, which only the dev group brings.
    root = Path(cogworker.__file__).parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            bad = [n for n in names if n.startswith(("opentelemetry.sdk", "psycopg"))]
            assert not bad, f"{path.relative_to(root.parent)} imports {bad}"
