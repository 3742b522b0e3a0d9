"""`cogworker swarm` is `cogworker-swarm`: its arguments passed on, its start as lean, and both
commands answer --version. A swarm started as `cogworker swarm` runs a job in tests/e2e/cli/."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cogworker
from cogworker.cli.swarm import recognise
from tests.support.daemon_env import clean_env

BIN = Path(sys.executable).parent


def command(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], env=clean_env(env), capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["swarm"], (None, [])),
        (["swarm", "--version"], (None, ["--version"])),
        (["--env-file", "a.env", "swarm", "-h"], ("a.env", ["-h"])),
        (["--env-file=a.env", "swarm"], ("a.env", [])),
        (["run", "swarm"], None),  # a module named swarm
        (["--version"], None),
        ([], None),
        (["--env-file", "a.env"], None),
    ],
)
def test_the_swarm_command_line_is_recognised_before_argparse(
    argv: list[str], found: tuple[str | None, list[str]] | None
) -> None:
    assert recognise(argv) == found


def test_both_commands_and_the_verb_answer_version() -> None:
    version = cogworker.__version__
    for argv, prog in (
        (["cogworker", "--version"], "cogworker"),
        (["cogworker-swarm", "--version"], "cogworker-swarm"),
        (["cogworker", "swarm", "--version"], "cogworker swarm"),
        (["python", "-m", "cogworker", "swarm", "--version"], "cogworker swarm"),
    ):
        done = command(*argv)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"{prog} {version}\n", ""), argv


def test_the_swarms_own_help_and_usage_errors() -> None:
    helped = command("cogworker", "swarm", "--help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: cogworker swarm [-h] [--version]")
    assert "HUP, USR2" in helped.stdout  # the swarm's signals, from supervisor/main.py's help
    wrong = command("cogworker", "swarm", "--count", "2")
    assert wrong.returncode == 2
    assert wrong.stderr.splitlines()[-1] == "cogworker swarm: error: unrecognized arguments: --count 2"
    unreadable = command("cogworker", "--env-file", "/nonexistent/app.env", "swarm")
    assert unreadable.returncode == 78
    assert unreadable.stderr.startswith("cogworker: configuration error: --env-file /nonexistent/app.env")


def test_the_swarm_starts_without_the_other_verbs_imports(tmp_path: Path) -> None:
    """The first fork server, and every worker, is a fork of this process: what it imported they hold
    (pydantic is kept out of workers, settings_fields.py). An env file is read without it too."""
    bare = subprocess.run(
        [sys.executable, "-c", "import sys, cogworker.cli.entry; print(sorted(sys.modules))"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bare.returncode == 0, bare.stderr
    loaded = set(bare.stdout.strip().strip("[]").replace("'", "").split(", "))
    assert "cogworker.cli.entry" in loaded
    assert loaded.isdisjoint({"argparse", "structlog", "pydantic", "redis", "orjson", "cogworker.cli.main"})
    env_file = tmp_path / "app.env"
    env_file.write_text("COGWORKER_QUEUES=from_the_file\n")
    code = f"""
        import os, sys
        from cogworker.cli.entry import main
        code = main(["--env-file", {str(env_file)!r}, "swarm", "--version"])
        heavy = [m for m in ("pydantic", "redis", "structlog", "cogworker.cli.main") if m in sys.modules]
        print(code, os.environ["COGWORKER_QUEUES"], heavy)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 from_the_file []"
