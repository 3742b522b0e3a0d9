"""`cogworker swarm [ARGS]`: the same command as `cogworker-swarm`, listed by `cogworker --help`.

Its arguments go to the swarm's own parser untouched (`cogworker swarm --help` prints the swarm's
help). The swarm keeps its processes lean: the supervisor imports little before it forks the first
fork server, and workers forked from that never load pydantic (settings_fields.py). `cogworker` runs
it from its entry point (cli/entry.py) before the other verbs' imports, so the two commands start
the same processes at the same cost.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cogworker import exitcodes

# argparse (~8 ms) only for the full parser: `cogworker swarm` without arguments never loads it, as
# `cogworker-swarm` doesn't (supervisor/main.py).
if TYPE_CHECKING:
    import argparse

PROG = "cogworker swarm"


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    import argparse

    del parents  # the swarm takes no --json
    parser = sub.add_parser(
        "swarm",
        add_help=False,  # --help is the swarm's own, passed on
        help="run a supervised swarm of workers (the same as cogworker-swarm)",
        description="Run a swarm: one supervisor keeping COGWORKER_COUNT worker processes alive. The same "
        "command as cogworker-swarm, which `cogworker swarm --help` describes in full.",
    )
    parser.add_argument(
        "swarm_args",
        metavar="ARG",
        nargs=argparse.REMAINDER,
        help="passed on to cogworker-swarm (--help, --version)",
    )


def start(env_file: str | None, swarm_args: Sequence[str]) -> int:
    """Load the env file, if any, into the environment (the swarm's processes read their settings
    from it), then hand over to the supervisor's main, which parses its arguments and runs until
    stopped."""
    if env_file is not None:
        from cogworker.config_error import ConfigError
        from cogworker.env_file import load_env_file

        try:
            load_env_file(env_file)
        except ConfigError as exc:
            print(f"cogworker: configuration error: {exc}", file=sys.stderr)
            return exitcodes.CONFIG_ERROR
    from supervisor.main import main as swarm_main

    return swarm_main(list(swarm_args), prog=PROG)


def recognise(argv: Sequence[str]) -> tuple[str | None, list[str]] | None:
    """(the --env-file path or None, the swarm's arguments) when `argv` is `[--env-file PATH] swarm
    ...`; None for any other command line. Recognised before argparse, which would take the swarm's
    own options (`--version`) for `cogworker`'s: the subparser only lists the verb in --help."""
    env_file: str | None = None
    rest = list(argv)
    if rest[:1] == ["--env-file"] and len(rest) >= 2:
        env_file, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("--env-file="):
        env_file, rest = rest[0].partition("=")[2], rest[1:]
    if rest[:1] != ["swarm"]:
        return None
    return env_file, rest[1:]
