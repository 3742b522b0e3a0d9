"""The `cogworker` command line: `cogworker run`, `cogworker swarm`, `cogworker settings` and the
operations verbs (`cogworker swarm` is recognised earlier, by cli/entry.py).

The argparse glue lives here; each verb group formats text or JSON in its own module
(cogworker/cli/<group>.py) from the plain data the operations (cogworker/ops/) return.
Exit codes: 0 ok, 1 an operational failure (a doctor FAIL, a job not found, Redis unreachable),
2 usage, 78 bad settings.
"""

from __future__ import annotations

import argparse
import os
import sys

import redis

from cogworker import __version__, exitcodes, logs
from cogworker.cli import (
    batch,
    cancel,
    chains,
    deploy,
    deploy_mark,
    doctor,
    enqueue,
    limiter,
    periodic,
    processes,
    queues,
    run,
    sets,
    settings_cmd,
    status,
    swarm,
    web,
)
from cogworker.cli.common import Context, Failure, json_flag
from cogworker.env_file import load_env_file
from cogworker.ops import OpsError
from cogworker.redact import safe_url
from cogworker.settings import ConfigError, load_or_exit
from cogworker.store import key_guard, shards
from cogworker.store.connection import is_unavailable

VERB_GROUPS = (
    run,
    swarm,
    status,
    queues,
    sets,
    enqueue,
    cancel,
    batch,
    chains,
    processes,
    periodic,
    limiter,
    doctor,
    web,
    deploy,
    deploy_mark,
    settings_cmd,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cogworker",
        description="Redis-backed background jobs. Settings come from COGWORKER_* variables: "
        "`cogworker deploy print-env` prints them all, each with its default.",
        epilog="Every verb but run takes --json. Exit codes: 0 ok, 1 failure (a doctor FAIL, a job not "
        "found, Redis unreachable), 2 usage, 78 bad settings.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--env-file",
        metavar="PATH",
        help="load VAR=value lines from PATH first (an instance's env file, e.g. /etc/cogworker/app.env); "
        "its values win over the environment's. Keeps a Redis password off the command line.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    parents = [json_flag()]
    for group in VERB_GROUPS:
        group.register(sub, parents)
    return parser


def main(argv: list[str] | None = None) -> int:
    found = swarm.recognise(sys.argv[1:] if argv is None else argv)
    if found is not None:
        return swarm.start(*found)  # its fork server reads and checks the settings
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 after a usage error, 0 after --help
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if args.verb is None:
        parser.print_help()
        return exitcodes.USAGE
    if args.verb == "deploy":
        return deploy.print_file(args)  # files shipped in the package: before any settings or Redis exist
    if args.env_file is not None:
        try:
            load_env_file(args.env_file)
        except ConfigError as exc:
            return _fail(f"configuration error: {exc}", exitcodes.CONFIG_ERROR)
    try:
        overrides = run.overrides(args) if args.verb == "run" else {}
    except ValueError as exc:
        return _fail(str(exc), exitcodes.USAGE)
    try:
        settings = load_or_exit(**overrides)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else exitcodes.CONFIG_ERROR
    shards.use_settings(settings)  # every verb, `run` too, reads and writes this deployment's keys
    if args.verb == "run":
        return run.start(settings)
    # Logs go to stderr: stdout carries the verb's output (--json must stay parseable).
    logs.configure(settings.log_level, settings.log_format, settings.log_levels)
    ctx = Context(settings, args, sys.stdout, sys.stderr)
    try:
        code: int = args.handler(ctx)
        return code
    except Failure as exc:
        return _fail(str(exc), exc.code)
    except OpsError as exc:
        return _fail(str(exc), exitcodes.FAILURE)
    except BrokenPipeError:
        # The reader went away (`cogworker dead list | head`): no traceback, nothing more to say.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.FAILURE
    except redis.RedisError as exc:
        if is_unavailable(exc):
            return _fail(f"can't reach Redis at {safe_url(settings.redis_url)}: {exc}", exitcodes.FAILURE)
        if isinstance(exc, key_guard.WrongTypeKey):
            return _fail(str(exc), exitcodes.FAILURE)  # it names the key and says what to do
        hint = "`cogworker doctor` checks key types; `cogworker doctor --fix` moves wrong ones aside"
        return _fail(f"Redis refused a command: {exc} ({hint})", exitcodes.FAILURE)
    finally:
        ctx.close()


def _fail(message: str, code: int) -> int:
    print(f"cogworker: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
