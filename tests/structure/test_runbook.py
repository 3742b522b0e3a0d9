"""deploy/RUNBOOK.md stays true: every command in it parses with the real CLI and is exercised by a
test, and the way it loads an instance's settings works."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from cogworker.cli.main import build_parser
from tests.support.paths import ROOT, TESTS
from tests.support.redis_server import RedisServer

RUNBOOK = ROOT / "deploy" / "RUNBOOK.md"

# Sample values for the placeholders the runbook uses.
PLACEHOLDERS = {"<jid>": "0123abcd", "<identity>": "host:1:abcd"}


def runbook_commands() -> list[str]:
    text = RUNBOOK.read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def cogworker_argvs() -> list[list[str]]:
    argvs = []
    for line in runbook_commands():
        for placeholder, value in PLACEHOLDERS.items():
            line = line.replace(placeholder, value)
        words = shlex.split(line)
        if words[0] == "cogworker":
            argvs.append(words[1:])
    return argvs


def test_the_runbook_has_commands() -> None:
    assert len(cogworker_argvs()) > 15
    assert any(c.startswith("systemctl reload") for c in runbook_commands())


@pytest.mark.parametrize("argv", cogworker_argvs(), ids=lambda a: " ".join(a))
def test_every_cogworker_command_parses_and_is_exercised(argv: list[str]) -> None:
    build_parser().parse_args(argv)  # raises SystemExit on anything the CLI doesn't accept
    groups = {"queue", "retry", "scheduled", "dead"}  # verbs that take an action word
    verb = " ".join(argv[:2]) if argv[0] in groups else argv[0]
    test_text = "\n".join(p.read_text() for p in TESTS.rglob("test_*.py") if p.name != "test_runbook.py")
    words = verb.split()
    assert any(all(f'"{w}"' in chunk for w in words) for chunk in test_text.split("\ndef ")), (
        f"no test runs `cogworker {verb}`"
    )


def test_every_systemctl_command_is_exercised_against_a_real_manager() -> None:
    exercised = (TESTS / "e2e" / "systemd" / "test_systemd_swarm.py").read_text()
    for line in runbook_commands():
        words = shlex.split(line)
        if words[0] != "systemctl":
            continue
        assert f'"{words[1]}"' in exercised, f"`{line}` is not exercised in test_systemd_swarm.py"


def test_loading_an_instance_env_file_as_the_runbook_does(tmp_path: Path, redis_server: RedisServer) -> None:
    env_file = tmp_path / "app.env"
    # Quoted values, and one holding a `#` and spaces (`env $(grep … | xargs)` broke on these).
    env_file.write_text(
        f"# instance settings\nCOGWORKER_REDIS_URL={redis_server.url}\nCOGWORKER_QUEUES='a,b'\n"
        'APP_GREETING="hello world # not a comment"\n'
    )
    venv_bin = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
    line = next(c for c in runbook_commands() if c.startswith("sudo -u cogworker"))
    # The file's path is on the command line, never its contents.
    assert "--env-file /etc/cogworker/app.env" in line and "$(" not in line
    # The same shape, minus sudo (tests run as whoever runs them) and with this checkout's venv.
    command = line.removeprefix("sudo -u cogworker ").replace("/etc/cogworker/app.env", str(env_file))
    command = command.replace("/opt/cogworker/venv/bin/cogworker", str(venv_bin / "cogworker"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    done = subprocess.run(
        ["bash", "-c", command + " --json"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert '"queues"' in done.stdout
