"""`cogworker run [MODULE ...] [-Q QUEUES] [-c N]`: one worker process, what each swarm child runs.

Each option is a setting (`-Q` is COGWORKER_QUEUES, ...): given, it wins over the environment and an
env file; left out, they apply as before. The options are checked here, so a mistake in one is a
usage error (exit 2) naming the option rather than a bad-settings error naming a variable the user
never set.
"""

from __future__ import annotations

import argparse
from typing import Any, get_args, get_type_hints

from cogworker.cli.import_path import cwd_first_on_path
from cogworker.settings_fields import SettingsFields, parse_queues

DESCRIPTION = """\
Run one worker process: import the modules holding your jobs, then fetch and run jobs from the
queues until stopped. Each option stands for a setting and wins over its COGWORKER_* variable (from
the environment or --env-file); `cogworker settings` shows what the others are. The current
directory comes first on the import path, so an app beside it is found without PYTHONPATH.
TERM/INT: stop (drain for COGWORKER_TIMEOUT_S, then requeue what is left). USR1/TSTP: quiet.
TTIN: log every thread's stack. Exit codes: 0 stopped, 2 bad option, 3 a module failed to import,
78 bad settings."""

EPILOG = """\
examples:
  cogworker run myapp.jobs                       # the default queue, COGWORKER_CONCURRENCY threads
  cogworker run myapp.jobs -Q critical,default   # strict order: critical first, whenever it has jobs
  cogworker run myapp.jobs -Q critical:3,default:1 -c 20   # weighted, 20 job threads"""


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    # No --json parent: a worker's output is its log (COGWORKER_LOG_FORMAT).
    del parents
    parser = sub.add_parser(
        "run",
        help="run one worker process (what each swarm child runs)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "modules",
        metavar="MODULE",
        nargs="*",
        type=_module_names,
        help="modules to import so their @job functions are known, their submodules imported when a "
        "job of theirs is fetched (COGWORKER_REQUIRE; a,b counts as two)",
    )
    parser.add_argument(
        "-Q",
        "--queues",
        metavar="QUEUES",
        action="append",
        type=_queues,
        help="the queues to read, in strict order (critical,default) or weighted (critical:3,default:1); "
        "may be repeated (COGWORKER_QUEUES)",
    )
    parser.add_argument(
        "-c",
        "--concurrency",
        metavar="N",
        type=_positive_int,
        help="job threads (COGWORKER_CONCURRENCY)",
    )
    parser.add_argument(
        "--redis-url",
        metavar="URL",
        help="the Redis to use (COGWORKER_REDIS_URL). A password in it shows in `ps` and shell history "
        "until the worker has booted: give one with --env-file or the environment instead",
    )
    # From the plain fields, not the pydantic model: this parser is built without pydantic (run_fast.py).
    levels = get_args(get_type_hints(SettingsFields)["log_level"])
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        choices=levels or None,
        help=f"the lowest level logged: {', '.join(levels)} (COGWORKER_LOG_LEVEL)"
        if levels
        else "the lowest level logged (COGWORKER_LOG_LEVEL)",
    )


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """The settings the options give, by field name, for load_settings. Raises ValueError naming the
    option when -Q's parts only disagree together (one weighted, another not)."""
    given: dict[str, object] = {}
    if args.modules:
        given["require"] = ",".join(name for names in args.modules for name in names)
    if args.queues:
        joined = ",".join(args.queues)
        try:
            parse_queues(joined)
        except ValueError as exc:
            raise ValueError(f"-Q/--queues {joined}: {exc}") from None
        given["queues"] = joined
    if args.concurrency is not None:
        given["concurrency"] = args.concurrency
    if args.redis_url is not None:
        given["redis_url"] = args.redis_url
    if args.log_level is not None:
        given["log_level"] = args.log_level
    return given


def start(settings: SettingsFields) -> int:
    from cogworker.worker.main import main as run_main

    cwd_first_on_path()
    return run_main(settings)


def _module_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name.endswith(".py"):
            module = name.removesuffix(".py").replace("/", ".")
            raise argparse.ArgumentTypeError(f"{name!r} is a file name: give the module's name ({module})")
        if not all(part.isidentifier() for part in name.split(".")):
            raise argparse.ArgumentTypeError(f"{name!r} is not a module name (dotted, like myapp.jobs)")
    return names


def _queues(text: str) -> str:
    try:
        parse_queues(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 1 or more")
    return value
