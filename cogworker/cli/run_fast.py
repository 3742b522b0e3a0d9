"""`cogworker run`, started as a swarm's fork server starts: its settings checked beside its imports.

The full command line (cli/main.py) imports every verb's code to build its parser (Redis, the
operations, pydantic and pydantic-settings): about 0.1 s before the worker code's own imports even
began, and then the settings' check (pydantic, ~90 ms) before any of them, one after the other.
`cogworker run` needs none of the verbs. So cli/entry.py sends a `[--env-file PATH] run ...` command
line here first: the run verb's own parser (cli/run.py's options, the same --help and usage errors),
the env file, and then the settings' check in a forked child (supervisor/forkserver/settings_check.py:
a bad setting prints its line and exits 78, as before), while this process imports the worker code
and warms it (worker/warm_up.py) on the other CPU. The worker then holds a PlainSettings built from
the checked values, as every swarm worker does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cogworker import exitcodes

# argparse and the run verb's options only once a `run` command line is recognised: cli/entry.py
# imports this module on the way to `cogworker swarm` too, which loads neither (cli/swarm.py).
if TYPE_CHECKING:
    import argparse


def recognise(argv: Sequence[str]) -> bool:
    """True when `argv` is `[--env-file PATH] run ...`, as cli/main.py's parser would read it."""
    rest = list(argv)
    if rest[:1] == ["--env-file"] and len(rest) >= 2:
        rest = rest[2:]
    elif rest and rest[0].startswith("--env-file="):
        rest = rest[1:]
    return rest[:1] == ["run"]


def build_parser() -> argparse.ArgumentParser:
    """cli/main.py's parser with the run verb alone: the same options, help and errors for `run`."""
    import argparse

    from cogworker import __version__
    from cogworker.cli import run

    parser = argparse.ArgumentParser(prog="cogworker")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--env-file", metavar="PATH")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    run.register(sub, [])
    return parser


def main(argv: Sequence[str]) -> int:
    import gc

    from cogworker.cli import run

    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse: 2 after a usage error, 0 after --help
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if args.env_file is not None:
        from cogworker.config_error import ConfigError
        from cogworker.env_file import load_env_file

        try:
            load_env_file(args.env_file)
        except ConfigError as exc:
            return _fail(f"configuration error: {exc}", exitcodes.CONFIG_ERROR)
    try:
        overrides = run.overrides(args)
    except ValueError as exc:
        return _fail(str(exc), exitcodes.USAGE)
    from supervisor.forkserver.settings_check import SettingsCheck

    check = SettingsCheck.start(overrides)
    # With the collector off, and frozen without a collection after, as a fork server imports
    # (supervisor/forkserver/main.py and boot.py say why): the worker code's imports leave a few dozen
    # objects of garbage, and a full collection of everything they loaded costs 20-35 ms. The launcher
    # still collects, and then only what the app and it have made since.
    gc.disable()
    try:
        from cogworker.store import shards
        from cogworker.worker import main as worker_main  # noqa: F401 - imported here, beside the check
        from cogworker.worker.warm_up import warm_up

        warm_up()
        gc.freeze()
    finally:
        gc.enable()
    settings = check.result()
    if isinstance(settings, int):  # 78 for a bad setting: the check printed which
        return settings
    shards.use_settings(settings)
    return run.start(settings)


def _fail(message: str, code: int) -> int:
    print(f"cogworker: {message}", file=sys.stderr)
    return code
